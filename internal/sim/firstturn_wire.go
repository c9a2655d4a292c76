package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// First-turn starts on the wire. A start that a waiting orchestration
// fetch of its own process takes is not written: its first turn's commit
// creates the instance document (a create where a turn's commit replaces),
// naming the start message it stands for (startMsg) and its own lock token
// (lastAck). Any other end hands the start back to its caller, which then
// writes it the usual way: a start batch that creates the message. So the
// transports can tell, per start message:
//   - each try of a first-turn commit and what became of it: created (the
//     account applied it), its answer lost (applied, and the node never read
//     the answer: a lost response, or the node died with it in flight),
//     refused by the account (the create met a document of the id), or not
//     carried out (a fault or a crash before it reached the account);
//   - a start written the usual way after a first-turn commit named it: the
//     commit failed, and the start was handed back;
//   - a start written the usual way whose first try left its node more than
//     firstTurnWait after the start was made (its message's time): no commit
//     began within the wait, and the caller handed the start back.
//
// These are counts, for the report: that every start runs exactly once, with
// the outcome its input determines, is the invariants' to check.

// firstTurnWait is the provider's wait for a first turn's commit to begin
// (first_turn_start.go).
const firstTurnWait = time.Second

// afterWaitMargin is what a start's first try may lag its message's time
// for reasons of clocks (two skews) and scheduling, and still count as
// written after the wait.
const afterWaitMargin = 200 * time.Millisecond

// jumpBound: a lag longer than this is the simulated clock jumping, not a
// wait.
const jumpBound = 30 * time.Second

type firstTurnWire struct {
	now func() time.Time // the account's clock

	mu      sync.Mutex
	commits map[string]*firstTurnCommit // by the first turn's lock token
	named   map[string]bool             // start message ids a first-turn commit named
	tried   map[string]bool             // start message ids whose usual write was tried
	// handedBackWritten are usual writes of starts a first-turn commit
	// named; writtenAfterWait those of other starts whose first try came
	// after the wait.
	handedBackWritten, writtenAfterWait int
	counted                             map[string]bool // usual writes counted as handed back
	// createdFor and written are the start message ids whose first turn's
	// commit the account applied, and those written the usual way: a
	// start is one or the other, never both (first-turn-once).
	createdFor, written map[string]string // id → the instance
}

// firstTurnCommit is what the wire saw of one first turn's commit tries.
type firstTurnCommit struct {
	tries, notCarriedOut                   int
	created, answerLost, refused, diedWith bool
}

func newFirstTurnWire(now func() time.Time) *firstTurnWire {
	return &firstTurnWire{now: now, commits: map[string]*firstTurnCommit{}, named: map[string]bool{},
		tried: map[string]bool{}, counted: map[string]bool{}, createdFor: map[string]string{}, written: map[string]string{}}
}

// wireDoc is what the observer reads of a created document.
type wireDoc struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	Instance  string `json:"instance"`
	LastAck   string `json:"lastAck"`
	StartMsg  string `json:"startMsg"`
	Item      string `json:"item"`
	VisibleAt int64  `json:"visibleAt"`
}

// observe reads one request's try: when it entered the node's transport,
// the fault drawn, the account's status (0: it never reached it) and
// whether the node read the answer.
func (w *firstTurnWire) observe(req *http.Request, body []byte, entered time.Time, fault string, status int, answered bool) {
	switch operationOf(req) {
	case "Batch":
		var ops []batchOp
		if json.Unmarshal(body, &ops) != nil {
			return
		}
		for _, o := range ops {
			if !strings.EqualFold(o.OperationType, "create") {
				continue
			}
			var doc wireDoc
			if json.Unmarshal(o.ResourceBody, &doc) != nil {
				continue
			}
			switch {
			case doc.Type == "inst" && doc.LastAck != "":
				w.commitTried(doc, fault, status, answered)
			case isStartDoc(doc):
				w.usualWriteTried(doc, entered, status, true)
			}
		}
	case "CreateItem":
		// A start beside an instance document that exists already goes
		// alone (as does an outbox's delivery, whose lag is its own).
		var doc wireDoc
		if json.Unmarshal(body, &doc) == nil && isStartDoc(doc) {
			w.usualWriteTried(doc, entered, status, false)
		}
	}
}

// isStartDoc says doc is a start message.
func isStartDoc(doc wireDoc) bool {
	return doc.Type == "msg" && strings.HasPrefix(doc.Item, `{"StartOrchestration"`)
}

// commitTried notes a try of a first turn's commit.
func (w *firstTurnWire) commitTried(doc wireDoc, fault string, status int, answered bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.commits[doc.LastAck]
	if c == nil {
		c = &firstTurnCommit{}
		w.commits[doc.LastAck] = c
	}
	if doc.StartMsg != "" {
		w.named[doc.StartMsg] = true
	}
	c.tries++
	died := fault == "crash-before" || fault == "crash-after" || status != 0 && !answered && fault != faultLoseResponse
	c.diedWith = c.diedWith || died
	switch {
	case status == 0:
		c.notCarriedOut++
	case status == http.StatusOK:
		c.created = true
		if doc.StartMsg != "" {
			w.createdFor[doc.StartMsg] = doc.Instance
		}
		c.answerLost = c.answerLost || !answered
	default:
		c.refused = true
	}
}

// usualWriteTried notes a try of a start message's write, whose message was
// made at visibleAt (ms, its node's clock); lagged says its lag tells a
// wait (a start batch, as a client's start writes it first).
func (w *firstTurnWire) usualWriteTried(doc wireDoc, entered time.Time, status int, lagged bool) {
	id, visibleAt := doc.ID, doc.VisibleAt
	sentAt := w.now().Add(-time.Since(entered))
	w.mu.Lock()
	defer w.mu.Unlock()
	if status >= 200 && status < 300 {
		w.written[id] = doc.Instance
	}
	if w.named[id] {
		if status >= 200 && status < 300 && !w.counted[id] {
			w.counted[id] = true
			w.handedBackWritten++
		}
		return
	}
	if !lagged || w.tried[id] {
		return
	}
	w.tried[id] = true
	lag := sentAt.Sub(time.UnixMilli(visibleAt))
	if lag >= firstTurnWait-afterWaitMargin && lag < jumpBound {
		w.writtenAfterWait++
	}
}

// check reports the starts both created by their first turn and written
// the usual way: a start handed back must never commit, and one committing
// must never be written again (first_turn_start.go).
func (w *firstTurnWire) check(v *violations) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, instance := range w.createdFor {
		if _, ok := w.written[id]; ok {
			v.add(invFirstTurnOnce, instance, fmt.Sprintf("start message %s: its first turn's commit created the instance, and it was written the usual way too", id))
		}
	}
}

// invFirstTurnOnce: a start is written by its first turn's commit or the
// usual way, never both.
const invFirstTurnOnce = "first-turn-once"

// summary is the counts, for the eager starts line.
func (w *firstTurnWire) summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var created, answerLost, refused, diedWith, notCarriedOut, retried int
	for _, c := range w.commits {
		switch {
		case c.created:
			created++
		case c.refused:
			refused++
		}
		if c.answerLost {
			answerLost++
		}
		if c.diedWith {
			diedWith++
		}
		if c.tries > 1 {
			retried++
		}
		notCarriedOut += c.notCarriedOut
	}
	return fmt.Sprintf("first-turn-commits=%d (created=%d answer-lost=%d refused=%d committer-died=%d retried=%d tries-not-carried-out=%d) handed-back-written=%d written-after-wait=%d",
		len(w.commits), created, answerLost, refused, diedWith, retried, notCarriedOut, w.handedBackWritten, w.writtenAfterWait)
}
