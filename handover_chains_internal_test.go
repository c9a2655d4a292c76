package cdb

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb/internal/handoff"
)

// A chain kept unconfirmed is the next giver's from the moment it is in
// the table: a fetch woken for its partition may take it and give it back
// (reading its instance into the lock) while the process that kept it is
// still returning. The keeper touched the lock after publishing it, a data
// race the simulation's race detector found; under -race this test fails
// on it.
func TestAChainKeptUnconfirmedIsNotTouchedOnceItIsInTheTable(t *testing.T) {
	ctx := context.Background()
	acct := NewFakeAccount(FakeAccountOptions{})
	p, err := NewProvider(ctx, Config{Client: acct.Client(), PollInterval: time.Hour, GaugeInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })

	const pk = "kept"
	token := chainToken("lock_kept")
	until := p.nowMs() + time.Minute.Milliseconds()
	doc, err := json.Marshal(instanceDoc{ID: instanceDocID, PK: pk, Type: docInstance, Instance: pk, LockToken: token, LockedUntil: until})
	require.NoError(t, err)
	_, err = p.container.CreateItem(ctx, NewPartitionKeyString(pk), doc, nil)
	require.NoError(t, err)
	held := &orchestrationLock{token: token, pk: pk, timeout: time.Minute, inst: instanceDoc{Instance: pk}}
	held.lockedUntil.Store(until)

	for range 20 {
		given := make(chan struct{})
		go func() { // a fetch woken for the partition
			defer close(given)
			for {
				if _, ready := p.chains.Want(pk); ready != nil {
					ready.Lock.inst.ETag = "" // read it back, as for a chain of unknown outcome
					p.giveBackChain(ctx, ready)
					return
				}
				time.Sleep(time.Microsecond)
			}
		}()
		p.keepUnconfirmed(newChain(held, 0, handoff.Patience{}, nil))
		<-given
		// Lock it again for the next round.
		var ops PatchOperations
		ops.AppendSet("/lockToken", token)
		ops.AppendSet("/lockedUntil", until)
		_, err := p.container.PatchItem(ctx, NewPartitionKeyString(pk), instanceDocID, ops, nil)
		require.NoError(t, err)
	}
}
