package durable

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// readCounting counts a client's history reads, which are its status
// reads: it hides the provider's StatusReader, so every GetStatus reads the
// history once. It passes on the end watches of watcher (nil: none).
type readCounting struct {
	cdb.Provider
	watcher cdb.OrchestrationEndWatcher
	reads   *atomic.Int64
}

func (r readCounting) Read(ctx context.Context, instance string) ([]cdb.Event, error) {
	// Counted once it answered: a read counted as it begins may yet see an
	// end the test makes after seeing the count.
	defer r.reads.Add(1)
	return r.Provider.Read(ctx, instance)
}

func (r readCounting) WatchOrchestrationEnd(instance string) (<-chan struct{}, func()) {
	if r.watcher == nil {
		return make(chan struct{}), func() {}
	}
	return r.watcher.WatchOrchestrationEnd(instance)
}

// gate is an orchestration that returns the data of its "go" event.
func gate(ctx *OrchestrationContext, _ string) (string, error) {
	return ctx.WaitForEvent("go").Await()
}

// waitResult is what a WaitForCompletion returned.
type waitResult struct {
	st  Status
	err error
}

// waitInBackground runs c.WaitForCompletion(instance) and returns where its
// result goes.
func waitInBackground(ctx context.Context, c *Client, instance string, timeout time.Duration) <-chan waitResult {
	done := make(chan waitResult, 1)
	go func() {
		st, err := c.WaitForCompletion(ctx, instance, timeout)
		done <- waitResult{st, err}
	}()
	return done
}

// A caller waiting in the process whose provider commits the ending turn
// learns of it from that commit: with their polls an hour apart,
// WaitForCompletion and WaitForStatusChange return the completed status
// after one status read before the end and one after it, none between.
// (The context's 30 s only bound a waiter that never learns.)
func TestWaitForCompletionLearnsTheEndFromTheCommitNotFromAPoll(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		watcher, ok := h.provider.(cdb.OrchestrationEndWatcher)
		if !ok {
			t.Skipf("%T tells no orchestration ends (cdb.OrchestrationEndWatcher): its waiters learn them by polling", h.provider)
		}
		h.orchestration("Gate", gate)
		h.run()
		h.start("gated", "Gate", "")
		var reads, changeReads atomic.Int64
		waiter := NewClient(readCounting{Provider: h.provider, watcher: watcher, reads: &reads})
		waiter.pollBackoff = pollBackoff{first: time.Hour, most: time.Hour}
		changeWaiter := NewClient(readCounting{Provider: h.provider, watcher: watcher, reads: &changeReads})
		changeWaiter.pollBackoff = waiter.pollBackoff
		ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
		defer cancel()
		done := waitInBackground(ctx, waiter, "gated", time.Hour)
		changed := make(chan waitResult, 1)
		go func() {
			st, err := changeWaiter.WaitForStatusChange(ctx, "gated", 0, time.Hour)
			changed <- waitResult{st, err}
		}()
		require.Eventually(t, func() bool { return reads.Load() >= 1 && changeReads.Load() >= 1 }, 10*time.Second, time.Millisecond,
			"the waiters read the status once")

		require.NoError(t, h.client.RaiseEvent(h.ctx, "gated", "go", "open"))
		for name, res := range map[string]waitResult{"WaitForCompletion": <-done, "WaitForStatusChange": <-changed} {
			require.NoError(t, res.err, "%s learns of the ending commit, its next poll an hour away", name)
			assert.Equal(t, StateCompleted, res.st.State, name)
			assert.Equal(t, "open", res.st.Output, name)
		}
		assert.Equal(t, int64(2), reads.Load(), "one status read before the end, one after the commit told it")
		assert.Equal(t, int64(2), changeReads.Load(), "one status read before the end, one after the commit told it")
	})
}

// A waiter whose provider does not see the ending commit (it is committed
// in another process) learns of it by polling, as before.
func TestWaitForCompletionLearnsAnEndCommittedElsewhereByPolling(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		h.orchestration("Gate", gate)
		h.run()
		h.start("gated", "Gate", "")
		var reads atomic.Int64
		deaf := NewClient(readCounting{Provider: h.provider, reads: &reads}) // its watches never fire
		openGateWhileWaiting(t, h, deaf, &reads, time.Minute)
	})
}

// The same across two providers on one account: the runtime's commits the
// end, the waiter's (another process's) sees it only in the store.
func TestWaitForCompletionOnAnotherProviderLearnsTheEndByPolling(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	h := newCosmosHarness(t, acct)
	h.orchestration("Gate", gate)
	h.run()
	h.start("gated", "Gate", "")
	other, err := cdb.NewProvider(h.ctx, cdb.Config{Client: acct.Client(), PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	defer cancel()
	done := waitInBackground(ctx, NewClient(other), "gated", time.Minute)

	require.NoError(t, h.client.RaiseEvent(h.ctx, "gated", "go", "open"))
	res := <-done
	require.NoError(t, res.err)
	assert.Equal(t, StateCompleted, res.st.State)
	assert.Equal(t, "open", res.st.Output)
}

// endAlreadyTold is a provider whose end watches fire at once, whatever
// the store says.
type endAlreadyTold struct{ readCounting }

func (endAlreadyTold) WatchOrchestrationEnd(string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	close(ch)
	return ch, func() {}
}

// A wake-up the store does not show (yet) costs one status read: the wait
// goes on polling with its backoff, not reading in a loop, and times out
// as before.
func TestWaitForCompletionPollsOnAfterAWakeUpTheStatusDoesNotShow(t *testing.T) {
	var reads atomic.Int64
	h := newHarness(t, testProviders[0].new(t))
	c := NewClient(endAlreadyTold{readCounting{Provider: h.provider, reads: &reads}})
	_, err := c.WaitForCompletion(h.ctx, "never-started", 300*time.Millisecond)
	require.ErrorIs(t, err, ErrTimeout)
	// From 5 ms doubling, 300 ms hold at most 8 reads, and the wake-up one more.
	assert.LessOrEqual(t, reads.Load(), int64(9), "status reads in 300 ms")
}

// reportingReadCounting is readCounting that passes on the statuses the
// provider reports for the ends it told (cdb.OrchestrationEndReporter).
type reportingReadCounting struct {
	readCounting
	reporter cdb.OrchestrationEndReporter
}

func (r reportingReadCounting) EndedStatus(ended <-chan struct{}) (cdb.OrchestrationStatus, bool) {
	return r.reporter.EndedStatus(ended)
}

// A provider that reports the status its ending commit wrote spares the
// woken waiter its read: WaitForCompletion returns the completed status,
// output and all, after the one status read before the end.
func TestWaitForCompletionTakesTheStatusTheEndingCommitReports(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		told, ok := h.provider.(interface {
			cdb.OrchestrationEndWatcher
			cdb.OrchestrationEndReporter
		})
		if !ok {
			t.Skipf("%T reports no ended statuses (cdb.OrchestrationEndReporter): its waiters read them", h.provider)
		}
		h.orchestration("Gate", gate)
		h.run()
		h.start("gated", "Gate", "")
		var reads atomic.Int64
		waiter := NewClient(reportingReadCounting{readCounting{Provider: h.provider, watcher: told, reads: &reads}, told})
		waiter.pollBackoff = pollBackoff{first: time.Hour, most: time.Hour}
		openGateWhileWaiting(t, h, waiter, &reads, time.Hour)
		assert.Equal(t, int64(1), reads.Load(), "the read before the end alone")
	})
}

// openGateWhileWaiting has waiter wait for the "gated" instance (within
// timeout), raises its "go" event once the waiter read the status once, and
// requires the completed status the wait returns.
func openGateWhileWaiting(t *testing.T, h *harness, waiter *Client, reads *atomic.Int64, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	defer cancel()
	done := waitInBackground(ctx, waiter, "gated", timeout)
	require.Eventually(t, func() bool { return reads.Load() >= 1 }, 10*time.Second, time.Millisecond, "the waiter read the status once")

	require.NoError(t, h.client.RaiseEvent(h.ctx, "gated", "go", "open"))
	res := <-done
	require.NoError(t, res.err)
	assert.Equal(t, StateCompleted, res.st.State)
	assert.Equal(t, "open", res.st.Output)
}

// holdingReadCounting is reportingReadCounting whose provider says it
// holds every instance while holds is set (cdb.OrchestrationHolder), and
// counts how often it was asked.
type holdingReadCounting struct {
	reportingReadCounting
	holds *atomic.Bool
	asked *atomic.Int64
}

func (h holdingReadCounting) HoldsOrchestration(string) bool {
	h.asked.Add(1)
	return h.holds.Load()
}

// heldGate is a running "gated" Gate instance on h, and a waiter on h's
// provider that polls every millisecond and is told the provider holds the
// instance (holds, set at first) and counts its reads and the questions.
type heldGate struct {
	waiter       *Client
	reads, asked atomic.Int64
	holds        atomic.Bool
}

func startHeldGate(t *testing.T, h *harness) *heldGate {
	t.Helper()
	h.orchestration("Gate", gate)
	h.run()
	h.start("gated", "Gate", "")
	told := h.provider.(interface {
		cdb.OrchestrationEndWatcher
		cdb.OrchestrationEndReporter
	})
	g := &heldGate{}
	g.holds.Store(true)
	g.waiter = NewClient(holdingReadCounting{reportingReadCounting{readCounting{Provider: h.provider, watcher: told, reads: &g.reads}, told}, &g.holds, &g.asked})
	g.waiter.pollBackoff = pollBackoff{first: time.Millisecond, most: time.Millisecond, longest: time.Millisecond}
	return g
}

// While the provider holds the instance, a wait's polls ask it instead of
// reading the status: only a commit of that provider can end the instance,
// and it wakes the wait. Once the hold ends, the polls read again.
func TestWaitForCompletionReadsNoStatusWhileTheProviderHoldsTheInstance(t *testing.T) {
	h := newCosmosHarness(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{}))
	g := startHeldGate(t, h)
	ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	defer cancel()
	done := waitInBackground(ctx, g.waiter, "gated", time.Minute)
	require.Eventually(t, func() bool { return g.asked.Load() >= 20 }, 10*time.Second, time.Millisecond, "the polls ask the provider")
	assert.Zero(t, g.reads.Load(), "no status read while the provider holds the instance")

	g.holds.Store(false)
	require.Eventually(t, func() bool { return g.reads.Load() >= 1 }, 10*time.Second, time.Millisecond, "the polls read once the hold ends")
	require.NoError(t, h.client.RaiseEvent(h.ctx, "gated", "go", "open"))
	res := <-done
	require.NoError(t, res.err)
	assert.Equal(t, StateCompleted, res.st.State)
	assert.Equal(t, "open", res.st.Output)
}

// A wait that times out while the provider held the instance throughout
// still returns the status as it stands, read once at the end, as a wait
// that polled returns its last read.
func TestWaitForCompletionTimingOutWhileHeldReturnsTheStatusAsItStands(t *testing.T) {
	h := newCosmosHarness(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{}))
	g := startHeldGate(t, h)
	require.Eventually(t, func() bool {
		st, err := h.client.GetStatus(h.ctx, "gated")
		return err == nil && st.State == StateRunning
	}, 10*time.Second, 10*time.Millisecond, "the first turn ran")
	st, err := g.waiter.WaitForCompletion(h.ctx, "gated", 100*time.Millisecond)
	require.ErrorIs(t, err, ErrTimeout)
	assert.Equal(t, StateRunning, st.State)
	assert.Equal(t, int64(1), g.reads.Load(), "one read, at the end")
	assert.Positive(t, g.asked.Load())
}

// failingOnce fails its first history read with a retryable error, as a
// store's transient refusal that outlasted the client's own retries.
type failingOnce struct {
	cdb.Provider
	failed *atomic.Bool
}

func (f failingOnce) Read(ctx context.Context, instance string) ([]cdb.Event, error) {
	if f.failed.CompareAndSwap(false, true) {
		return nil, &cdb.ProviderError{Op: "Read", Message: "the store refused the read for now", Retryable: true}
	}
	return f.Provider.Read(ctx, instance)
}

// A status read that fails for now is read again at the next poll: the
// wait returns the end, not the failure. Before, one failed read ended
// the wait with its error (the simulation's *wait*, on an injected 401).
func TestWaitForCompletionReadsAgainAfterARetryableFailure(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		h.orchestration("Gate", gate)
		h.run()
		h.start("flaky-read", "Gate", "")
		var failed atomic.Bool
		c := NewClient(failingOnce{Provider: readCounting{Provider: h.provider, reads: new(atomic.Int64)}, failed: &failed})
		require.NoError(t, h.client.RaiseEvent(context.Background(), "flaky-read", "go", "open"))
		st, err := c.WaitForCompletion(context.Background(), "flaky-read", time.Minute)
		require.NoError(t, err)
		assert.True(t, failed.Load(), "the first read failed")
		assert.Equal(t, StateCompleted, st.State)
		assert.Equal(t, "open", st.Output)
	})
}
