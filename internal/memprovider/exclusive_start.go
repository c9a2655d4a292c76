package memprovider

import (
	"context"
	"fmt"

	"github.com/duroxide-go/cdb"
)

var _ cdb.ExclusiveStarter = (*Provider)(nil)

// EnqueueStartIfAbsent is cdb.ExclusiveStarter: under the store's mutex,
// the start is queued only while no instance has its id and no start of
// it is queued; otherwise it fails with cdb.ErrInstanceExists. A deletion
// here is one step, so no start meets one under way.
func (p *Provider) EnqueueStartIfAbsent(ctx context.Context, start cdb.StartOrchestrationMessage) error {
	const op = "EnqueueStartIfAbsent"
	e, err := encodeOrchItem(start)
	if err != nil {
		return refuse(op, err.Error(), err)
	}
	if err := p.begin(ctx, op); err != nil {
		return err
	}
	defer p.mu.Unlock()
	if why := p.idTaken(e.instance); why != "" {
		return refuse(op, fmt.Sprintf("instance %q %s", e.instance, why), cdb.ErrInstanceExists)
	}
	p.insertOrch(e, p.nowMs())
	p.notify()
	return nil
}

// idTaken says what holds instance's id: an instance (a row, or history a
// turn wrote without naming it) or a queued start; "" when it is free.
func (p *Provider) idTaken(instance string) string {
	if p.instances[instance] != nil || len(p.history[instance]) > 0 {
		return "exists"
	}
	for _, r := range p.orchQueue {
		if r.instance == instance && r.kind == "StartOrchestration" {
			return "has a start queued"
		}
	}
	return ""
}
