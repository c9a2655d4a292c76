// Package cosmoshooks reaches into the container behind a
// *cdb.CosmosProvider for tests: it corrupts an instance's history and reads
// its messages' attempt counts, as a damaged store or an operator would see
// them. providertest.ContainerHooks and the runtime's own tests share it, so
// neither has to import the other.
package cosmoshooks

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/duroxide-go/cdb"
)

// CorruptInstanceHistory overwrites the stored events of instance with bytes
// that do not decode, as a damaged store would, and gives the instance a new
// lastAck as every writer of history must, so no process serves the events
// from its cache.
func CorruptInstanceHistory(ctx context.Context, p cdb.Provider, instance string) error {
	cp, ok := p.(*cdb.CosmosProvider)
	if !ok {
		return fmt.Errorf("cosmoshooks: needs a *cdb.CosmosProvider, not a %T", p)
	}
	cc := cp.Container()
	pk := cdb.NewPartitionKeyString(instance)
	res, err := cc.QueryItems(ctx, "SELECT VALUE c.id FROM c WHERE c.pk = @pk AND c.type = 'hist'",
		[]cdb.QueryParameter{{Name: "@pk", Value: instance}}, &cdb.QueryOptions{PartitionKey: &pk})
	if err != nil {
		return fmt.Errorf("cosmoshooks: corrupt history of %s: query history: %w", instance, err)
	}
	for _, raw := range res.Items {
		var id string
		if err := json.Unmarshal(raw, &id); err != nil {
			return fmt.Errorf("cosmoshooks: corrupt history of %s: decode id: %w", instance, err)
		}
		var ops cdb.PatchOperations
		ops.AppendSet("/data", "NOT_VALID_JSON{{{")
		if _, err := cc.PatchItem(ctx, pk, id, ops, nil); err != nil {
			return fmt.Errorf("cosmoshooks: corrupt history of %s: patch %s: %w", instance, id, err)
		}
	}
	var rev cdb.PatchOperations
	rev.AppendIncrement("/rev", 1)
	rev.AppendSet("/lastAck", "corrupted-"+instance)
	if _, err := cc.PatchItem(ctx, pk, "inst", rev, nil); err != nil && !cdb.IsNotFound(err) {
		return fmt.Errorf("cosmoshooks: corrupt history of %s: patch inst: %w", instance, err)
	}
	return nil
}

// MaxAttemptCount is the highest attempt count of instance's orchestrator
// messages.
func MaxAttemptCount(ctx context.Context, p cdb.Provider, instance string) (uint32, error) {
	cp, ok := p.(*cdb.CosmosProvider)
	if !ok {
		return 0, fmt.Errorf("cosmoshooks: needs a *cdb.CosmosProvider, not a %T", p)
	}
	cc := cp.Container()
	pk := cdb.NewPartitionKeyString(instance)
	res, err := cc.QueryItems(ctx, "SELECT VALUE MAX(c.attempts) FROM c WHERE c.pk = @pk AND c.type = 'msg'",
		[]cdb.QueryParameter{{Name: "@pk", Value: instance}}, &cdb.QueryOptions{PartitionKey: &pk})
	if err != nil {
		return 0, fmt.Errorf("cosmoshooks: max attempt count of %s: %w", instance, err)
	}
	if len(res.Items) == 0 {
		return 0, nil
	}
	var n uint32
	if err := json.Unmarshal(res.Items[0], &n); err != nil {
		return 0, fmt.Errorf("cosmoshooks: max attempt count of %s: decode: %w", instance, err)
	}
	return n, nil
}
