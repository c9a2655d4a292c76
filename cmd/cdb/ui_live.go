package main

import (
	"context"
	"sync"
	"time"

	"github.com/duroxide-go/cdb"
)

// The live page charts what cdb top shows. Its samples are cdb top's
// (topView.take), taken when the page asks and the last one is older than
// uiLiveInterval, so that several open tabs cost what one does; the last
// uiLiveKept are kept for the charts. Each adds the latencies the UI
// derives from the histories of the instances that ended since the
// previous one, and the RU per orchestration (ui_latency.go).

const (
	uiLiveInterval = 2 * time.Second
	uiLiveKept     = 90
)

// uiLive takes and keeps the live page's samples.
type uiLive struct {
	mu    sync.Mutex
	view  *topView
	stats cdb.ClientStats // the client's at the last sample, for the view's own cost
	kept  []uiSample
	taken time.Time       // when the last sample was taken, by this machine's clock
	seen  map[string]bool // the instances the last sample measured
}

func newUILive(p *cdb.CosmosProvider, endpoint string) *uiLive {
	return &uiLive{view: &topView{p: p, endpoint: endpoint, opts: topOptions{interval: uiLiveInterval}}}
}

// samples are the kept samples, with a new one when the last is older
// than the interval.
func (l *uiLive) samples(ctx context.Context) ([]uiSample, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.kept) > 0 && time.Since(l.taken) < uiLiveInterval {
		return l.kept, nil
	}
	var prev *topSample
	if len(l.kept) > 0 {
		prev = &l.kept[len(l.kept)-1].topSample
	}
	before := l.view.p.Client().Stats()
	if len(l.kept) == 0 {
		l.stats = before
	}
	top, err := l.view.take(ctx, len(l.kept)+1, prev)
	if err != nil {
		return nil, err
	}
	s := uiSample{topSample: top, RUPerOrchestration: ruPerOrchestration(append(l.tops(), top))}
	if prev != nil {
		if err := l.measureLatencies(ctx, &s, prev.Time); err != nil {
			return nil, err
		}
	}
	after := l.view.p.Client().Stats()
	s.View = costBetween(l.stats, after, s.Seconds)
	l.stats, l.taken = after, time.Now()
	l.kept = append(l.kept, s)
	if len(l.kept) > uiLiveKept {
		l.kept = append([]uiSample(nil), l.kept[len(l.kept)-uiLiveKept:]...)
	}
	return l.kept, nil
}

// tops are the kept samples as cdb top took them.
func (l *uiLive) tops() []topSample {
	out := make([]topSample, len(l.kept))
	for i, s := range l.kept {
		out[i] = s.topSample
	}
	return out
}

// measureLatencies fills s's latencies from the instances that ended since
// the previous sample's time.
func (l *uiLive) measureLatencies(ctx context.Context, s *uiSample, since time.Time) error {
	histories, seen, err := endedHistories(ctx, l.view.p, since, l.seen)
	if err != nil {
		return err
	}
	l.seen = seen
	turns, activities := historyLatencies(histories)
	s.Ended, s.TurnLatency, s.ActivityLatency = len(histories), latencySpread(turns), latencySpread(activities)
	return nil
}
