package cdb

import (
	"context"
	"encoding/json"
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
	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartOrchestration{Instance: "parent", Orchestration: "P", Input: "{}", Version: &version, ExecutionID: 1}, 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)

	p.outbox.mu.Lock()
	p.outbox.chains[instancePartitionKey("parent")] = &outboxChain{busy: true} // another goroutine works it
	p.outbox.mu.Unlock()

	parent, parentID := "parent", uint64(1)
	child := StartOrchestration{Instance: "child", Orchestration: "C", Input: "{}", Version: &version, ExecutionID: 1, ParentInstance: &parent, ParentID: &parentID}
	started := Event{EventID: 1, InstanceID: "parent", ExecutionID: 1, DuroxideVersion: "0.1.29", Kind: OrchestrationStarted{Name: "P", Version: version, Input: "{}"}}
	name := "P"
	acked := make(chan error, 1)
	go func() {
		acked <- p.AckOrchestrationItem(ctx, token, 1, []Event{started}, nil, []WorkItem{child}, ExecutionMetadata{OrchestrationName: &name, OrchestrationVersion: &version}, nil)
	}()

	require.Eventually(t, func() bool { return countOfType(t, p, "parent", docOutbox) == 1 }, 10*time.Second, 5*time.Millisecond, "the ack commits its outbox")
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-acked:
		t.Fatalf("the ack returned (%v) while its outbox waited behind another goroutine's work", err)
	default:
	}

	p.outbox.mu.Lock()
	p.outbox.chains[instancePartitionKey("parent")].busy = false // it lets go without delivering
	p.outbox.mu.Unlock()
	require.NoError(t, <-acked)
	assert.Equal(t, 1, countOfType(t, p, "child", docMessage), "the child's start is in place when the ack returns")
}

func countOfType(t *testing.T, p *CosmosProvider, instance, docType string) int {
	t.Helper()
	pk := NewPartitionKeyString(instancePartitionKey(instance))
	res, err := p.container.QueryItems(context.Background(), "SELECT VALUE COUNT(1) FROM c WHERE c.type = @t",
		[]QueryParameter{{Name: "@t", Value: docType}}, &QueryOptions{PartitionKey: &pk})
	require.NoError(t, err)
	var n int
	require.NoError(t, json.Unmarshal(res.Items[0], &n))
	return n
}
