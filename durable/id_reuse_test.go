package durable

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// TestStartingATakenIDIsRefused: a second start of an id whose instance
// has run is refused with ErrInstanceExists and the instance's state;
// IfExistsIgnore makes it a no-op, and a deleted instance's id is free
// again.
func TestStartingATakenIDIsRefused(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		h.orchestration("Echo", func(_ *OrchestrationContext, in string) (string, error) { return in, nil })
		h.run()
		h.start("taken", "Echo", "first")
		require.Equal(t, "first", h.completed("taken"))

		err := h.client.StartOrchestration(h.ctx, "taken", "Echo", "second")
		require.ErrorIs(t, err, ErrInstanceExists)
		var exists *InstanceExistsError
		require.ErrorAs(t, err, &exists)
		assert.Equal(t, "taken", exists.Instance)
		assert.Equal(t, StateCompleted, exists.Status.State)
		assert.EqualError(t, err, `durable: start orchestration "taken": the instance already exists (Completed)`)

		require.NoError(t, h.client.StartOrchestration(h.ctx, "taken", "Echo", "third", WithIfExists(IfExistsIgnore)))
		assert.Equal(t, "first", h.completed("taken"), "the ignored start did not run")

		if _, err := h.client.DeleteInstance(h.ctx, "taken", false); err != nil {
			require.ErrorIs(t, err, ErrNoAdmin)
			return
		}
		h.start("taken", "Echo", "again")
		assert.Equal(t, "again", h.completed("taken"))
	})
}

// A start still queued takes its id on a provider that refuses in the
// start's own write (cdb.ExclusiveStarter): the refusal says so, and the
// policies still apply.
func TestAQueuedStartTakesItsID(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		h.orchestration("Echo", func(_ *OrchestrationContext, in string) (string, error) { return in, nil })
		h.start("queued", "Echo", "first")

		err := h.client.StartOrchestration(h.ctx, "queued", "Echo", "second")
		require.ErrorIs(t, err, ErrInstanceExists)
		var exists *InstanceExistsError
		require.ErrorAs(t, err, &exists)
		// No turn has run yet: a provider that reads a queued start says so,
		// another that the instance is not found.
		if _, reads := h.provider.(*cdb.CosmosProvider); reads {
			assert.Equal(t, StateQueued, exists.Status.State)
		} else {
			assert.Equal(t, StateNotFound, exists.Status.State)
		}
		assert.EqualError(t, err, `durable: start orchestration "queued": a start of the instance is already queued`)
		require.NoError(t, h.client.StartOrchestration(h.ctx, "queued", "Echo", "third", WithIfExists(IfExistsIgnore)))

		h.run()
		assert.Equal(t, "first", h.completed("queued"), "only the first start ran")
	})
}

// Starts of one new id at the same moment: exactly one is enqueued, and
// every other is refused.
func TestStartsOfANewIDAtTheSameMomentStartOne(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		const racers = 6
		errs := make(chan error, racers)
		for i := 0; i < racers; i++ {
			go func() { errs <- h.client.StartOrchestration(h.ctx, "contested", "Echo", "x") }()
		}
		started := 0
		for i := 0; i < racers; i++ {
			if err := <-errs; err == nil {
				started++
			} else {
				require.ErrorIs(t, err, ErrInstanceExists)
			}
		}
		assert.Equal(t, 1, started)
	})
}

// withoutExclusiveStarts hides a provider's cdb.ExclusiveStarter (and
// every other optional capability), so a client on it reads the status
// before it enqueues.
type withoutExclusiveStarts struct{ cdb.Provider }

// Without cdb.ExclusiveStarter the client reads the instance before it
// enqueues: a finished instance's id is refused, and a start still queued
// is not seen.
func TestWithoutExclusiveStartsTheClientReadsTheStatusFirst(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		h.orchestration("Echo", func(_ *OrchestrationContext, in string) (string, error) { return in, nil })
		client := NewClient(withoutExclusiveStarts{h.provider})
		require.NoError(t, client.StartOrchestration(h.ctx, "read-first", "Echo", "first"))
		require.NoError(t, client.StartOrchestration(h.ctx, "read-first", "Echo", "second"), "a queued start is not seen")
		h.run()
		assert.Equal(t, "first", h.completed("read-first"), "the runtime dropped the second start")

		err := client.StartOrchestration(h.ctx, "read-first", "Echo", "third")
		var exists *InstanceExistsError
		require.ErrorAs(t, err, &exists)
		assert.Equal(t, StateCompleted, exists.Status.State)
		require.NoError(t, client.StartOrchestration(h.ctx, "read-first", "Echo", "fourth", WithIfExists(IfExistsIgnore)))
	})
}

// On the Cosmos DB provider a start of a free id is one request: the store
// refuses a taken id in the start's own batch, with no read before it.
func TestAStartOfAFreeIDIsOneRequest(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	h := newCosmosHarness(t, acct)
	var requests []string
	var mu sync.Mutex
	acct.InjectFault(cdb.FakeFault{Match: func(r cdb.FakeRequest) bool {
		mu.Lock()
		defer mu.Unlock()
		if r.PartitionKey == `["one-request"]` {
			requests = append(requests, r.Operation)
		}
		return false
	}})
	require.NoError(t, h.client.StartOrchestration(h.ctx, "one-request", "Echo", "x"))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"Batch"}, requests, "the requests in the instance's partition")
}
