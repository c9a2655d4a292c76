package providertest

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/memprovider"
)

// recordingT is a checkT that records a failure instead of failing the
// test running it; FailNow ends the goroutine, as testing.T's does.
type recordingT struct {
	failed atomic.Bool
	logs   []string
}

func (r *recordingT) Helper()                           {}
func (r *recordingT) Errorf(format string, args ...any) { r.failed.Store(true) }
func (r *recordingT) FailNow()                          { r.failed.Store(true); runtime.Goexit() }
func (r *recordingT) Logf(format string, args ...any) {
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

// run runs check as a test would, and waits for it to end.
func (r *recordingT) run(check func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		check()
	}()
	<-done
}

// slowFetches is a provider whose worker fetches take slow each (after an
// abandon, while fetchesSlowed lasts), or whose abandons ignore their
// delay.
type slowFetches struct {
	cdb.Provider
	slow          time.Duration
	fetchesSlowed atomic.Int32
	ignoreDelay   bool
}

func (p *slowFetches) FetchWorkItem(ctx context.Context, lock, poll time.Duration, s *cdb.SessionFetchConfig, f cdb.TagFilter) (cdb.WorkItem, string, uint32, error) {
	if p.fetchesSlowed.Add(-1) >= 0 {
		time.Sleep(p.slow)
	}
	return p.Provider.FetchWorkItem(ctx, lock, poll, s, f)
}

func (p *slowFetches) AbandonWorkItem(ctx context.Context, token string, delay time.Duration, ignoreAttempt bool) error {
	if p.ignoreDelay {
		delay = 0
	}
	return p.Provider.AbandonWorkItem(ctx, token, delay, ignoreAttempt)
}

func lockedItem(t *testing.T, p cdb.Provider) string {
	ctx := t.Context()
	require.NoError(t, p.EnqueueForWorker(ctx, activityExecute("hidden", cdb.InitialExecutionID, 1, "TestActivity", "x")))
	_, token := fetchWork(ctx, t, p, time.Minute)
	return token
}

func newSlowFetches(t *testing.T) *slowFetches {
	mem := memprovider.New(memprovider.Options{})
	t.Cleanup(func() { _ = mem.Close() })
	return &slowFetches{Provider: mem}
}

// A fetch slower than the delay proves nothing: the check is made again
// with twice the delay, on a fetch that ran within it, and passes.
func TestAHiddenCheckWhoseFetchOutlastedTheDelayIsMadeAgainWithALongerOne(t *testing.T) {
	p := newSlowFetches(t)
	token := lockedItem(t, p)
	p.slow = 300 * time.Millisecond
	p.fetchesSlowed.Store(1)
	var rec recordingT
	var delay time.Duration
	rec.run(func() {
		delay = abandonWorkHidden(t.Context(), &rec, p, token, 100*time.Millisecond, time.Minute, "hidden")
	})
	assert.False(t, rec.failed.Load(), "a fetch that outlasted the delay fails nothing: %v", rec.logs)
	assert.NotEmpty(t, rec.logs, "the first check proved nothing")
	assert.GreaterOrEqual(t, delay, 200*time.Millisecond, "checked again with a longer delay")
}

// A store that shows an abandoned item before its delay has run out still
// fails the check.
func TestAHiddenCheckCatchesAnItemShownBeforeItsDelay(t *testing.T) {
	p := newSlowFetches(t)
	token := lockedItem(t, p)
	p.ignoreDelay = true
	var rec recordingT
	rec.run(func() { abandonWorkHidden(t.Context(), &rec, p, token, time.Minute, time.Minute, "hidden") })
	assert.True(t, rec.failed.Load(), "an item fetched back within its delay fails the check")
}

// However slow every fetch is, the check ends: after its last try it
// judges the item's return as duroxide does.
func TestAHiddenCheckEndsAfterItsTries(t *testing.T) {
	p := newSlowFetches(t)
	token := lockedItem(t, p)
	p.ignoreDelay = true
	p.slow = 20 * time.Millisecond
	p.fetchesSlowed.Store(100)
	var rec recordingT
	rec.run(func() { abandonWorkHidden(t.Context(), &rec, p, token, time.Millisecond, time.Minute, "hidden") })
	assert.True(t, rec.failed.Load())
	assert.Len(t, rec.logs, 5, "five inconclusive tries, judged on the sixth")
}
