package cdb

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An ack returns with its effects in place even when another goroutine of
// the process is working the instance's outbox chain when the ack commits
// (the reconciler, which took the just-committed outbox for a stale one
// while a loaded machine slowed the ack: the validation suite's
// sub-orchestration test then fetched nothing). The ack waits for the chain
// and, when the other goroutine lets go first, delivers its outbox itself.
func TestAnAckWaitsForTheOutboxChainAnotherGoroutineWorks(t *testing.T) {
	ctx := context.Background()
	acct := NewFakeAccount(FakeAccountOptions{})
	p, err := NewProvider(ctx, Config{Client: acct.Client(), ShortPolling: true, ReconcileInterval: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })

	version := "1.0.0"
	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartOrchestrationMessage{Instance: "parent", Orchestration: "P", Input: "{}", Version: &version, ExecutionID: 1}, 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)

	p.outbox.mu.Lock()
	p.outbox.chains[instancePartitionKey("parent")] = &outboxChain{busy: true} // another goroutine works it
	p.outbox.mu.Unlock()

	parent, parentID := "parent", uint64(1)
	child := StartOrchestrationMessage{Instance: "child", Orchestration: "C", Input: "{}", Version: &version, ExecutionID: 1, ParentInstance: &parent, ParentID: &parentID}
	started := Event{EventID: 1, InstanceID: "parent", ExecutionID: 1, DuroxideVersion: "0.1.29", Kind: OrchestrationStarted{Name: "P", Version: version, Input: "{}"}}
	name := "P"
	type ackResult struct {
		err      error
		children int // the child's start documents when the ack returned
	}
	acked := make(chan ackResult, 1)
	go func() {
		err := p.AckOrchestrationItem(ctx, token, 1, []Event{started}, nil, []WorkItem{child}, ExecutionMetadata{OrchestrationName: &name, OrchestrationVersion: &version}, nil)
		children, countErr := docsOfType(p, "child", docMessage)
		acked <- ackResult{err: errors.Join(err, countErr), children: children}
	}()

	require.Eventually(t, func() bool { return outboxesQueued(p, "parent") == 1 },
		10*time.Second, 5*time.Millisecond, "the ack commits its outbox and queues it behind the other goroutine's work")
	select {
	case res := <-acked:
		t.Fatalf("the ack returned (%v) while its outbox waited behind another goroutine's work", res.err)
	default:
	}

	p.outbox.mu.Lock()
	p.outbox.chains[instancePartitionKey("parent")].busy = false // it lets go without delivering
	p.outbox.mu.Unlock()
	res := <-acked
	require.NoError(t, res.err)
	assert.Equal(t, 1, res.children, "the child's start is in place when the ack returns")
}

// outboxesQueued is how many outboxes instance's chain holds.
func outboxesQueued(p *CosmosProvider, instance string) int {
	p.outbox.mu.Lock()
	defer p.outbox.mu.Unlock()
	if ch := p.outbox.chains[instancePartitionKey(instance)]; ch != nil {
		return len(ch.items)
	}
	return 0
}

// docsOfType counts instance's documents of docType.
func docsOfType(p *CosmosProvider, instance, docType string) (int, error) {
	pk := NewPartitionKeyString(instancePartitionKey(instance))
	res, err := p.container.QueryItems(context.Background(), "SELECT VALUE COUNT(1) FROM c WHERE c.type = @t",
		[]QueryParameter{{Name: "@t", Value: docType}}, &QueryOptions{PartitionKey: &pk})
	if err != nil {
		return 0, err
	}
	var n int
	return n, json.Unmarshal(res.Items[0], &n)
}
