package cdb

import (
	"context"
	"sync"
	"time"
)

// The background budget: requests of low priority (the provider's
// reconciler, retention sweep, gauges and index check) wait while the
// account throttles, so that the RU/s it has go to turns first. Each 429
// the client sees, on any request, holds low-priority requests back for a
// pause that doubles while 429s go on coming within it, up to a bound, and
// falls back to its least once they stop for a whole pause. A request
// waits at most the bound, however long throttling lasts: background work
// slows down, it never stops (an outbox a crashed process left must still
// be delivered). Requests of other priorities never wait on it.

const (
	defaultBackgroundMinPause = 250 * time.Millisecond
	defaultBackgroundMaxPause = 10 * time.Second
)

// BackgroundOptions say how the client's low-priority requests
// (ContextWithPriorityLevel(ctx, PriorityLevelLow)) yield while the
// account throttles. Zero fields take the defaults.
type BackgroundOptions struct {
	// MinPause is how long low-priority requests wait after a 429 (on any
	// request) when none came in the pause before; default 250ms.
	MinPause time.Duration
	// MaxPause bounds the pause, which doubles with each 429 that comes
	// within it, and the time one request waits; default 10s.
	MaxPause time.Duration
	// Disable sends low-priority requests at once, throttled or not.
	Disable bool
}

func (o BackgroundOptions) withDefaults() BackgroundOptions {
	orDefault(&o.MinPause, defaultBackgroundMinPause)
	orDefault(&o.MaxPause, defaultBackgroundMaxPause)
	if o.MaxPause < o.MinPause {
		o.MaxPause = o.MinPause
	}
	return o
}

// backgroundBudget holds low-priority requests back after 429s.
type backgroundBudget struct {
	opts  BackgroundOptions
	mu    sync.Mutex
	until time.Time     // low-priority requests wait until then
	pause time.Duration // the pause the last 429 set
}

func newBackgroundBudget(o BackgroundOptions) *backgroundBudget {
	return &backgroundBudget{opts: o.withDefaults()}
}

// throttled records a 429: the pause starts again from now, twice as long
// when the last one had not ended.
func (b *backgroundBudget) throttled() {
	if b.opts.Disable {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if now.Before(b.until) {
		b.pause = min(2*b.pause, b.opts.MaxPause)
	} else {
		b.pause = b.opts.MinPause
	}
	b.until = now.Add(b.pause)
}

// holdUntil is when the pause ends.
func (b *backgroundBudget) holdUntil() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.until
}

// yield waits, for a low-priority request, until the pause ends, at most
// MaxPause; a 429 meanwhile extends the wait. Other requests go at once.
func (b *backgroundBudget) yield(ctx context.Context) error {
	if b.opts.Disable || priorityLevel(ctx) != PriorityLevelLow {
		return nil
	}
	limit := time.Now().Add(b.opts.MaxPause)
	for {
		wait := time.Until(b.holdUntil())
		if wait <= 0 {
			return nil
		}
		left := time.Until(limit)
		if left <= 0 {
			return nil
		}
		if err := sleep(ctx, min(wait, left)); err != nil {
			return err
		}
	}
}
