package providertest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// ErrorConditions is a module of this package's own, not one of duroxide's:
// a provider reports every condition a caller branches on with the package
// cdb sentinel error (errors.Is through any wrapping), as a permanent
// *cdb.ProviderError whose Op is the Go method name. Run it beside the
// duroxide suite:
//
//	providertest.RunModule(t, myFactory{}, providertest.ErrorConditions())
func ErrorConditions() Module {
	return Module{Name: "error_conditions", Tests: []Test{
		{Name: "TestUnknownInstanceIsErrInstanceNotFound", Run: TestUnknownInstanceIsErrInstanceNotFound},
		{Name: "TestUnknownExecutionIsErrExecutionNotFound", Run: TestUnknownExecutionIsErrExecutionNotFound},
		{Name: "TestUnknownLockTokenIsErrInvalidLockToken", Run: TestUnknownLockTokenIsErrInvalidLockToken},
		{Name: "TestReleasedLockTokenIsErrInvalidLockToken", Run: TestReleasedLockTokenIsErrInvalidLockToken},
		{Name: "TestExpiredLockIsErrInvalidLockToken", Run: TestExpiredLockIsErrInvalidLockToken},
		{Name: "TestRunningInstanceWithoutForceIsErrInstanceRunning", Run: TestRunningInstanceWithoutForceIsErrInstanceRunning},
		{Name: "TestChildLeftOutOfADeletionIsErrOrphanedChild", Run: TestChildLeftOutOfADeletionIsErrOrphanedChild},
		{Name: "TestDeletingASubOrchestrationIsErrSubOrchestration", Run: TestDeletingASubOrchestrationIsErrSubOrchestration},
		{Name: "TestDuplicateEventIsErrDuplicateEvent", Run: TestDuplicateEventIsErrDuplicateEvent},
		{Name: "TestBadInputIsErrInvalidInput", Run: TestBadInputIsErrInvalidInput},
	}}
}

// assertRefusal checks that err reports sentinel, still after wrapping, as a
// permanent *cdb.ProviderError from method op.
func assertRefusal(t *testing.T, err error, sentinel error, op string) {
	t.Helper()
	require.Error(t, err, "%s must fail with %v", op, sentinel)
	wrapped := fmt.Errorf("caller: %w", err)
	assert.ErrorIs(t, wrapped, sentinel, "%s: %v", op, err)
	assert.False(t, cdb.IsRetryable(wrapped), "%s: %v is permanent", op, err)
	var pe *cdb.ProviderError
	if assert.True(t, errors.As(wrapped, &pe), "%s: %v is a *cdb.ProviderError", op, err) {
		assert.Equal(t, op, pe.Op, "ProviderError.Op names the method")
	}
}

// TestUnknownInstanceIsErrInstanceNotFound: every method that reports an
// unknown instance as an error (the others answer empty or nil) reports
// cdb.ErrInstanceNotFound.
func TestUnknownInstanceIsErrInstanceNotFound(t *testing.T, f Factory) {
	ctx := testContext(t)
	admin := Admin(t, f.NewProvider(t, ProviderOptions{}))
	_, err := admin.GetInstanceInfo(ctx, "nobody")
	assertRefusal(t, err, cdb.ErrInstanceNotFound, "GetInstanceInfo")
	_, err = admin.GetParentID(ctx, "nobody")
	assertRefusal(t, err, cdb.ErrInstanceNotFound, "GetParentID")
	_, err = admin.PruneExecutions(ctx, "nobody", cdb.PruneOptions{})
	assertRefusal(t, err, cdb.ErrInstanceNotFound, "PruneExecutions")
	for _, force := range []bool{false, true} {
		_, err = admin.DeleteInstance(ctx, "nobody", force)
		assertRefusal(t, err, cdb.ErrInstanceNotFound, "DeleteInstance")
	}
	// GetExecutionInfo asks for one execution, as duroxide's does: an
	// unknown instance's is missing as any other.
	_, err = admin.GetExecutionInfo(ctx, "nobody", 1)
	assertRefusal(t, err, cdb.ErrExecutionNotFound, "GetExecutionInfo")
}

// TestUnknownExecutionIsErrExecutionNotFound: an existing instance without
// the execution asked for.
func TestUnknownExecutionIsErrExecutionNotFound(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "inst")
	_, err := Admin(t, p).GetExecutionInfo(ctx, "inst", 7)
	assertRefusal(t, err, cdb.ErrExecutionNotFound, "GetExecutionInfo")
}

// TestUnknownLockTokenIsErrInvalidLockToken: a token no fetch returned, on
// every method that takes one.
func TestUnknownLockTokenIsErrInvalidLockToken(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	const bogus = "no-such-token"
	assertRefusal(t, p.AckOrchestrationItem(ctx, bogus, 1, nil, nil, nil, cdb.ExecutionMetadata{}, nil),
		cdb.ErrInvalidLockToken, "AckOrchestrationItem")
	assertRefusal(t, p.AbandonOrchestrationItem(ctx, bogus, 0, false), cdb.ErrInvalidLockToken, "AbandonOrchestrationItem")
	assertRefusal(t, p.RenewOrchestrationItemLock(ctx, bogus, time.Second), cdb.ErrInvalidLockToken, "RenewOrchestrationItemLock")
	assertRefusal(t, p.AckWorkItem(ctx, bogus, nil), cdb.ErrInvalidLockToken, "AckWorkItem")
	assertRefusal(t, p.RenewWorkItemLock(ctx, bogus, time.Second), cdb.ErrInvalidLockToken, "RenewWorkItemLock")
	assertRefusal(t, p.AbandonWorkItem(ctx, bogus, 0, false), cdb.ErrInvalidLockToken, "AbandonWorkItem")
}

// TestReleasedLockTokenIsErrInvalidLockToken: a token whose lock an ack
// already released.
func TestReleasedLockTokenIsErrInvalidLockToken(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("inst"), 0))
	_, token := fetchOrchestration(ctx, t, p, lockLong)
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{StartedEvent("inst", 1)}, nil, nil, TestOrchMetadata(), nil))
	assertRefusal(t, p.AckOrchestrationItem(ctx, token, 1, nil, nil, nil, cdb.ExecutionMetadata{}, nil),
		cdb.ErrInvalidLockToken, "AckOrchestrationItem")
	assertRefusal(t, p.RenewOrchestrationItemLock(ctx, token, time.Second), cdb.ErrInvalidLockToken, "RenewOrchestrationItemLock")

	workToken := enqueueAndFetchWork(ctx, t, p, f.LockTimeout()*100)
	require.NoError(t, p.AckWorkItem(ctx, workToken, activityCompleted("inst", 1, 1, "{}")))
	assertRefusal(t, p.AckWorkItem(ctx, workToken, activityCompleted("inst", 1, 1, "{}")), cdb.ErrInvalidLockToken, "AckWorkItem")
	assertRefusal(t, p.RenewWorkItemLock(ctx, workToken, time.Second), cdb.ErrInvalidLockToken, "RenewWorkItemLock")
	assertRefusal(t, p.AbandonWorkItem(ctx, workToken, 0, false), cdb.ErrInvalidLockToken, "AbandonWorkItem")
}

// TestExpiredLockIsErrInvalidLockToken: a lock that outlived its timeout.
func TestExpiredLockIsErrInvalidLockToken(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, StartItem("inst"), 0))
	_, token := fetchOrchestration(ctx, t, p, f.LockTimeout())
	workToken := enqueueAndFetchWork(ctx, t, p, f.LockTimeout())
	time.Sleep(f.LockTimeout() + 100*time.Millisecond) // both locks expire
	assertRefusal(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{StartedEvent("inst", 1)}, nil, nil, TestOrchMetadata(), nil),
		cdb.ErrInvalidLockToken, "AckOrchestrationItem")
	assertRefusal(t, p.RenewWorkItemLock(ctx, workToken, time.Second), cdb.ErrInvalidLockToken, "RenewWorkItemLock")
	assertRefusal(t, p.AckWorkItem(ctx, workToken, activityCompleted("inst", 1, 1, "{}")), cdb.ErrInvalidLockToken, "AckWorkItem")
}

// TestRunningInstanceWithoutForceIsErrInstanceRunning: deleting a Running
// instance needs force.
func TestRunningInstanceWithoutForceIsErrInstanceRunning(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "running")
	admin := Admin(t, p)
	_, err := admin.DeleteInstancesAtomic(ctx, []string{"running"}, false)
	assertRefusal(t, err, cdb.ErrInstanceRunning, "DeleteInstancesAtomic")
	_, err = admin.DeleteInstance(ctx, "running", false)
	require.Error(t, err)
	assert.ErrorIs(t, fmt.Errorf("caller: %w", err), cdb.ErrInstanceRunning)
	_, err = admin.GetInstanceInfo(ctx, "running")
	require.NoError(t, err, "the refused deletion deleted nothing")
}

// TestChildLeftOutOfADeletionIsErrOrphanedChild: an atomic deletion that
// would leave a child without its parent.
func TestChildLeftOutOfADeletionIsErrOrphanedChild(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	createCompletedInstance(ctx, t, p, "root")
	createCompletedInstanceWithParent(ctx, t, p, "root::child", ptr("root"))
	_, err := Admin(t, p).DeleteInstancesAtomic(ctx, []string{"root"}, true)
	assertRefusal(t, err, cdb.ErrOrphanedChild, "DeleteInstancesAtomic")
}

// TestDeletingASubOrchestrationIsErrSubOrchestration: DeleteInstance takes
// roots only.
func TestDeletingASubOrchestrationIsErrSubOrchestration(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	createCompletedInstance(ctx, t, p, "root")
	createCompletedInstanceWithParent(ctx, t, p, "root::child", ptr("root"))
	_, err := Admin(t, p).DeleteInstance(ctx, "root::child", true)
	assertRefusal(t, err, cdb.ErrSubOrchestration, "DeleteInstance")
}

// TestDuplicateEventIsErrDuplicateEvent: history is append-only, through
// AppendWithExecution and through an ack.
func TestDuplicateEventIsErrDuplicateEvent(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "inst")
	assertRefusal(t, p.AppendWithExecution(ctx, "inst", 1, []cdb.Event{StartedEvent("inst", 1)}),
		cdb.ErrDuplicateEvent, "AppendWithExecution")

	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "inst", Name: "poke", Data: "{}"}, 0))
	_, token := fetchOrchestration(ctx, t, p, lockLong)
	assertRefusal(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{StartedEvent("inst", 1)}, nil, nil, cdb.ExecutionMetadata{}, nil),
		cdb.ErrDuplicateEvent, "AckOrchestrationItem")
}

// TestBadInputIsErrInvalidInput: arguments the contract refuses whatever
// the store holds.
func TestBadInputIsErrInvalidInput(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	assertRefusal(t, p.EnqueueForWorker(ctx, StartItem("inst")), cdb.ErrInvalidInput, "EnqueueForWorker")
	assertRefusal(t, p.EnqueueForOrchestrator(ctx, activityExecute("inst", 1, 1, "Act", "{}"), 0), cdb.ErrInvalidInput, "EnqueueForOrchestrator")
	zero := StartedEvent("inst", 1)
	zero.EventID = 0
	assertRefusal(t, p.AppendWithExecution(ctx, "inst", 1, []cdb.Event{zero}), cdb.ErrInvalidInput, "AppendWithExecution")

	workToken := enqueueAndFetchWork(ctx, t, p, lockLong)
	assertRefusal(t, p.AckWorkItem(ctx, workToken, StartItem("inst")), cdb.ErrInvalidInput, "AckWorkItem")
}

// enqueueAndFetchWork queues one ActivityExecuteMessage and returns the token of
// its fetch, locked for lock.
func enqueueAndFetchWork(ctx context.Context, t *testing.T, p cdb.Provider, lock time.Duration) string {
	t.Helper()
	require.NoError(t, p.EnqueueForWorker(ctx, activityExecute("inst", 1, 1, "Act", "{}")))
	_, token := fetchWork(ctx, t, p, lock, "the queued activity must be fetchable")
	return token
}
