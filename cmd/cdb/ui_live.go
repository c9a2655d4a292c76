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
// uiLiveKept are kept for the charts.

const (
	uiLiveInterval = 2 * time.Second
	uiLiveKept     = 90
)

// uiLive takes and keeps the live page's samples.
type uiLive struct {
	mu    sync.Mutex
	view  *topView
	stats cdb.ClientStats // the client's at the last sample, for the view's own cost
	kept  []topSample
	taken time.Time // when the last sample was taken, by this machine's clock
}

func newUILive(p *cdb.CosmosProvider, endpoint string) *uiLive {
	return &uiLive{view: &topView{p: p, endpoint: endpoint, opts: topOptions{interval: uiLiveInterval}}}
}

// samples are the kept samples, with a new one when the last is older
// than the interval.
func (l *uiLive) samples(ctx context.Context) ([]topSample, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.kept) > 0 && time.Since(l.taken) < uiLiveInterval {
		return l.kept, nil
	}
	var prev *topSample
	if len(l.kept) > 0 {
		prev = &l.kept[len(l.kept)-1]
	}
	before := l.view.p.Client().Stats()
	if len(l.kept) == 0 {
		l.stats = before
	}
	s, err := l.view.take(ctx, len(l.kept)+1, prev)
	if err != nil {
		return nil, err
	}
	after := l.view.p.Client().Stats()
	s.View = costBetween(l.stats, after, s.Seconds)
	l.stats, l.taken = after, time.Now()
	l.kept = append(l.kept, s)
	if len(l.kept) > uiLiveKept {
		l.kept = append([]topSample(nil), l.kept[len(l.kept)-uiLiveKept:]...)
	}
	return l.kept, nil
}
