package cdb

import (
	"context"

	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// throttledOnce answers the first request 429, every later one 200.
func throttledOnce(n int, _ wireRequest) (*http.Response, error) {
	if n == 0 {
		return reply(http.StatusTooManyRequests, `{"code":"TooManyRequests"}`, "x-ms-retry-after-ms", "1"), nil
	}
	return reply(http.StatusOK, `{"id":"a","pk":"p"}`), nil
}

func readAt(ctx context.Context, cc *ContainerClient) error {
	_, err := cc.ReadItem(ctx, NewPartitionKeyString("p"), "a", nil)
	return err
}

func TestRequestsCarryThePriorityLevelOfTheirContext(t *testing.T) {
	cc, st := newScriptedContainer(t, replyAlways(http.StatusOK, `{"id":"a","pk":"p"}`))
	ctx := testCtx(t)
	require.NoError(t, readAt(ctx, cc))
	require.NoError(t, readAt(ContextWithPriorityLevel(ctx, PriorityLevelLow), cc))
	require.NoError(t, readAt(ContextWithPriorityLevel(ctx, PriorityLevelHigh), cc))
	require.NoError(t, readAt(ContextWithPriorityLevel(ContextWithPriorityLevel(ctx, PriorityLevelLow), ""), cc))
	var sent []string
	for _, r := range documentRequests(st) {
		sent = append(sent, r.Header.Get("x-ms-cosmos-priority-level"))
	}
	assert.Equal(t, []string{"", "Low", "High", ""}, sent)
}

// TestLowPriorityRequestsYieldAfterA429: once the client has seen a 429,
// on any request, low-priority requests wait for the pause to end, while
// requests of other priorities go at once. Before any 429 nothing waits.
func TestLowPriorityRequestsYieldAfterA429(t *testing.T) {
	cc, st := newScriptedContainer(t, throttledOnce, func(o *ClientOptions) {
		o.Background = BackgroundOptions{MinPause: time.Hour, MaxPause: time.Hour}
	})
	ctx := testCtx(t)
	low := ContextWithPriorityLevel(ctx, PriorityLevelLow)
	cc.client.background.mu.Lock()
	require.True(t, cc.client.background.until.IsZero(), "no 429 yet")
	cc.client.background.mu.Unlock()

	require.NoError(t, readAt(ctx, cc), "a turn's read, throttled once, retried")
	require.Equal(t, 2, st.count())

	lowCtx, cancel := context.WithCancel(low)
	blocked := make(chan error, 1)
	go func() { blocked <- readAt(lowCtx, cc) }()
	require.NoError(t, readAt(ctx, cc), "a turn's read goes while a background read waits")
	require.NoError(t, readAt(ContextWithPriorityLevel(ctx, PriorityLevelHigh), cc))
	cancel()
	err := <-blocked
	require.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), "while yielding to requests of higher priority")
	assert.Equal(t, 4, st.count(), "the background read was never sent")
}

func TestTheBackgroundPauseCanBeTurnedOff(t *testing.T) {
	cc, st := newScriptedContainer(t, throttledOnce, func(o *ClientOptions) {
		o.Background = BackgroundOptions{MinPause: time.Hour, Disable: true}
	})
	ctx := testCtx(t)
	require.NoError(t, readAt(ctx, cc))
	require.NoError(t, readAt(ContextWithPriorityLevel(ctx, PriorityLevelLow), cc))
	assert.Equal(t, 3, st.count())
}

// TestALowPriorityRequestWaitsAtMostMaxPause: however long throttling
// lasts, background work slows down and never stops.
func TestALowPriorityRequestWaitsAtMostMaxPause(t *testing.T) {
	cc, _ := newScriptedContainer(t, throttledOnce, func(o *ClientOptions) {
		o.Background = BackgroundOptions{MinPause: time.Millisecond, MaxPause: 5 * time.Millisecond}
	})
	ctx := testCtx(t)
	require.NoError(t, readAt(ctx, cc))
	cc.client.background.mu.Lock()
	cc.client.background.until = time.Now().Add(time.Hour) // as if 429s had kept coming
	cc.client.background.mu.Unlock()
	require.NoError(t, readAt(ContextWithPriorityLevel(ctx, PriorityLevelLow), cc))
}

func TestThePauseDoublesWhile429sGoOnUpToItsBound(t *testing.T) {
	b := newBackgroundBudget(BackgroundOptions{MinPause: time.Minute, MaxPause: 5 * time.Minute})
	var pauses []time.Duration
	for range 5 {
		b.throttled()
		pauses = append(pauses, b.pause)
	}
	assert.Equal(t, []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 5 * time.Minute, 5 * time.Minute}, pauses)

	b.until = time.Now().Add(-time.Second) // the last pause ended with no 429
	b.throttled()
	assert.Equal(t, time.Minute, b.pause, "a 429 after a quiet pause starts from the least again")
}

func TestBackgroundOptionsDefaults(t *testing.T) {
	o := BackgroundOptions{}.withDefaults()
	assert.Equal(t, BackgroundOptions{MinPause: 250 * time.Millisecond, MaxPause: 10 * time.Second}, o)
	o = BackgroundOptions{MinPause: time.Minute, MaxPause: time.Second}.withDefaults()
	assert.Equal(t, time.Minute, o.MaxPause, "the bound is never under the least pause")
}
