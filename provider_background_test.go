package cdb_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/telemetrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// turnKey marks the context of the calls a test makes as a runtime would
// for a turn, so that the transport can tell their requests apart from the
// provider's own background work.
type turnKey struct{}

// priorityLog records the priority level every request carries, split
// into the requests of marked calls and the others.
type priorityLog struct {
	next  http.RoundTripper
	mu    sync.Mutex
	turn  []loggedRequest
	other []loggedRequest
}

type loggedRequest struct {
	priority string
	body     []byte
}

func (l *priorityLog) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := loggedRequest{priority: r.Header.Get("x-ms-cosmos-priority-level")}
	if r.GetBody != nil {
		if body, err := r.GetBody(); err == nil {
			rec.body, _ = io.ReadAll(body)
		}
	}
	l.mu.Lock()
	if r.Context().Value(turnKey{}) != nil {
		l.turn = append(l.turn, rec)
	} else {
		l.other = append(l.other, rec)
	}
	l.mu.Unlock()
	return l.next.RoundTrip(r)
}

// priorities is the priority level of each request, of marked calls or
// not, whose body holds marker.
func (l *priorityLog) priorities(turn bool, marker string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	reqs := l.other
	if turn {
		reqs = l.turn
	}
	var out []string
	for _, r := range reqs {
		if bytes.Contains(r.body, []byte(marker)) {
			out = append(out, r.priority)
		}
	}
	return out
}

const (
	gaugeQueryMarker     = "COUNT(1) AS n, MIN(" // a gauge sample's query
	reconcileQueryMarker = "c.owner, c.beatAt"   // the reconciler's look for stale outboxes
)

func newLoggedProvider(t *testing.T, cfg cdb.Config) *priorityLog {
	t.Helper()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{PartitionKeyRanges: 2})
	log := &priorityLog{next: acct.Transport()}
	client, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(), Transport: log,
		Telemetry: cdb.Telemetry{Meter: telemetrytest.NewRecorder()}})
	require.NoError(t, err)
	cfg.Client, cfg.ShortPolling = client, true
	cfg.GaugeInterval, cfg.ReconcileInterval = 20*time.Millisecond, 20*time.Millisecond
	p, err := cdb.NewProvider(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })

	ctx := context.WithValue(rulesContext(t), turnKey{}, true)
	parentStartsChild(ctx, t, p, "parent", "parent::child", "in")
	childTakesStart(ctx, t, p, "parent", "parent::child", "in")
	require.Eventually(t, func() bool {
		return len(log.priorities(false, gaugeQueryMarker)) > 0 && len(log.priorities(false, reconcileQueryMarker)) > 0
	}, 10*time.Second, 10*time.Millisecond, "the gauges and the reconciler ran")
	return log
}

// TestBackgroundWorkIsLowPriorityAndTurnsAreNot: the provider's gauges and
// reconciler send x-ms-cosmos-priority-level Low, while the requests of a
// turn (enqueue, fetch, ack, the delivery of its outbox) carry no level,
// which the service reads as High.
func TestBackgroundWorkIsLowPriorityAndTurnsAreNot(t *testing.T) {
	log := newLoggedProvider(t, cdb.Config{})
	for _, marker := range []string{gaugeQueryMarker, reconcileQueryMarker} {
		for _, level := range log.priorities(false, marker) {
			assert.Equal(t, "Low", level, "background requests (%s)", marker)
		}
	}
	turn := log.priorities(true, "")
	require.NotEmpty(t, turn)
	for _, level := range turn {
		assert.Empty(t, level, "a turn's requests go at the default priority, High")
	}
}

func TestBackgroundPriorityHighSendsBackgroundWorkAsAnyOther(t *testing.T) {
	log := newLoggedProvider(t, cdb.Config{BackgroundPriority: cdb.PriorityLevelHigh})
	for _, marker := range []string{gaugeQueryMarker, reconcileQueryMarker} {
		for _, level := range log.priorities(false, marker) {
			assert.Empty(t, level, "background requests (%s)", marker)
		}
	}
}

func TestNewProviderRefusesAnUnknownBackgroundPriority(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	_, err := cdb.NewProvider(rulesContext(t), cdb.Config{Client: acct.Client(), BackgroundPriority: "Medium"})
	require.ErrorIs(t, err, cdb.ErrInvalidInput)
	assert.Contains(t, err.Error(), `Config.BackgroundPriority "Medium"`)
}

// TestTurnsGoOnWhileTheAccountThrottlesBackgroundWork: an account with
// priority-based execution throttles Low requests first; here it throttles
// every one of them (429), and the client's background budget holds them
// back. Turns go on as if nothing happened: they never wait on it.
func TestTurnsGoOnWhileTheAccountThrottlesBackgroundWork(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	var mu sync.Mutex
	throttled := 0
	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusTooManyRequests, RetryAfter: time.Millisecond,
		Match: func(r cdb.FakeRequest) bool {
			if r.PriorityLevel != "Low" {
				return false
			}
			mu.Lock()
			defer mu.Unlock()
			throttled++
			return true
		}})
	client, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(), Transport: acct.Transport(),
		Telemetry: cdb.Telemetry{Meter: telemetrytest.NewRecorder()}})
	require.NoError(t, err)
	p, err := cdb.NewProvider(context.Background(), cdb.Config{Client: client, ShortPolling: true,
		GaugeInterval: 20 * time.Millisecond, ReconcileInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return throttled > 0
	}, 10*time.Second, 10*time.Millisecond, "background work was throttled")

	ctx := rulesContext(t)
	for _, parent := range []string{"a", "b", "c"} {
		parentStartsChild(ctx, t, p, parent, parent+"::child", "in")
		childTakesStart(ctx, t, p, parent, parent+"::child", "in")
	}
}
