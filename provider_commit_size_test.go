package cdb_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// isCommit reports a turn's commit batch: the one that replaces the
// instance document.
func isCommit(r cdb.FakeRequest) bool {
	return r.Operation == "Batch" && bytes.Contains(r.Body, []byte(`"operationType":"Replace","id":"inst"`))
}

// Issue 21, defect 14: an account whose size accounting differs from ours
// answers 413 for a commit batch our plan fits under 2 MB. The ack is
// planned again with a tighter budget (more of the turn staged before the
// commit) and commits, whole, in one batch the account takes.
func TestACommitTheStoreRefusesAsTooLargeIsPlannedTighter(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour})
	const accountLimit = 1 << 20 // this account refuses batches over 1 MB
	log := logRequests(acct)
	acct.InjectFault(cdb.FakeFault{
		Match:  func(r cdb.FakeRequest) bool { return isCommit(r) && len(r.Body) > accountLimit },
		Status: 413,
	})
	instance := "squeezed"
	providertest.CreateInstance(ctx, t, p, instance)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem(instance), 0))
	_, token := fetchFor(ctx, t, p, instance)
	events, work := sizedFanOut(instance, 30, 50*1024) // 1.5 MB of work items, and as much history
	log.take()
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, events, work, nil, cdb.ExecutionMetadata{}, nil))

	var commits []int
	for _, r := range log.take() {
		if isCommit(r) {
			commits = append(commits, len(r.Body))
		}
	}
	require.Len(t, commits, 2, "the refused commit, then the tighter one")
	assert.Greater(t, commits[0], accountLimit)
	assert.LessOrEqual(t, commits[1], accountLimit)

	require.NoError(t, p.ReconcileOutbox(ctx)) // what went through the outbox is delivered
	queued := queuedActivities(ctx, t, p, instance)
	require.Len(t, queued, len(work), "every activity is queued")
	for _, w := range work {
		act := w.(cdb.ActivityExecuteMessage)
		assert.Equal(t, act.Input, queued[act.ID], "activity %d", act.ID)
	}
	history, err := p.Read(ctx, instance)
	require.NoError(t, err)
	assert.Len(t, history, len(events)+1)
}

// A 413 that no tighter plan gets past stays the store's answer: it is not
// the provider's refusal (the runtime abandons the turn with backoff rather
// than failing it), and the ack gives up after a bounded number of plans.
func TestACommitTheStoreAlwaysRefusesAsTooLargeIsNotARefusal(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour})
	instance := "never-fits"
	providertest.CreateInstance(ctx, t, p, instance)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem(instance), 0))
	_, token := fetchFor(ctx, t, p, instance)
	events, work := sizedFanOut(instance, 30, 50*1024)
	log := logRequests(acct)
	acct.InjectFault(cdb.FakeFault{Match: isCommit, Status: 413})
	err := p.AckOrchestrationItem(ctx, token, 1, events, work, nil, cdb.ExecutionMetadata{}, nil)
	require.Error(t, err)
	assert.True(t, cdb.IsRequestEntityTooLarge(err), "%v", err)
	assert.False(t, errors.Is(err, cdb.ErrRefused), "the store's answer, not the provider's refusal: %v", err)
	commits := 0
	for _, r := range log.take() {
		if isCommit(r) {
			commits++
		}
	}
	assert.Greater(t, commits, 1, "tighter plans were tried")
	assert.LessOrEqual(t, commits, 5, "a bounded number of them")
}

// Issue 22: the service stores system properties beside what the client
// sends and may count a document differently, so every part a large turn
// stages stays at least 8 KB under the document limit. Small entries fill
// the parts to their capacity.
func TestStagedPartsStayEightKilobytesUnderTheDocumentLimit(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, ReconcileInterval: time.Hour})
	instance := "parts"
	providertest.CreateInstance(ctx, t, p, instance)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, pokeItem(instance), 0))
	_, token := fetchFor(ctx, t, p, instance)
	events, work := sizedFanOut(instance, 1200, 2*1024) // 2.4 MB of work items: more than one part
	log := logRequests(acct)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, events, work, nil, cdb.ExecutionMetadata{}, nil))

	var parts []int
	for _, r := range log.take() {
		for _, doc := range createdDocuments(t, r) {
			if bytes.Contains(doc[:min(len(doc), 256)], []byte(`"type":"outbox-part"`)) {
				parts = append(parts, len(doc))
			}
		}
	}
	require.NotEmpty(t, parts, "the turn staged outbox parts")
	for _, size := range parts {
		assert.LessOrEqual(t, size, cdb.MaxDocumentBytes-8*1024, "a part of %d bytes", size)
	}
	assert.Greater(t, slices.Max(parts), cdb.MaxDocumentBytes-16*1024, "the parts are filled to their capacity")
}

// createdDocuments returns the documents a request creates: its body for
// CreateItem, each create's resource body for a batch.
func createdDocuments(t *testing.T, r cdb.FakeRequest) [][]byte {
	t.Helper()
	switch r.Operation {
	case "CreateItem":
		return [][]byte{r.Body}
	case "Batch":
		var ops []struct {
			OperationType string          `json:"operationType"`
			ResourceBody  json.RawMessage `json:"resourceBody"`
		}
		require.NoError(t, json.Unmarshal(r.Body, &ops))
		var docs [][]byte
		for _, op := range ops {
			if op.OperationType == "Create" {
				docs = append(docs, op.ResourceBody)
			}
		}
		return docs
	}
	return nil
}
