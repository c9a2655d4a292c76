package cdb_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// fakeFactory gives every validation test a provider on a fresh in-memory
// account. Polling and reconciling run fast so the suite stays quick; the
// request-budget tests use the defaults.
type fakeFactory struct {
	containerHooks
	ranges  int
	latency time.Duration
	// staleReads serves reads without the session token of a document's
	// last write from a lagging replica (R13).
	staleReads bool
	// configure adjusts the client before the provider uses it (the test
	// hook that stops session tokens).
	configure func(*cdb.Client)
}

func (f fakeFactory) NewProvider(t *testing.T, o providertest.ProviderOptions) cdb.Provider {
	t.Helper()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{PartitionKeyRanges: f.ranges, Latency: f.latency, StaleReadsWithoutSessionToken: f.staleReads})
	client := acct.Client()
	if f.configure != nil {
		f.configure(client)
	}
	p, err := cdb.NewProvider(context.Background(), cdb.Config{
		Client:            client,
		ShortPolling:      !o.LongPolling,
		PollInterval:      20 * time.Millisecond,
		ReconcileInterval: 100 * time.Millisecond,
		OutboxMinAge:      50 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("new provider: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func (fakeFactory) LockTimeout() time.Duration { return time.Second }

// containerHooks are the suite's two fault-injection hooks, done through the
// provider's container, so they work on any Cosmos DB the provider runs on.
type containerHooks struct{}

// CorruptInstanceHistory overwrites the stored events of instance with bytes
// that do not decode, as a damaged store would, and gives the instance a new
// lastAck as every writer of history must, so no process serves the events
// from its cache.
func (containerHooks) CorruptInstanceHistory(ctx context.Context, p cdb.Provider, instance string) error {
	cc := p.(*cdb.CosmosProvider).Container()
	pk := cdb.NewPartitionKeyString(instance)
	res, err := cc.QueryItems(ctx, "SELECT VALUE c.id FROM c WHERE c.pk = @pk AND c.type = 'hist'",
		[]cdb.QueryParameter{{Name: "@pk", Value: instance}}, &cdb.QueryOptions{PartitionKey: &pk})
	if err != nil {
		return err
	}
	for _, raw := range res.Items {
		var id string
		if err := json.Unmarshal(raw, &id); err != nil {
			return err
		}
		var ops cdb.PatchOperations
		ops.AppendSet("/data", "NOT_VALID_JSON{{{")
		if _, err := cc.PatchItem(ctx, pk, id, ops, nil); err != nil {
			return err
		}
	}
	var rev cdb.PatchOperations
	rev.AppendIncrement("/rev", 1)
	rev.AppendSet("/lastAck", "corrupted-"+instance)
	if _, err := cc.PatchItem(ctx, pk, "inst", rev, nil); err != nil && !cdb.IsNotFound(err) {
		return err
	}
	return nil
}

// MaxAttemptCount is the highest attempt count of instance's orchestrator
// messages.
func (containerHooks) MaxAttemptCount(ctx context.Context, p cdb.Provider, instance string) (uint32, error) {
	cc := p.(*cdb.CosmosProvider).Container()
	pk := cdb.NewPartitionKeyString(instance)
	res, err := cc.QueryItems(ctx, "SELECT VALUE MAX(c.attempts) FROM c WHERE c.pk = @pk AND c.type = 'msg'",
		[]cdb.QueryParameter{{Name: "@pk", Value: instance}}, &cdb.QueryOptions{PartitionKey: &pk})
	if err != nil || len(res.Items) == 0 {
		return 0, err
	}
	var n uint32
	err = json.Unmarshal(res.Items[0], &n)
	return n, err
}

// TestValidation runs duroxide's provider validation suite on the Cosmos DB
// provider over the strict in-memory Cosmos DB.
func TestValidation(t *testing.T) {
	providertest.Run(t, fakeFactory{})
}

// TestErrorConditions runs providertest's own module: every condition a
// caller branches on is a cdb sentinel, reached with errors.Is.
func TestErrorConditions(t *testing.T) {
	providertest.RunModule(t, fakeFactory{}, providertest.ErrorConditions())
}
