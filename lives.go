package cdb

import (
	"context"
	"fmt"
)

// Lives and the messages between them: a message reaches only the life it
// was sent to.
//
// An id can be deleted and started again at once, and a tree's new root
// starts its children under the same deterministic ids, with the same
// execution ids and event ids. A message sent to the previous life of an
// id (a child's completion held by a relay, or in an outbox delivered
// late; a parent's start or cancel cascade) would read as the new life's
// own. So a commit addresses what it sends:
//
//   - every message carries its sender and the sender's life (From,
//     FromLife), which the commit knows: its instance document's;
//   - a message to the commit's own instance, or to its parent, carries
//     the life it is for (ToLife): its own life, or the parent's life that
//     the child recorded from the start that began it (ParentLife);
//   - a fetch consumes, unseen by the runtime, a message whose ToLife is
//     not its instance's life, and a message from its parent's id whose
//     FromLife is not the parent life it was started by. A missing instance
//     document is created by the fetch with a new life, so a message for a
//     life that is gone is dropped whether or not the id lives again;
//   - a start from a parent begins a child only while that parent life
//     lives: the first turn of a child reads its parent's instance
//     document (one point read, on that turn alone) and drops a start from
//     a parent life that is gone, being deleted, or replaced by the next.
//     A child whose start was delivered but not yet taken when its tree was
//     deleted is no named child, so the deletion does not find it; without
//     this it would run for the dead parent, and its id would refuse the
//     new parent's start.
//
// Messages from outside (a client's start or event) and messages written
// before lives were recorded carry no life, and are taken as they always
// were; so are messages to an instance that recorded none.

// lifeAddress is where a message a commit sends comes from and goes to.
type lifeAddress struct {
	to, from, fromLife string
}

// senderLives is what a commit knows of the lives it sends between.
type senderLives struct {
	self, life         string
	parent, parentLife string
}

// sendingLives reads them from the instance document the commit writes.
func sendingLives(inst instanceDoc) senderLives {
	return senderLives{self: inst.Instance, life: inst.Life, parent: derefOr(inst.Parent, ""), parentLife: inst.ParentLife}
}

// address is the address of a message to target.
func (s senderLives) address(target string) lifeAddress {
	switch {
	case target == s.self:
		return lifeAddress{to: s.life}
	case target == s.parent:
		return lifeAddress{to: s.parentLife, from: s.self, fromLife: s.life}
	}
	return lifeAddress{from: s.self, fromLife: s.life}
}

// parentLifeOfStart is the life of the parent whose start begins the
// instance: the first start in the batch that is not a stray (the one the
// runtime takes), when that parent sent it.
func parentLifeOfStart(lock *orchestrationLock, parent *string) string {
	if parent == nil {
		return ""
	}
	for _, m := range lock.messages {
		if lock.strays[m.ID] {
			continue
		}
		item, err := UnmarshalWorkItem([]byte(m.Item))
		if err != nil {
			continue
		}
		if _, ok := item.(StartOrchestrationMessage); ok {
			if m.From == *parent {
				return m.FromLife
			}
			return ""
		}
	}
	return ""
}

// sentToAnotherLife says m was sent to a life of inst's id other than
// inst's: its ToLife names another, or it comes from another life of the
// parent inst was started by.
func sentToAnotherLife(inst *instanceDoc, m queueDoc) bool {
	if m.ToLife != "" && m.ToLife != inst.Life {
		return true
	}
	return m.FromLife != "" && inst.ParentLife != "" && inst.Parent != nil &&
		m.From == *inst.Parent && m.FromLife != inst.ParentLife
}

// withoutStrays leaves out of the runtime's batch the messages sent to
// another life (lock.strays); they stay in the lock's messages, so the
// turn's ack consumes them with the others. It returns the items left.
func (p *CosmosProvider) withoutStrays(ctx context.Context, lock *orchestrationLock, items []WorkItem) ([]WorkItem, error) {
	live, err := p.liveParentLives(ctx, lock, items)
	if err != nil {
		return nil, err
	}
	kept := items[:0:0]
	for i, m := range lock.messages {
		if sentToAnotherLife(&lock.inst, m) || live != nil && startFromParent(items[i], m) && live[m.From] != m.FromLife {
			if lock.strays == nil {
				lock.strays = map[string]bool{}
			}
			lock.strays[m.ID] = true
			p.log.Warn("cdb: dropped a message sent to another life of its instance or from a life that is gone",
				"instance", m.Instance, "message", m.ID, "kind", items[i].Kind(), "from", m.From)
			continue
		}
		kept = append(kept, items[i])
	}
	return kept, nil
}

// startFromParent says item is a child's start sent by its parent's commit,
// with the parent's life; a detached start (no parent) begins its instance
// whatever became of its sender.
func startFromParent(item WorkItem, m queueDoc) bool {
	start, ok := item.(StartOrchestrationMessage)
	return ok && m.FromLife != "" && start.ParentInstance != nil && *start.ParentInstance == m.From
}

// liveParentLives reads, for a batch that may begin the instance (no turn
// has named it yet), the current life of each parent whose start is in it:
// "" for a parent that is gone or being deleted. It is nil for an instance
// that has begun: its parent life is recorded.
func (p *CosmosProvider) liveParentLives(ctx context.Context, lock *orchestrationLock, items []WorkItem) (map[string]string, error) {
	if lock.inst.exists() {
		return nil, nil
	}
	var lives map[string]string
	for i, m := range lock.messages {
		if !startFromParent(items[i], m) {
			continue
		}
		if _, known := lives[m.From]; known {
			continue
		}
		// From the primary: a stale replica could show the parent's last
		// life, marked, and the start of its next life would be dropped.
		parent, err := p.readInstanceLatest(ctx, instancePartitionKey(m.From))
		if err != nil {
			return nil, fmt.Errorf("read the parent of a start: %w", err)
		}
		if lives == nil {
			lives = map[string]string{}
		}
		lives[m.From] = ""
		if parent != nil && parent.Deleting == "" {
			lives[m.From] = parent.Life
		}
	}
	return lives, nil
}

// dropStrays consumes a batch of messages that were all sent to other
// lives, and frees the lock, in one batch; a nameless instance document
// the fetch created for them goes too, unless messages of the id are
// parked (as dropOrphans).
func (p *CosmosProvider) dropStrays(ctx context.Context, lock *orchestrationLock) error {
	ctx, cancel := givingBack(ctx) // a fetch whose caller went away still gives back what it locked
	defer cancel()
	keep := lock.inst.exists() || lock.inst.ParkedUntil > p.nowMs()
	resp, err := p.sendGiveBack(ctx, "FetchOrchestrationItem", lock, func(etag ETag) *TransactionalBatch {
		b := p.container.NewTransactionalBatch(NewPartitionKeyString(lock.pk))
		if keep {
			b.PatchItem(instanceDocID, unlockOps(), &TransactionalBatchItemOptions{IfMatch: &etag})
		} else {
			b.DeleteItem(instanceDocID, &TransactionalBatchItemOptions{IfMatch: &etag})
		}
		for _, m := range lock.messages {
			consumeItem(b, m, nil)
		}
		return b
	})
	if err != nil {
		return err
	}
	if !resp.Success {
		return errContended // the lock expired and another fetch took the instance
	}
	return &skipError{reason: "only messages sent to another life"}
}
