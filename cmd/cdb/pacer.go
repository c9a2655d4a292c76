package main

import (
	"context"
	"time"
)

// ruPacer spaces the demo's order starts so that its RU consumption stays
// within a budget per second on average, as a container's provisioned
// throughput requires. An order spends its RU over the seconds after it
// starts, so order i waits both for the RU consumed so far and for i orders'
// worth of estimated RU to fit in the budget: the first keeps pace with what
// the account really charges, the second stops a burst of cheap starts
// before their cost shows.
type ruPacer struct {
	perSecond float64        // the budget, RU/s
	perOrder  float64        // estimated RU of one order
	consumed  func() float64 // RU consumed since the demo began
	now       func() time.Time
	sleep     func(context.Context, time.Duration) error
	start     time.Time
}

func newRUPacer(perSecond, perOrder float64, consumed func() float64) *ruPacer {
	return &ruPacer{perSecond: perSecond, perOrder: perOrder, consumed: consumed, now: time.Now, sleep: sleepOrDone, start: time.Now()}
}

// restart counts the budget from now.
func (p *ruPacer) restart() { p.start = p.now() }

// wait blocks until order i (from 0) may start.
func (p *ruPacer) wait(ctx context.Context, i int) error {
	for {
		d := p.delay(i)
		if d <= 0 {
			return nil
		}
		if err := p.sleep(ctx, d); err != nil {
			return err
		}
	}
}

// delay is how long order i must still wait: until the budget since the
// start covers both the RU consumed and i orders' estimate.
func (p *ruPacer) delay(i int) time.Duration {
	need := max(p.consumed(), float64(i)*p.perOrder)
	return p.secondsFor(need) - p.now().Sub(p.start)
}

// timeFor is how long the budget takes to cover n orders' estimate.
func (p *ruPacer) timeFor(n int) time.Duration { return p.secondsFor(float64(n) * p.perOrder) }

func (p *ruPacer) secondsFor(ru float64) time.Duration {
	return time.Duration(ru / p.perSecond * float64(time.Second))
}

// sleepOrDone waits d or until ctx ends.
func sleepOrDone(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
