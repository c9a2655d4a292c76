package sim

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"sync/atomic"
	"time"

	"github.com/duroxide-go/cdb"
	rt "github.com/duroxide-go/cdb/durable"
)

// treeDelete (Features.TreeDeletes) runs a Parent with one child, deletes
// the tree (force) through a process of its own that dies after its k-th
// write (or, with Faults.Pauses, stalls before it marks the child for longer
// than AbandonedDeletionAge and then resumes), and starts the parent's id again
// as soon as it reads NotFound: the second incarnation, whose first turn
// starts the child under the same id, must finish.
func (h *harness) treeDelete(ctx context.Context, idx int, id string, rng *rand.Rand) {
	if h.clientNode == nil {
		return
	}
	first := spec{Kind: kindParent, Run: fmt.Sprintf("%d.0", idx), N: 1, SleepMs: 300 + rng.Intn(700)}
	if err := h.startExpecting(ctx, id, first); err != nil {
		return
	}
	h.waitHistory(ctx, id, func(history []cdb.Event) bool {
		for _, ev := range history {
			if _, ok := ev.Kind.(cdb.SubOrchestrationScheduled); ok {
				return true
			}
		}
		return false
	})
	sleepCtx(ctx, time.Duration(rng.Intn(200))*time.Millisecond)

	deleter, err := h.clientNode(ctx)
	if err != nil {
		h.viol.add(invHarness, id, fmt.Sprintf("start the deleting process: %v", err))
		return
	}
	k := 1 + rng.Intn(4)
	var writes atomic.Int32
	// The k-th write of the deletion: one addressed to the tree's
	// partitions (the child's id starts with the parent's).
	kth := func(op string, seen []byte) bool {
		return isWrite(op) && bytes.Contains(seen, []byte(id)) && int(writes.Add(1)) == k
	}
	pause := h.env.cfg.Faults.Pauses && rng.Intn(2) == 0
	how := fmt.Sprintf("crashes after its write %d", k)
	if pause {
		// Before it marks the child: by the time it resumes, a reconciler
		// has finished the deletion and the parent's new life has started
		// the child again.
		d := 2*deletionAge + time.Second
		child := []byte(id + "::sub::")
		markChild := func(op string, seen []byte) bool { return op == "PatchItem" && bytes.Contains(seen, child) }
		deleter.transport.pauseOn.Store(&pauseTrigger{match: markChild, d: d})
		how = fmt.Sprintf("stalls %s before it marks the child", d)
	} else {
		// Recorded as a crash, as a node's is: what it owed after the
		// write (a ring of the bell, say) dies with it.
		died := func() { deleter.transport.kill(); h.env.rec.nodeCrashed(deleter.id) }
		deleter.transport.crashOn.Store(&crashTrigger{match: kth, after: true, fired: died})
	}
	h.env.logger.Info("tree deletion", "instance", id, "deleter", deleter.id, "how", how)
	deleted := make(chan error, 1)
	go func() {
		_, err := deleter.client.DeleteInstance(context.WithoutCancel(ctx), id, true)
		deleted <- err
	}()
	defer func() {
		<-deleted
		deleter.shutdown(context.WithoutCancel(ctx))
	}()
	// At once: the moment the parent reads deleted. A deletion whose
	// process died before it wrote its intent is retried by its caller,
	// as any caller that saw its call fail would.
	var answered error
	var retry chan struct{} // closed once the caller's retry has its answer
	var retried error       // the retry's answer, once retry is closed
	var gotAnswer bool      // the deleting call answered
	gone := h.env.progress.waitUntil(ctx, 5*time.Millisecond, func() bool {
		st, err := h.observer.GetStatus(ctx, id)
		if err == nil && st.State == rt.StateNotFound {
			return true
		}
		select {
		case answered = <-deleted:
			gotAnswer = true
			if answered != nil && retry == nil {
				retry = make(chan struct{})
				go func() {
					defer close(retry)
					retried = h.call(ctx, func(ctx context.Context, c *rt.Client) error {
						_, err := c.DeleteInstance(ctx, id, true)
						if isNotFound(err) {
							return nil
						}
						return err
					})
				}()
			}
			deleted <- answered // for the deferred wait
		default:
		}
		return false
	})
	if !gone {
		h.viol.add(invStuck, id, fmt.Sprintf("a tree deletion whose process %s never finished (%s; %s)", how, h.env.progress.why(), deletionCalls(gotAnswer, answered, retry, &retried)))
		return
	}
	if retry != nil {
		// As a caller would: the id starts again once its deletion has
		// answered. A retry still in flight deletes whatever life of the
		// id it finds, the next one included, as it was asked to.
		<-retry
	}
	h.env.stats.count(&h.env.stats.Deletes, 1)
	h.noteAccepted(id, false)
	second := spec{Kind: kindParent, Run: fmt.Sprintf("%d.1", idx), N: 1, SleepMs: rng.Intn(100)}
	_ = h.startExpecting(ctx, id, second)
}

// deletionCalls says what the deleting process's call answered and, if it
// failed, what its caller's retry did, for a deletion that never finished.
func deletionCalls(gotAnswer bool, answered error, retry chan struct{}, retried *error) string {
	switch {
	case !gotAnswer:
		return "the deleting call has not answered"
	case retry == nil:
		return fmt.Sprintf("the deleting call answered %v", answered)
	}
	select {
	case <-retry:
		return fmt.Sprintf("the deleting call answered %v; its caller's retry %v", answered, *retried)
	default:
		return fmt.Sprintf("the deleting call answered %v; its caller's retry is still under way", answered)
	}
}

// deletionAge is the nodes' AbandonedDeletionAge.
const deletionAge = 2 * time.Second
