package providertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// duroxide's provider_validation/sessions.rs: implicit session routing.
// Worker items carrying a session id are pinned to the worker (owner) that
// holds the session lock; plain items go to anyone; session locks are
// renewed in batches, skip idle sessions and are cleaned up once expired
// and unreferenced; the session lock and the activity lock are independent.

func sessionsTests() []Test {
	return []Test{
		{Name: "TestNonSessionItemsFetchableByAnyWorker", Run: testNonSessionItemsFetchableByAnyWorker},
		{Name: "TestSessionItemClaimableWhenNoSession", Run: testSessionItemClaimableWhenNoSession},
		{Name: "TestSessionAffinitySameWorker", Run: testSessionAffinitySameWorker},
		{Name: "TestSessionAffinityBlocksOtherWorker", Run: testSessionAffinityBlocksOtherWorker},
		{Name: "TestDifferentSessionsDifferentWorkers", Run: testDifferentSessionsDifferentWorkers},
		{Name: "TestMixedSessionAndNonSessionItems", Run: testMixedSessionAndNonSessionItems},
		{Name: "TestSessionClaimableAfterLockExpiry", Run: testSessionClaimableAfterLockExpiry},
		{Name: "TestNoneSessionSkipsSessionItems", Run: testNoneSessionSkipsSessionItems},
		{Name: "TestSomeSessionReturnsAllItems", Run: testSomeSessionReturnsAllItems},
		{Name: "TestRenewSessionLockActive", Run: testRenewSessionLockActive},
		{Name: "TestRenewSessionLockSkipsIdle", Run: testRenewSessionLockSkipsIdle},
		{Name: "TestRenewSessionLockNoSessions", Run: testRenewSessionLockNoSessions},
		{Name: "TestCleanupRemovesExpiredNoItems", Run: testCleanupRemovesExpiredNoItems},
		{Name: "TestCleanupKeepsSessionsWithPendingItems", Run: testCleanupKeepsSessionsWithPendingItems},
		{Name: "TestCleanupKeepsActiveSessions", Run: testCleanupKeepsActiveSessions},
		{Name: "TestAckUpdatesSessionLastActivity", Run: testAckUpdatesSessionLastActivity},
		{Name: "TestRenewWorkItemUpdatesSessionLastActivity", Run: testRenewWorkItemUpdatesSessionLastActivity},
		{Name: "TestSessionItemsProcessedInOrder", Run: testSessionItemsProcessedInOrder},
		{Name: "TestNonSessionItemsReturnedWithSessionConfig", Run: testNonSessionItemsReturnedWithSessionConfig},
		{Name: "TestSharedWorkerIDAnyCallerCanFetchOwnedSession", Run: testSharedWorkerIDAnyCallerCanFetchOwnedSession},
		{Name: "TestConcurrentSessionClaimOnlyOneWins", Run: testConcurrentSessionClaimOnlyOneWins},
		{Name: "TestSessionTakeoverAfterLockExpiry", Run: testSessionTakeoverAfterLockExpiry},
		{Name: "TestCleanupThenNewItemRecreatesSession", Run: testCleanupThenNewItemRecreatesSession},
		{Name: "TestAbandonedSessionItemRetryable", Run: testAbandonedSessionItemRetryable},
		{Name: "TestAbandonedSessionItemIgnoreAttempt", Run: testAbandonedSessionItemIgnoreAttempt},
		{Name: "TestRenewSessionLockAfterExpiryReturnsZero", Run: testRenewSessionLockAfterExpiryReturnsZero},
		{Name: "TestOriginalWorkerReclaimsExpiredSession", Run: testOriginalWorkerReclaimsExpiredSession},
		{Name: "TestActivityLockExpiresSessionLockValidSameWorkerRefetches", Run: testActivityLockExpiresSessionLockValidSameWorkerRefetches},
		{Name: "TestSessionLockExpiresNewOwnerGetsRedelivery", Run: testSessionLockExpiresNewOwnerGetsRedelivery},
		{Name: "TestSessionLockExpiresSameWorkerReacquires", Run: testSessionLockExpiresSameWorkerReacquires},
		{Name: "TestBothLocksExpireDifferentWorkerClaims", Run: testBothLocksExpireDifferentWorkerClaims},
		{Name: "TestSessionLockExpiresActivityLockValidAckSucceeds", Run: testSessionLockExpiresActivityLockValidAckSucceeds},
		{Name: "TestSessionLockRenewalExtendsPastOriginalTimeout", Run: testSessionLockRenewalExtendsPastOriginalTimeout},
	}
}

// sessWorkLock is the 5s worker-item lock nearly every sessions.rs fetch uses.
const sessWorkLock = 5 * time.Second

// sessIdleWindow is the idle timeout of the tests that check an ack or a
// renewal bumps a session's last activity. duroxide uses 200 ms; the wait
// before the bump is past it however slow the machine, but the renewal
// that follows the bump must come within it, so 200 ms fails on a loaded
// machine. 2 s is the margin for that step.
const sessIdleWindow = 2 * time.Second

// sessIdleLong is the 300s idle timeout under which no session counts as idle.
const sessIdleLong = 300 * time.Second

// sessActivity is session_activity: a session-bound "SessionActivity" of
// execution 1, untagged.
func sessActivity(instance string, id uint64, sessionID string) cdb.ActivityExecuteMessage {
	return cdb.ActivityExecuteMessage{
		Instance: instance, ExecutionID: 1, ID: id,
		Name: "SessionActivity", Input: "{}",
		SessionID: ptr(sessionID),
	}
}

// sessPlain is plain_activity: a session-less, untagged "PlainActivity" of
// execution 1.
func sessPlain(instance string, id uint64) cdb.ActivityExecuteMessage {
	return cdb.ActivityExecuteMessage{Instance: instance, ExecutionID: 1, ID: id, Name: "PlainActivity", Input: "{}"}
}

// sessConfig is session_config: owner with the standard 30s session lock.
func sessConfig(owner string) *cdb.SessionFetchConfig {
	return sessConfigWithLock(owner, 30*time.Second)
}

// sessConfigWithLock is session_config_with_lock.
func sessConfigWithLock(owner string, lock time.Duration) *cdb.SessionFetchConfig {
	return &cdb.SessionFetchConfig{OwnerID: owner, LockTimeout: lock}
}

// sessEnqueue enqueues worker items, failing on an error.
func sessEnqueue(ctx context.Context, t *testing.T, p cdb.Provider, items ...cdb.WorkItem) {
	t.Helper()
	for _, item := range items {
		require.NoError(t, p.EnqueueForWorker(ctx, item))
	}
}

// sessFetch is fetch_work_item(lock, ZERO, session, TagFilter::default()),
// failing on an error; a nil item means no work.
func sessFetch(ctx context.Context, t *testing.T, p cdb.Provider, lock time.Duration,
	session *cdb.SessionFetchConfig) (cdb.WorkItem, string, uint32) {
	t.Helper()
	item, token, attempt, err := p.FetchWorkItem(ctx, lock, noPoll, session, cdb.DefaultOnlyFilter())
	require.NoError(t, err)
	return item, token, attempt
}

// sessMustFetch is sessFetch(...).unwrap().unwrap(): the fetch must return
// an item.
func sessMustFetch(ctx context.Context, t *testing.T, p cdb.Provider, lock time.Duration,
	session *cdb.SessionFetchConfig, msgAndArgs ...any) (cdb.ActivityExecuteMessage, string, uint32) {
	t.Helper()
	item, token, attempt := sessFetch(ctx, t, p, lock, session)
	require.NotNil(t, item, msgAndArgs...)
	return sessAsActivity(t, item), token, attempt
}

// sessClaim fetches one item as session (5s worker lock) and acks it
// without a completion: the "claim a session" preamble of many tests.
func sessClaim(ctx context.Context, t *testing.T, p cdb.Provider, session *cdb.SessionFetchConfig) {
	t.Helper()
	_, token, _ := sessMustFetch(ctx, t, p, sessWorkLock, session)
	require.NoError(t, p.AckWorkItem(ctx, token, nil))
}

// sessAsActivity asserts that a fetched worker item is an ActivityExecute.
func sessAsActivity(t *testing.T, item cdb.WorkItem) cdb.ActivityExecuteMessage {
	t.Helper()
	activity, ok := item.(cdb.ActivityExecuteMessage)
	require.True(t, ok, "Expected ActivityExecute work item, got %T", item)
	return activity
}

// sessRequireSessionID is assert_eq!(session_id.as_deref(), Some(want)).
func sessRequireSessionID(t *testing.T, want string, activity cdb.ActivityExecuteMessage, msgAndArgs ...any) {
	t.Helper()
	require.NotNil(t, activity.SessionID, msgAndArgs...)
	require.Equal(t, want, *activity.SessionID, msgAndArgs...)
}

// ============================================================================
// Basic session routing
// ============================================================================

// A plain item is fetchable by any worker, session config or not.
func testNonSessionItemsFetchableByAnyWorker(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessPlain("inst-1", 1))

	item, _, _ := sessFetch(ctx, t, p, sessWorkLock, sessConfig("worker-A"))
	require.NotNil(t, item, "Non-session item should be fetchable by any worker")
}

// A session item whose session nobody holds is fetchable (claiming it).
func testSessionItemClaimableWhenNoSession(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "session-1"))

	activity, _, _ := sessMustFetch(ctx, t, p, sessWorkLock, sessConfig("worker-A"),
		"Unclaimed session item should be fetchable")
	sessRequireSessionID(t, "session-1", activity)
}

// After claiming a session, the same worker gets its next items.
func testSessionAffinitySameWorker(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "session-1"))
	sessClaim(ctx, t, p, sessConfig("worker-A"))

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 2, "session-1"))

	item, _, _ := sessFetch(ctx, t, p, sessWorkLock, sessConfig("worker-A"))
	require.NotNil(t, item, "Owned session item should be fetchable by owning worker")
}

// Another worker cannot fetch the items of a session someone else owns.
func testSessionAffinityBlocksOtherWorker(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "session-1"))
	sessClaim(ctx, t, p, sessConfig("worker-A"))

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 2, "session-1"))

	item, _, _ := sessFetch(ctx, t, p, sessWorkLock, sessConfig("worker-B"))
	require.Nil(t, item, "Non-owning worker should not fetch owned session items")
}

// Different sessions can be owned by different workers.
func testDifferentSessionsDifferentWorkers(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "session-1"))
	sessClaim(ctx, t, p, sessConfig("worker-A"))

	sessEnqueue(ctx, t, p, sessActivity("inst-2", 1, "session-2"))
	sessClaim(ctx, t, p, sessConfig("worker-B"))

	sessEnqueue(ctx, t, p,
		sessActivity("inst-1", 2, "session-1"),
		sessActivity("inst-2", 2, "session-2"))

	a, _, _ := sessMustFetch(ctx, t, p, sessWorkLock, sessConfig("worker-A"), "Worker-A should fetch session-1 item")
	sessRequireSessionID(t, "session-1", a)

	b, _, _ := sessMustFetch(ctx, t, p, sessWorkLock, sessConfig("worker-B"), "Worker-B should fetch session-2 item")
	sessRequireSessionID(t, "session-2", b)
}

// A worker blocked from another's session still gets plain items.
func testMixedSessionAndNonSessionItems(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "session-1"))
	sessClaim(ctx, t, p, sessConfig("worker-A"))

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 2, "session-1"), sessPlain("inst-2", 1))

	activity, _, _ := sessMustFetch(ctx, t, p, sessWorkLock, sessConfig("worker-B"), "Worker-B should get the plain item")
	require.Nil(t, activity.SessionID, "Worker-B should get a non-session item")
}

// ============================================================================
// Session lock and expiry
// ============================================================================

// Once its session lock (50ms) has expired, another worker can claim the
// session.
func testSessionClaimableAfterLockExpiry(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "session-1"))
	sessClaim(ctx, t, p, sessConfigWithLock("worker-A", 50*time.Millisecond))

	time.Sleep(100 * time.Millisecond)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 2, "session-1"))

	item, _, _ := sessFetch(ctx, t, p, sessWorkLock, sessConfig("worker-B"))
	require.NotNil(t, item, "Worker-B should claim expired session")
}

// Without a session config only plain items are fetched; the session item
// shows up once a config is given.
func testNoneSessionSkipsSessionItems(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "session-1"), sessPlain("inst-2", 2))

	plain, token, _ := sessMustFetch(ctx, t, p, sessWorkLock, nil, "Should fetch a non-session item with session=None")
	require.Nil(t, plain.SessionID, "Should be a non-session item")
	require.Equal(t, uint64(2), plain.ID, "Should get the plain activity")
	require.NoError(t, p.AckWorkItem(ctx, token, nil))

	none, _, _ := sessFetch(ctx, t, p, sessWorkLock, nil)
	require.Nil(t, none, "Session item should be invisible to None fetch")

	session, _, _ := sessMustFetch(ctx, t, p, sessWorkLock, sessConfig("worker-A"),
		"Session item should be visible with Some config")
	sessRequireSessionID(t, "session-1", session)
}

// With a session config, items of any unclaimed session and plain items
// all come back, in FIFO order.
func testSomeSessionReturnsAllItems(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p,
		sessActivity("inst-1", 1, "sess-A"),
		sessActivity("inst-2", 2, "sess-B"),
		sessActivity("inst-3", 3, "sess-C"),
		sessPlain("inst-4", 4))

	var fetched []uint64
	for range 4 {
		activity, token, _ := sessMustFetch(ctx, t, p, sessWorkLock, sessConfig("shared-proc"), "Should fetch item")
		fetched = append(fetched, activity.ID)
		require.NoError(t, p.AckWorkItem(ctx, token, nil))
	}
	require.Equal(t, []uint64{1, 2, 3, 4}, fetched, "All items should be fetched in FIFO order")

	item, _, _ := sessFetch(ctx, t, p, sessWorkLock, sessConfig("shared-proc"))
	require.Nil(t, item, "Queue should be empty")
}

// ============================================================================
// Session renewal
// ============================================================================

// renew_session_lock renews every active session of the owner.
func testRenewSessionLockActive(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "session-1"))
	sessClaim(ctx, t, p, sessConfigWithLock("worker-A", 5*time.Second))

	count, err := p.RenewSessionLock(ctx, []string{"worker-A"}, 30*time.Second, sessIdleLong)
	require.NoError(t, err)
	require.Equal(t, 1, count, "Should renew 1 active session")

	sessEnqueue(ctx, t, p, sessActivity("inst-2", 1, "session-2"))
	sessClaim(ctx, t, p, sessConfig("worker-A"))

	count2, err := p.RenewSessionLock(ctx, []string{"worker-A"}, 30*time.Second, sessIdleLong)
	require.NoError(t, err)
	require.Equal(t, 2, count2, "Should renew 2 active sessions")
}

// With a zero idle timeout every session is idle, and none is renewed.
func testRenewSessionLockSkipsIdle(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "session-1"))
	sessClaim(ctx, t, p, sessConfig("worker-A"))

	count, err := p.RenewSessionLock(ctx, []string{"worker-A"}, 30*time.Second, 0)
	require.NoError(t, err)
	require.Equal(t, 0, count, "Should skip idle session")
}

// An owner without sessions renews none.
func testRenewSessionLockNoSessions(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	count, err := p.RenewSessionLock(ctx, []string{"worker-A"}, 30*time.Second, sessIdleLong)
	require.NoError(t, err)
	require.Equal(t, 0, count, "Worker with no sessions should renew 0")
}

// ============================================================================
// Session cleanup
// ============================================================================

// An expired session that no item references is removed.
func testCleanupRemovesExpiredNoItems(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "session-1"))
	sessClaim(ctx, t, p, sessConfigWithLock("worker-A", 50*time.Millisecond))

	time.Sleep(100 * time.Millisecond)

	count, err := p.CleanupOrphanedSessions(ctx, sessIdleLong)
	require.NoError(t, err)
	require.Equal(t, 1, count, "Should clean up 1 expired session")
}

// An expired session that a queued item still references is kept.
func testCleanupKeepsSessionsWithPendingItems(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "session-1"))
	sessClaim(ctx, t, p, sessConfigWithLock("worker-A", 50*time.Millisecond))

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 2, "session-1"))

	time.Sleep(100 * time.Millisecond)

	count, err := p.CleanupOrphanedSessions(ctx, sessIdleLong)
	require.NoError(t, err)
	require.Equal(t, 0, count, "Should not clean up session with pending items")
}

// A session whose lock is still valid is kept.
func testCleanupKeepsActiveSessions(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "session-1"))
	sessClaim(ctx, t, p, sessConfigWithLock("worker-A", 300*time.Second))

	count, err := p.CleanupOrphanedSessions(ctx, sessIdleLong)
	require.NoError(t, err)
	require.Equal(t, 0, count, "Should not clean up active session")
}

// ============================================================================
// Session activity piggybacked on worker ack and renew
// ============================================================================

// Acking a session-bound item bumps the session's last activity: after a
// wait longer than the idle window, the ack alone keeps the session active.
func testAckUpdatesSessionLastActivity(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	idleWindow := sessIdleWindow

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "session-1"))
	_, token, _ := sessMustFetch(ctx, t, p, sessWorkLock, sessConfig("worker-A"))

	// The fetch's timestamp goes stale.
	time.Sleep(idleWindow + 50*time.Millisecond)

	require.NoError(t, p.AckWorkItem(ctx, token,
		cdb.ActivityCompletedMessage{Instance: "inst-1", ExecutionID: 1, ID: 1, Result: "ok"}))

	count, err := p.RenewSessionLock(ctx, []string{"worker-A"}, 30*time.Second, idleWindow)
	require.NoError(t, err)
	require.Equal(t, 1, count, "Session should be active — ack must have updated last_activity_at")
}

// Renewing a session-bound item's lock bumps the session's last activity.
func testRenewWorkItemUpdatesSessionLastActivity(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	idleWindow := sessIdleWindow

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "session-1"))
	_, token, _ := sessMustFetch(ctx, t, p, sessWorkLock, sessConfig("worker-A"))

	time.Sleep(idleWindow + 50*time.Millisecond)

	require.NoError(t, p.RenewWorkItemLock(ctx, token, 30*time.Second))

	count, err := p.RenewSessionLock(ctx, []string{"worker-A"}, 30*time.Second, idleWindow)
	require.NoError(t, err)
	require.Equal(t, 1, count,
		"Session should be active — work item lock renewal must have updated last_activity_at")
}

// ============================================================================
// Edge cases
// ============================================================================

// The items of one session come back in FIFO order.
func testSessionItemsProcessedInOrder(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	for id := uint64(1); id <= 3; id++ {
		sessEnqueue(ctx, t, p, sessActivity("inst-1", id, "session-1"))
	}

	for want := uint64(1); want <= 3; want++ {
		activity, token, _ := sessMustFetch(ctx, t, p, sessWorkLock, sessConfig("worker-A"),
			"Should fetch session item %d", want)
		require.Equal(t, want, activity.ID, "Items should be fetched in FIFO order")
		require.NoError(t, p.AckWorkItem(ctx, token, nil))
	}
}

// A session owner still gets plain items.
func testNonSessionItemsReturnedWithSessionConfig(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "session-1"))
	sessClaim(ctx, t, p, sessConfig("worker-A"))

	sessEnqueue(ctx, t, p, sessPlain("inst-2", 1))

	activity, _, _ := sessMustFetch(ctx, t, p, sessWorkLock, sessConfig("worker-A"),
		"Non-session items should be returned with session config")
	require.Nil(t, activity.SessionID, "Should be a non-session item")
}

// ============================================================================
// Process-level session identity
// ============================================================================

// Callers sharing one owner id (the slots of one process) all fetch the
// owned session's items; another owner is blocked.
func testSharedWorkerIDAnyCallerCanFetchOwnedSession(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p,
		sessActivity("inst-1", 1, "shared-sess"),
		sessActivity("inst-1", 2, "shared-sess"))

	item1, token1, _ := sessMustFetch(ctx, t, p, sessWorkLock, sessConfig("process-1"))
	require.Equal(t, uint64(1), item1.ID)
	require.NoError(t, p.AckWorkItem(ctx, token1, nil))

	// Another slot of the same process, same identity.
	item2, token2, _ := sessMustFetch(ctx, t, p, sessWorkLock, sessConfig("process-1"))
	require.Equal(t, uint64(2), item2.ID)
	require.NoError(t, p.AckWorkItem(ctx, token2, nil))

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 3, "shared-sess"))
	other, _, _ := sessFetch(ctx, t, p, sessWorkLock, sessConfig("process-2"))
	require.Nil(t, other, "Different process should not get items for an owned session")
}

// ============================================================================
// Races and concurrency
// ============================================================================

// Of two workers reaching for one unclaimed session, only the first gets it.
func testConcurrentSessionClaimOnlyOneWins(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p,
		sessActivity("inst-1", 1, "contested-sess"),
		sessActivity("inst-1", 2, "contested-sess"))

	a, tokenA, _ := sessFetch(ctx, t, p, sessWorkLock, sessConfig("worker-A"))
	require.NotNil(t, a, "Worker-A should claim the session")
	// Worker-A holds the session without acking.

	b, _, _ := sessFetch(ctx, t, p, sessWorkLock, sessConfig("worker-B"))
	require.Nil(t, b, "Worker-B should NOT get session items while A holds the session lock")

	require.NoError(t, p.AckWorkItem(ctx, tokenA, nil))
}

// Once the owner's session lock has expired, another worker takes the
// session over.
func testSessionTakeoverAfterLockExpiry(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "takeover-sess"))
	sessClaim(ctx, t, p, sessConfigWithLock("worker-A", 50*time.Millisecond))

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 2, "takeover-sess"))

	time.Sleep(100 * time.Millisecond)

	b, _, _ := sessMustFetch(ctx, t, p, sessWorkLock, sessConfig("worker-B"),
		"Worker-B should take over session after A's lock expired")
	sessRequireSessionID(t, "takeover-sess", b)
}

// After cleanup deleted a session, a new item of that session re-creates it.
func testCleanupThenNewItemRecreatesSession(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "ephemeral-sess"))
	sessClaim(ctx, t, p, sessConfigWithLock("worker-A", 50*time.Millisecond))

	time.Sleep(100 * time.Millisecond)

	cleaned, err := p.CleanupOrphanedSessions(ctx, sessIdleLong)
	require.NoError(t, err)
	require.Equal(t, 1, cleaned, "Should clean up the expired session")

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 2, "ephemeral-sess"))

	activity, _, _ := sessMustFetch(ctx, t, p, sessWorkLock, sessConfig("worker-B"),
		"Session should be re-creatable after cleanup")
	sessRequireSessionID(t, "ephemeral-sess", activity)
	require.Equal(t, uint64(2), activity.ID)
}

// An abandoned session item is redelivered with its attempt count bumped;
// after the ack nothing is left.
func testAbandonedSessionItemRetryable(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "retry-sess"))

	item1, token1, attempt1 := sessMustFetch(ctx, t, p, sessWorkLock, sessConfig("worker-A"))
	require.Equal(t, uint32(1), attempt1)
	require.Equal(t, uint64(1), item1.ID)

	// A crash or failed ack.
	require.NoError(t, p.AbandonWorkItem(ctx, token1, 0, false))

	item2, token2, attempt2 := sessMustFetch(ctx, t, p, sessWorkLock, sessConfig("worker-A"))
	require.Equal(t, uint32(2), attempt2, "Retry should increment attempt count")
	require.Equal(t, uint64(1), item2.ID, "Should be the same item")

	require.NoError(t, p.AckWorkItem(ctx, token2, nil))

	item, _, _ := sessFetch(ctx, t, p, sessWorkLock, sessConfig("worker-A"))
	require.Nil(t, item, "No items should remain after successful ack")
}

// Abandoning with ignore_attempt does not inflate the attempt count.
func testAbandonedSessionItemIgnoreAttempt(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "ignore-sess"))

	_, token, attempt := sessMustFetch(ctx, t, p, sessWorkLock, sessConfig("worker-A"))
	require.Equal(t, uint32(1), attempt)

	require.NoError(t, p.AbandonWorkItem(ctx, token, time.Millisecond, true))

	time.Sleep(10 * time.Millisecond)

	_, token2, attempt2 := sessMustFetch(ctx, t, p, sessWorkLock, sessConfig("worker-A"))
	require.Equal(t, uint32(1), attempt2, "ignore_attempt should not inflate attempt count")
	require.NoError(t, p.AckWorkItem(ctx, token2, nil))
}

// Renewal does not revive an expired session.
func testRenewSessionLockAfterExpiryReturnsZero(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "expired-sess"))
	sessClaim(ctx, t, p, sessConfigWithLock("worker-A", 50*time.Millisecond))

	time.Sleep(100 * time.Millisecond)

	count, err := p.RenewSessionLock(ctx, []string{"worker-A"}, 30*time.Second, sessIdleLong)
	require.NoError(t, err)
	require.Equal(t, 0, count, "renew_session_lock should return 0 for expired session")
}

// The original owner can re-claim its own expired session.
func testOriginalWorkerReclaimsExpiredSession(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "reclaim-sess"))
	sessClaim(ctx, t, p, sessConfigWithLock("worker-A", 50*time.Millisecond))

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 2, "reclaim-sess"))

	time.Sleep(100 * time.Millisecond)

	activity, _, _ := sessMustFetch(ctx, t, p, sessWorkLock, sessConfig("worker-A"),
		"Original worker should re-claim expired session")
	require.Equal(t, uint64(2), activity.ID)
	sessRequireSessionID(t, "reclaim-sess", activity)
}

// The activity lock (500ms) expires while the session lock (30s) holds: the
// item is redelivered only to the session owner, with attempt 2.
func testActivityLockExpiresSessionLockValidSameWorkerRefetches(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "sticky-sess"))
	shortWorkLock := 500 * time.Millisecond
	sessMustFetch(ctx, t, p, shortWorkLock, sessConfig("worker-A"))

	// No ack: the worker-item lock expires.
	time.Sleep(shortWorkLock + 100*time.Millisecond)

	b, _, _ := sessFetch(ctx, t, p, sessWorkLock, sessConfig("worker-B"))
	require.Nil(t, b, "Worker-B should not get session-bound item — session still owned by A")

	a, token, attempt := sessMustFetch(ctx, t, p, sessWorkLock, sessConfig("worker-A"),
		"Worker-A should reclaim the redelivered item via session affinity")
	require.Equal(t, uint64(1), a.ID, "Should be the same item")
	require.Equal(t, uint32(2), attempt, "Attempt count should have incremented")
	require.NoError(t, p.AckWorkItem(ctx, token, nil))
}

// The session lock (200ms) expires while the activity lock (5s) holds: a
// new owner claims the session through a new item, and when the original
// item is abandoned it is redelivered to the new owner.
func testSessionLockExpiresNewOwnerGetsRedelivery(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "takeover2-sess"))
	shortSession := 200 * time.Millisecond
	longActivity := 5 * time.Second
	_, tokenA, _ := sessMustFetch(ctx, t, p, longActivity, sessConfigWithLock("worker-A", shortSession))

	time.Sleep(shortSession + 100*time.Millisecond)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 2, "takeover2-sess"))

	cfgB := sessConfig("worker-B")
	b, tokenB, _ := sessMustFetch(ctx, t, p, sessWorkLock, cfgB,
		"Worker-B should claim the expired session and get item 2")
	require.Equal(t, uint64(2), b.ID, "Worker-B should get the NEW item")
	sessRequireSessionID(t, "takeover2-sess", b)
	require.NoError(t, p.AckWorkItem(ctx, tokenB, nil))

	// Worker-A gives its item up (an activity timeout); duroxide ignores the
	// result of this abandon.
	_ = p.AbandonWorkItem(ctx, tokenA, 0, false)

	b2, token, attempt := sessMustFetch(ctx, t, p, sessWorkLock, cfgB,
		"Worker-B should get redelivered item 1 as new session owner")
	require.Equal(t, uint64(1), b2.ID, "Should be the original item")
	require.Equal(t, uint32(2), attempt, "Attempt count should have incremented")
	require.NoError(t, p.AckWorkItem(ctx, token, nil))
}

// The owner whose session lock expired re-acquires it with its next fetch.
func testSessionLockExpiresSameWorkerReacquires(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "reacq-sess"))
	shortSession := 200 * time.Millisecond
	cfgA := sessConfigWithLock("worker-A", shortSession)
	sessClaim(ctx, t, p, cfgA)

	time.Sleep(shortSession + 100*time.Millisecond)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 2, "reacq-sess"))

	a, token, _ := sessMustFetch(ctx, t, p, sessWorkLock, cfgA, "Worker-A should reacquire its own expired session")
	require.Equal(t, uint64(2), a.ID)
	sessRequireSessionID(t, "reacq-sess", a)
	require.NoError(t, p.AckWorkItem(ctx, token, nil))
}

// With both the activity lock and the session lock expired, any worker
// claims the item (attempt 2).
func testBothLocksExpireDifferentWorkerClaims(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "both-expire-sess"))
	shortLock := 200 * time.Millisecond
	sessMustFetch(ctx, t, p, shortLock, sessConfigWithLock("worker-A", shortLock))

	// No ack: both locks expire.
	time.Sleep(shortLock + 200*time.Millisecond)

	b, token, attempt := sessMustFetch(ctx, t, p, sessWorkLock, sessConfig("worker-B"),
		"Worker-B should claim item after both locks expired")
	require.Equal(t, uint64(1), b.ID, "Should be the same item")
	sessRequireSessionID(t, "both-expire-sess", b)
	require.Equal(t, uint32(2), attempt, "Attempt count should have incremented")
	require.NoError(t, p.AckWorkItem(ctx, token, nil))
}

// The session lock (200ms) expiring does not invalidate a valid activity
// lock (30s): the ack still succeeds.
func testSessionLockExpiresActivityLockValidAckSucceeds(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "sess-expires"))
	shortSessionLock := 200 * time.Millisecond
	_, token, _ := sessMustFetch(ctx, t, p, 30*time.Second, sessConfigWithLock("worker-A", shortSessionLock))

	time.Sleep(shortSessionLock + 100*time.Millisecond)

	err := p.AckWorkItem(ctx, token,
		cdb.ActivityCompletedMessage{Instance: "inst-1", ExecutionID: 1, ID: 1, Result: "done"})
	require.NoError(t, err,
		"Ack must succeed — activity lock is still valid even though session lock expired")
}

// A session renewed at 0.6 of its lock is still owned at 1.0 of it.
func testSessionLockRenewalExtendsPastOriginalTimeout(t *testing.T, f Factory) {
	p := f.NewProvider(t, ProviderOptions{})
	ctx := testContext(t)
	// duroxide: a 1 s lock renewed at 600 ms and checked at 1 s, windows of
	// 400 ms (the renewal must come before the lock ends) and 600 ms (the
	// check before the renewed lock ends). The same proportions on a 3 s
	// lock give margins of 1.2 s and 1.8 s for a loaded machine; the waits
	// before each step only ever run long, which the assertions allow.
	sessionLock := 3 * time.Second

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 1, "renew-ext-sess"))
	sessClaim(ctx, t, p, sessConfigWithLock("worker-A", sessionLock))

	time.Sleep(sessionLock * 6 / 10)
	renewed, err := p.RenewSessionLock(ctx, []string{"worker-A"}, sessionLock, sessIdleLong)
	require.NoError(t, err)
	require.Equal(t, 1, renewed, "Should renew the active session")

	// Past the original expiry.
	time.Sleep(sessionLock * 4 / 10)

	sessEnqueue(ctx, t, p, sessActivity("inst-1", 2, "renew-ext-sess"))

	b, _, _ := sessFetch(ctx, t, p, sessWorkLock, sessConfig("worker-B"))
	require.Nil(t, b, "Session should still be owned by A after renewal past original timeout")

	a, _, _ := sessFetch(ctx, t, p, sessWorkLock, sessConfig("worker-A"))
	require.NotNil(t, a, "Worker-A should still own the session after renewal")
}
