package cdb_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// Chains a worker ack opens (ARCHITECTURE.md, Chained turns): a worker ack
// whose instance is free while other activities of it run here locks the
// instance in its own batch, and those activities' acks write their
// completions claimed with that lock, so that their turn needs no query
// and no lock batch.

// queuedFanOut is p's instance whose first turn scheduled n activities
// that went to the queue (no worker fetch waited), each then fetched from
// the queue by a worker of p: what they took.
func queuedFanOut(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, instance string, n int) []fetchedWork {
	t.Helper()
	token := lockedStart(ctx, t, p, instance)
	require.NoError(t, ackScheduling(ctx, t, p, token, instance, activities(instance, n)...))
	require.Empty(t, instanceDocOf(t, p, instance)["lockToken"], "no activity ran here: the commit kept no chain")
	got := make([]fetchedWork, n)
	for i := range got {
		got[i] = eventuallyWork(ctx, t, p, "the queued activity")
	}
	return got
}

func TestAWorkerAckWhoseSiblingsRunHereLocksTheInstanceForTheirTurn(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	got := queuedFanOut(ctx, t, p, "late", 2)

	acct.ResetCounts()
	ackActivity(ctx, t, p, got[0])
	assert.Equal(t, map[string]int64{"Batch": 1}, acct.Counts().ByOperation, "the ack locked the instance in its own batch")
	inst := instanceDocOf(t, p, "late")
	chain, _ := inst["lockToken"].(string)
	require.True(t, strings.HasPrefix(chain, "lock_chain."), "the ack locked the instance: %v", inst["lockToken"])
	assert.True(t, p.HoldsOrchestration("late"))
	msgs := messageDocs(t, p, "late")
	require.Len(t, msgs, 1)
	assert.Equal(t, chain, msgs[0]["lockToken"], "written claimed with the lock its own batch took")
	assert.Equal(t, inst["lockedUntil"], msgs[0]["lockedUntil"], "they expire together")
	assert.EqualValues(t, 1, msgs[0]["attempts"])

	turn, _ := waitingOrchestrator(ctx, t, p, time.Minute)
	acct.ResetCounts()
	ackActivity(ctx, t, p, got[1])
	next := turn()
	require.NoError(t, next.err)
	require.NotNil(t, next.item)
	assert.Len(t, next.item.Messages, 2, "both completions in one turn")
	assert.Equal(t, chain, next.token)
	assert.Equal(t, uint32(1), next.attempts)
	assert.Equal(t, map[string]int64{"Batch": 1}, acct.Counts().ByOperation,
		"the second worker ack: the turn needed no candidate query, no lock batch and no load")

	require.NoError(t, p.AckOrchestrationItem(ctx, next.token, 1, nil, nil, nil, providertest.TestOrchMetadata(), nil))
	assert.Empty(t, messageDocs(t, p, "late"))
	assert.Empty(t, instanceDocOf(t, p, "late")["lockToken"], "released by the turn's ack")
}

// The last activity of an instance running here opens no chain: its
// completion goes to the queue, where others may be on their way too.
func TestTheLastActivityRunningHereOpensNoChain(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	got := queuedFanOut(ctx, t, p, "alone", 1)
	ackActivity(ctx, t, p, got[0])
	assert.Empty(t, instanceDocOf(t, p, "alone")["lockToken"])
	assert.Empty(t, messageDocs(t, p, "alone")[0]["lockToken"])
	assert.False(t, p.HoldsOrchestration("alone"))
}

// An ack whose instance another dispatcher holds cannot lock it: its batch
// fails on the instance alone, and it writes its completion as it would
// without a chain, for that dispatcher's next look.
func TestAWorkerAckThatCannotLockItsInstanceWritesItsCompletionAsUsual(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	other := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	got := queuedFanOut(ctx, t, p, "held", 2)
	require.NoError(t, other.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "held", Name: "e", Data: "{}"}, 0))
	held := eventuallyTurn(ctx, t, other, "the event's turn, in the other process")

	acct.ResetCounts()
	ackActivity(ctx, t, p, got[0])
	assert.Equal(t, map[string]int64{"Batch": 2}, acct.Counts().ByOperation, "the batch that could not lock the instance, and the ack without it")
	assert.Equal(t, held.token, instanceDocOf(t, p, "held")["lockToken"], "still the other dispatcher's")
	assert.False(t, p.HoldsOrchestration("held"))
	for _, m := range messageDocs(t, p, "held") {
		if strings.Contains(m["item"].(string), "ActivityCompleted") {
			assert.Empty(t, m["lockToken"], "written unclaimed, for a look at the queue")
		}
	}
	ackActivity(ctx, t, p, got[1])
	require.NoError(t, other.AckOrchestrationItem(ctx, held.token, 1, nil, nil, nil, providertest.TestOrchMetadata(), nil))
	next := eventuallyTurn(ctx, t, p, "the completions' turn")
	assert.Len(t, next.item.Messages, 2)
}

// A completion claimed into a chain whose opening ack then could not lock
// the instance is released once no ack writes into the chain, and taken
// by the next look: it does not wait for its lock to expire.
func TestACompletionClaimedIntoAChainThatCouldNotOpenIsReleased(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	gate := &openingGate{next: acct.Transport(), held: make(chan struct{}), release: make(chan struct{})}
	client, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(), Transport: gate})
	require.NoError(t, err)
	p, err := cdb.NewProvider(ctx, cdb.Config{PollInterval: time.Hour, Client: client})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	other := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour})
	got := queuedFanOut(ctx, t, p, "refused", 2)

	opener := make(chan error, 1)
	go func() { // with a timeout of its own: a gate never passed fails the test, not the run
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		act := got[0].item.(cdb.ActivityExecuteMessage)
		opener <- p.AckWorkItem(ctx, got[0].token, cdb.ActivityCompletedMessage{Instance: act.Instance, ExecutionID: 1, ID: act.ID, Result: "ok"})
	}()
	select {
	case <-gate.held: // the opening ack's batch is on its way
	case err := <-opener:
		t.Fatalf("the ack did not open a chain: %v", err)
	}
	ackActivity(ctx, t, p, got[1])
	claimed := messageDocs(t, p, "refused")
	require.Len(t, claimed, 1)
	token, _ := claimed[0]["lockToken"].(string)
	require.True(t, strings.HasPrefix(token, "lock_chain."), "the sibling's completion went into the opening chain")

	require.NoError(t, other.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "refused", Name: "e", Data: "{}"}, 0))
	held := eventuallyTurn(ctx, t, other, "the event's turn, in the other process, before the opening lands")
	close(gate.release)
	require.NoError(t, <-opener)
	require.Eventually(t, func() bool {
		for _, m := range messageDocs(t, p, "refused") {
			if token, _ := m["lockToken"].(string); strings.HasPrefix(token, "lock_chain.") {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "released")
	require.NoError(t, other.AckOrchestrationItem(ctx, held.token, 1, nil, nil, nil, providertest.TestOrchMetadata(), nil))
	next := eventuallyTurn(ctx, t, other, "both completions' turn, without waiting for a lock to expire")
	assert.Len(t, next.item.Messages, 2)
	assert.Equal(t, uint32(1), next.attempts, "the release gave back the attempt its claim counted")
}

// openingGate holds the first batch that locks an instance for a chain
// (it carries a chain's token and the instance document) until release.
type openingGate struct {
	next          http.RoundTripper
	once          sync.Once
	held, release chan struct{}
}

func (g *openingGate) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("x-ms-cosmos-is-batch-request") != "" && r.Body != nil {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"lock_chain.`)) && bytes.Contains(body, []byte(`"id":"inst"`)) {
			first := false
			g.once.Do(func() { first = true })
			if first {
				close(g.held)
				<-g.release
			}
		}
	}
	return g.next.RoundTrip(r)
}

// An ack that opens a chain and whose answer was lost is read back: it
// applied, so the ack succeeds, and the chain it may hold is given back
// from a read of the instance, its completion with it, so both completions
// reach a turn and nothing stays locked for the lock's length.
func TestAnAckThatOpensAChainWhoseAnswerWasLostGivesTheChainBack(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour, ReconcileInterval: time.Hour})
	got := queuedFanOut(ctx, t, p, "unseen", 2)
	var lost atomic.Int32
	acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultLoseResponse, Times: 1, Match: func(r cdb.FakeRequest) bool {
		opens := r.Operation == "Batch" && bytes.Contains(r.Body, []byte(`"lock_chain.`)) && bytes.Contains(r.Body, []byte(`"id":"inst"`))
		if opens {
			lost.Add(1)
		}
		return opens
	}})
	ackActivity(ctx, t, p, got[0])
	require.Equal(t, int32(1), lost.Load(), "the opening ack's answer was lost")
	ackActivity(ctx, t, p, got[1])

	completions := 0
	for completions < 2 {
		turn := eventuallyTurn(ctx, t, p, "the completions' turn, within a poll interval of an hour: not after a lock's expiry")
		completions += len(turn.item.Messages)
		require.NoError(t, p.AckOrchestrationItem(ctx, turn.token, 1, nil, nil, nil, providertest.TestOrchMetadata(), nil))
	}
	assert.Equal(t, 2, completions)
	assert.Empty(t, messageDocs(t, p, "unseen"))
	assert.Empty(t, instanceDocOf(t, p, "unseen")["lockToken"])
}
