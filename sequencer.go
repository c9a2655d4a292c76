package cdb

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// A message's seq orders it among its instance's messages. Each process
// hands out seqs from its own clock (nextSeq), and clocks are skewed: an
// event enqueued through a process whose clock is behind, after one through
// a process whose clock is ahead had returned, would get the lower seq and
// be delivered first (found by the simulation with ±50 ms of skew). So a
// message enqueued from outside a commit (an event, a raise, a cancel) is
// written together with the partition's sequencer document, in one
// transactional batch whose patch only applies while the sequencer is below
// the message's seq: writes into one partition are serialised, so a message
// written after another returned always has the higher seq, whichever
// processes wrote them. A process whose seq is too low reads the sequencer,
// moves its own clock past it and sends again.
//
// Only within maxSeqLead of the writer's clock, though. A sequencer further
// ahead was written by a clock that is wrong: following it would make
// this message, and everything this process sends afterwards, visible only
// at that clock's time. The patch overwrites such a sequencer instead
// (its condition also holds above seqCeiling), so the healthy processes'
// messages keep their order among themselves and their visibility, and
// the wrong clock's messages go after them, at that clock's time.
//
// The sequencer expires (sequencerTTL) once the partition is quiet: after
// that long every process's clock has moved past it, so a new one starts
// from the writer's clock without reordering anything.

const (
	docSequencer   = "seq" // a partition's highest enqueue seq
	sequencerDocID = "seq"
	// sequencerTTL is how long, in seconds, a partition's sequencer
	// outlives its last enqueue: far longer than any clock skew.
	sequencerTTL = 24 * 60 * 60
	// maxSequencerRounds bounds the sends of one enqueue that meets a
	// higher seq each time (writers racing into one partition).
	maxSequencerRounds = 16
)

type sequencerDoc struct {
	ID   string `json:"id"`
	PK   string `json:"pk"`
	Type string `json:"type"`
	Seq  int64  `json:"seq"`
	TTL  int    `json:"ttl"`
}

// enqueueSequenced writes the orchestrator message item (id fixed) into its
// instance's partition, after every message sequenced there before, and
// returns when it becomes visible.
func (p *CosmosProvider) enqueueSequenced(ctx context.Context, item WorkItem, id string, delay time.Duration) (time.Time, error) {
	pkValue := instancePartitionKey(item.InstanceID())
	pk := NewPartitionKeyString(pkValue)
	unknown := false // some send's outcome was unknown: the message may be in
	unpurged := false
	for round := 0; round < maxSequencerRounds; round++ {
		seq := p.nextSeq()
		visibleAt := sequencedVisibleAt(seq, p.now(), delay)
		at := dueAt(visibleAt.UnixMilli(), seq)
		if delay <= 0 {
			at = immediateAt(visibleAt.UnixMilli(), seq)
		}
		doc, err := p.newMessageDoc(item, id, at, p.ownWrites.messageWriter(at.visibleAt, unknownPin), "")
		if err != nil {
			return time.Time{}, refuse("EnqueueForOrchestrator", "", err)
		}
		done, sent, err := p.sendSequenced(ctx, pkValue, seq, markedOnConsume(doc))
		unknown = unknown || sent
		if err != nil || done {
			return visibleAt, err
		}
		// A higher seq is there: ours, if a lost response hid our write.
		if unknown {
			if _, err := p.readLatest(ctx, pk, id); err == nil {
				return visibleAt, nil // the message, or its consumer's marker
			} else if !IsNotFound(err) {
				return time.Time{}, err
			}
		}
		found, err := p.catchUpWithSequencer(ctx, pk)
		if err != nil {
			return time.Time{}, err
		}
		if unpurged = !found; unpurged {
			// The send met a sequencer (its create a 409) that no read
			// sees: one that expired and that the account has not purged
			// yet still holds its id. Give the purge time rather than loop
			// at once.
			if err := sleep(ctx, unpurgedSequencerWait(round)); err != nil {
				return time.Time{}, err
			}
		}
	}
	if unpurged {
		return time.Time{}, transient("EnqueueForOrchestrator", fmt.Sprintf("instance %q: its partition's expired sequencer is not purged yet", item.InstanceID()), nil)
	}
	return time.Time{}, transient("EnqueueForOrchestrator", fmt.Sprintf("instance %q: other writers kept moving its message sequence ahead", item.InstanceID()), nil)
}

// sendSequenced sends the message with the sequencer's patch, or with its
// creation where the partition has none. done says the message is written;
// neither done nor an error means the sequencer is at or past seq. unknown
// says a send's outcome was unknown.
func (p *CosmosProvider) sendSequenced(ctx context.Context, pk string, seq int64, doc []byte) (done, unknown bool, err error) {
	for _, create := range []bool{false, true} {
		b := p.container.NewTransactionalBatch(NewPartitionKeyString(pk))
		if create {
			seqDoc, err := newSequencerDoc(pk, seq)
			if err != nil {
				return false, unknown, err
			}
			b.CreateItem(seqDoc, nil)
		} else {
			var ops PatchOperations
			ops.SetCondition(sequencerCondition(seq, p.seqCeiling()))
			ops.AppendSet("/seq", seq)
			ops.AppendSet("/ttl", sequencerTTL) // refreshes its expiry too
			b.PatchItem(sequencerDocID, ops, nil)
		}
		b.CreateItem(doc, nil)
		resp, sent, err := p.executeBatchOnce(ctx, b)
		unknown = unknown || sent
		if err != nil {
			return false, unknown, err
		}
		if resp.Success {
			return true, unknown, nil
		}
		idx, opErr := resp.FailedOperation()
		switch {
		case idx == 0 && !create && IsNotFound(opErr):
			continue // the partition has no sequencer yet
		case idx == 0 && (IsPreconditionFailed(opErr) || IsConflict(opErr)):
			return false, unknown, nil // a sequencer at or past seq (a 409: created meanwhile)
		case idx == 1 && IsConflict(opErr) && unknown:
			return true, unknown, nil // the lost response's write
		default:
			return false, unknown, asOperation("EnqueueForOrchestrator", opErr)
		}
	}
	return false, unknown, nil
}

// catchUpWithSequencer moves this process's seqs past the partition's
// sequencer, unless a wrong clock wrote it (observeSeq): the next send
// overwrites that one. found says there is a sequencer to read.
func (p *CosmosProvider) catchUpWithSequencer(ctx context.Context, pk PartitionKey) (found bool, err error) {
	resp, err := p.readLatest(ctx, pk, sequencerDocID)
	if IsNotFound(err) {
		return false, nil // expired or swept meanwhile: the next send creates one
	}
	if err != nil {
		return false, err
	}
	var s sequencerDoc
	if err := json.Unmarshal(resp.Value, &s); err != nil {
		return false, fmt.Errorf("decode sequencer: %w", err)
	}
	p.observeSeq(s.Seq)
	return true, nil
}

// unpurgedSequencerWait spaces the sends that meet an expired sequencer
// the account has not purged: 50 ms doubling to 5 s, so the rounds of one
// enqueue wait out about a minute of purge lag before it reports a
// retryable error.
func unpurgedSequencerWait(round int) time.Duration {
	return min(50*time.Millisecond<<min(round, 7), 5*time.Second)
}

// sequencerCondition lets a message with seq through a sequencer below it,
// or beyond ceiling (a wrong clock's, which it overwrites).
func sequencerCondition(seq, ceiling int64) string {
	return "from c where c.seq < " + strconv.FormatInt(seq, 10) + " or c.seq > " + strconv.FormatInt(ceiling, 10)
}

func newSequencerDoc(pk string, seq int64) ([]byte, error) {
	return json.Marshal(sequencerDoc{ID: sequencerDocID, PK: pk, Type: docSequencer, Seq: seq, TTL: sequencerTTL})
}

// sequencedVisibleAt is when a queue item with seq becomes visible: after
// delay, or for an immediate one at its seq's millisecond. A seq is never
// below its writer's clock when taken (reserveSeqs), so an immediate item is
// visible as soon as it is written; and its visibility depends on its seq
// alone, not on the time its writer took between taking the seq and
// writing (a preempted goroutine, a loaded machine), so immediate items
// become visible in seq order on every process and a fetch never sees one
// without those sequenced before it.
func sequencedVisibleAt(seq int64, now time.Time, delay time.Duration) time.Time {
	if delay > 0 {
		return now.Add(delay)
	}
	return time.UnixMilli(seqMs(seq))
}
