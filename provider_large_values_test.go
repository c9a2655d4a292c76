package cdb_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// Large values (issue 21): where a turn's large values live, and what a
// fetch may hand over while some of them are still on their way.

// continueAsNewThroughTheOutbox commits, on p, a turn of instance id that
// schedules an activity of 1.4 MB and continues as new with an input of
// 700 KB: the work item fills the commit batch, so the ContinueAsNew
// message goes to the outbox. It returns the input.
func continueAsNewThroughTheOutbox(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, id string) string {
	t.Helper()
	providertest.CreateInstance(ctx, t, p, id)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem(id), 0))
	_, token := fetchFor(ctx, t, p, id)
	input := strings.Repeat("n", 700*1024)
	big := strings.Repeat("a", 1400*1024)
	can := cdb.StatusContinuedAsNew
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1,
		[]cdb.Event{
			{EventID: 2, InstanceID: id, ExecutionID: 1, Kind: cdb.ActivityScheduled{Name: "Big", Input: big}},
			{EventID: 3, InstanceID: id, ExecutionID: 1, Kind: cdb.OrchestrationContinuedAsNew{Input: input}},
		},
		[]cdb.WorkItem{cdb.ActivityExecute{Instance: id, ExecutionID: 1, ID: 2, Name: "Big", Input: big}},
		[]cdb.WorkItem{cdb.ContinueAsNew{Instance: id, Orchestration: "TestOrch", Input: input, Version: ptrTo("1.0.0")}},
		cdb.ExecutionMetadata{Status: &can, Output: &input}, nil))
	return input
}

// refuseContinueAsNewDelivery makes the account refuse the relay's delivery
// of a ContinueAsNew message into pk (a relayed create), and nothing else.
func refuseContinueAsNewDelivery(acct *cdb.FakeAccount, pk string) func() {
	return acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: http.StatusForbidden, Match: func(r cdb.FakeRequest) bool {
		return r.Operation == "CreateItem" && r.PartitionKey == pk &&
			bytes.Contains(r.Body, []byte(`"relayed":true`)) && bytes.Contains(r.Body, []byte(`"type":"msg"`)) &&
			bytes.Contains(r.Body, []byte("ContinueAsNew")) && !bytes.HasPrefix(r.Body, []byte(`{"id":"op|`))
	}})
}

// Defect 2: a continue-as-new whose ContinueAsNew message waits in an
// outbox. Before, a fetch more than 30 s later handed over the events raised
// meanwhile without it; the runtime read them as the finished execution's
// and consumed them. A fetch never hands over an instance's messages while a
// committed outbox of that instance writing into its own partition is
// pending: it delivers the outbox first, or holds the batch back.
func TestAFetchNeverHandsOverMessagesWhileTheirInstancesOutboxIsPending(t *testing.T) {
	config := func(clock *fakeClock) cdb.Config {
		return cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour, Now: clock.Now}
	}

	t.Run("the committing process died", func(t *testing.T) {
		ctx, acct, clock := rulesContext(t), cdb.NewFakeAccount(cdb.FakeAccountOptions{}), newFakeClock()
		a := newRulesProvider(t, acct, config(clock))
		refuse := refuseContinueAsNewDelivery(acct, `["eternal"]`)
		input := continueAsNewThroughTheOutbox(ctx, t, a, "eternal")
		require.Equal(t, 1, countDocs(t, a, "eternal", "outbox"), "the ContinueAsNew message waits in the outbox")
		require.NoError(t, a.Close(), "the process dies before its relay delivers it")
		refuse()

		b := newRulesProvider(t, acct, config(clock))
		require.NoError(t, b.EnqueueForOrchestrator(ctx, cdb.ExternalRaised{Instance: "eternal", Name: "e", Data: "meanwhile"}, 0))
		clock.Advance(31 * time.Second)
		item, _ := fetchFor(ctx, t, b, "eternal")
		require.Equal(t, []string{"ContinueAsNew", "ExternalRaised"}, messageKinds(item),
			"the fetch delivers the stale outbox first: the event goes to the new execution")
		assert.Equal(t, input, item.Messages[0].(cdb.ContinueAsNew).Input)
	})

	t.Run("the committing process is alive and its delivery keeps failing", func(t *testing.T) {
		ctx, acct, clock := rulesContext(t), cdb.NewFakeAccount(cdb.FakeAccountOptions{}), newFakeClock()
		a := newRulesProvider(t, acct, config(clock))
		refuse := refuseContinueAsNewDelivery(acct, `["eternal"]`)
		continueAsNewThroughTheOutbox(ctx, t, a, "eternal")
		require.NoError(t, a.EnqueueForOrchestrator(ctx, cdb.ExternalRaised{Instance: "eternal", Name: "e", Data: "meanwhile"}, 0))
		clock.Advance(31 * time.Second)
		item, _, _, err := a.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.Nil(t, kindsOf(item), "the batch waits for its ContinueAsNew message, however long")

		b := newRulesProvider(t, acct, config(clock))
		clock.Advance(time.Minute)
		item, _, _, err = b.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.Nil(t, kindsOf(item), "nor does another process hand it over")

		refuse()
		clock.Advance(time.Minute)
		item, _ = fetchFor(ctx, t, a, "eternal")
		require.Equal(t, []string{"ContinueAsNew", "ExternalRaised"}, messageKinds(item))
	})
}

// kindsOf is the kinds of a batch's messages, nil for no batch: what a
// failed assertion prints of a batch of megabytes.
func kindsOf(item *cdb.OrchestrationItem) []string {
	if item == nil {
		return nil
	}
	return append([]string{item.Instance}, messageKinds(item)...)
}

// ackTerminal acks one turn of id that ends execution exec with status and
// output (its event in the delta), plus orchestrator items, and returns
// the commit batches it sent.
func ackTerminal(ctx context.Context, t *testing.T, acct *cdb.FakeAccount, p *cdb.CosmosProvider, id string, exec, eventID uint64, status cdb.InstanceStatus, output string, items []cdb.WorkItem) int {
	t.Helper()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem(id), 0))
	_, token := fetchFor(ctx, t, p, id)
	var kind cdb.EventKind = cdb.OrchestrationCompleted{Output: output}
	if status == cdb.StatusContinuedAsNew {
		kind = cdb.OrchestrationContinuedAsNew{Input: output}
	}
	log := logRequests(acct)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, exec, []cdb.Event{{EventID: eventID, InstanceID: id, ExecutionID: exec, Kind: kind}},
		nil, items, cdb.ExecutionMetadata{Status: &status, Output: &output}, nil))
	batches := 0
	for _, r := range log.take() {
		if r.Operation == "Batch" {
			batches++
		}
	}
	return batches
}

// Defect 10: an output (or continue-as-new input) of about 1 MB failed the
// orchestration: the terminal turn wrote it into its history (staged) and
// whole into both the instance and the execution documents of one batch,
// which a little over 1 MB overflows. A large value is written once, in a
// staged value document that both reference; reads resolve it.
func TestALargeOutputIsWrittenOnceAndReferenced(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true})
	large := strings.Repeat("o", 1100*1024)
	outputOf := func(s *string) int {
		if s == nil {
			return -1
		}
		return len(*s)
	}

	t.Run("a completed execution's output", func(t *testing.T) {
		providertest.CreateInstance(ctx, t, p, "done")
		assert.Equal(t, 1, ackTerminal(ctx, t, acct, p, "done", 1, 2, cdb.StatusCompleted, large, nil), "one commit batch")
		status, err := p.ReadOrchestrationStatus(ctx, "done")
		require.NoError(t, err)
		assert.Equal(t, cdb.StatusCompleted, status.Status)
		require.Equal(t, len(large), outputOf(status.Output))
		assert.Equal(t, large, *status.Output)
		info, err := p.GetInstanceInfo(ctx, "done")
		require.NoError(t, err)
		assert.Equal(t, len(large), outputOf(info.Output))
		exec, err := p.GetExecutionInfo(ctx, "done", 1)
		require.NoError(t, err)
		assert.Equal(t, len(large), outputOf(exec.Output))
		assert.Equal(t, 1, countDocs(t, p, "done", "value"), "the output is written once, outside the instance and execution documents")
	})

	t.Run("a continue-as-new input", func(t *testing.T) {
		providertest.CreateInstance(ctx, t, p, "again")
		can := []cdb.WorkItem{cdb.ContinueAsNew{Instance: "again", Orchestration: "TestOrch", Input: large, Version: ptrTo("1.0.0")}}
		assert.Equal(t, 1, ackTerminal(ctx, t, acct, p, "again", 1, 2, cdb.StatusContinuedAsNew, large, can), "one commit batch")
		assert.Zero(t, countDocs(t, p, "again", "outbox"), "the ContinueAsNew message fits the commit batch")
		exec, err := p.GetExecutionInfo(ctx, "again", 1)
		require.NoError(t, err)
		assert.Equal(t, len(large), outputOf(exec.Output))

		item, token := fetchFor(ctx, t, p, "again")
		require.Equal(t, []string{"ContinueAsNew"}, messageKinds(item))
		assert.Equal(t, large, item.Messages[0].(cdb.ContinueAsNew).Input)
		require.NoError(t, p.AckOrchestrationItem(ctx, token, 2, []cdb.Event{providertest.StartedEvent("again", 2)}, nil, nil, providertest.TestOrchMetadata(), nil))
		info, err := p.GetInstanceInfo(ctx, "again")
		require.NoError(t, err)
		assert.Nil(t, info.Output, "the new execution has no output yet")
		exec, err = p.GetExecutionInfo(ctx, "again", 1)
		require.NoError(t, err)
		assert.Equal(t, len(large), outputOf(exec.Output), "the first execution keeps its own")

		assert.Equal(t, 1, ackTerminal(ctx, t, acct, p, "again", 2, 2, cdb.StatusCompleted, "small", nil))
		_, err = p.PruneExecutions(ctx, "again", cdb.PruneOptions{KeepLast: ptrTo(uint32(1))})
		require.NoError(t, err)
		assert.Zero(t, countDocs(t, p, "again", "value"), "pruning an execution removes its value")
		status, err := p.ReadOrchestrationStatus(ctx, "again")
		require.NoError(t, err)
		assert.Equal(t, "small", *status.Output)
	})
}
