package cdb_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// Dispatch slots shared among processes through the membership document
// (ARCHITECTURE.md, Process leases). The background renewals run every 20 s
// of real time with these leases, so within a test only the explicit renewals
// count, and the clock decides expiry.

const testLeaseDuration = time.Minute

func newLeasedProvider(t *testing.T, acct *cdb.FakeAccount, clock *testClock, id string) *cdb.CosmosProvider {
	t.Helper()
	return newRulesProvider(t, acct, cdb.Config{Now: clock.Now, PollInterval: 50 * time.Millisecond, ReconcileInterval: time.Hour,
		ProcessLeases: &cdb.ProcessLeaseOptions{ProcessID: id, LeaseDuration: testLeaseDuration}})
}

// orchestratorKey is the lease key of orchestration fetches without a
// capability filter.
const orchestratorKey = "orchestrator/*"

// fetchOrchestration takes one look at the orchestrator queue, which makes
// p a member of its lease key at the next renewal.
func fetchOrchestration(ctx context.Context, t *testing.T, p *cdb.CosmosProvider) *cdb.OrchestrationItem {
	t.Helper()
	item, _, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	return item
}

// twoLeasedProcesses returns processes a and b sharing key's slots, both
// having fetched from the queue (fetch) and renewed, and a's share.
func twoLeasedProcesses(ctx context.Context, t *testing.T, acct *cdb.FakeAccount, clock *testClock, key string, fetch func(*cdb.CosmosProvider)) (a, b *cdb.CosmosProvider, aShare []int) {
	t.Helper()
	a = newLeasedProvider(t, acct, clock, "a")
	b = newLeasedProvider(t, acct, clock, "b")
	fetch(a)
	fetch(b)
	renewAll(ctx, t, a, b)
	renewAll(ctx, t, a, b) // a's view includes b's first entry too
	requireFairShares(t, key, a, b)
	st, err := a.ProcessLeases()
	require.NoError(t, err)
	return a, b, st.Shares[key]
}

// idleOrchestrationFetch is a fetch argument for twoLeasedProcesses: one
// look at an empty orchestrator queue.
func idleOrchestrationFetch(ctx context.Context, t *testing.T) func(*cdb.CosmosProvider) {
	return func(p *cdb.CosmosProvider) { require.Nil(t, fetchOrchestration(ctx, t, p)) }
}

func renewAll(ctx context.Context, t *testing.T, ps ...*cdb.CosmosProvider) {
	t.Helper()
	for _, p := range ps {
		require.NoError(t, cdb.RenewProcessLeaseForTest(ctx, p))
	}
}

// requireFairShares checks that the processes' shares of key are
// disjoint, cover every slot, and differ in size by at most one.
func requireFairShares(t *testing.T, key string, ps ...*cdb.CosmosProvider) {
	t.Helper()
	owner := map[int]string{}
	sizes := []int{}
	for _, p := range ps {
		st, err := p.ProcessLeases()
		require.NoError(t, err)
		require.Contains(t, st.Shares, key, "%s fetched with %s", st.ProcessID, key)
		slots := st.Shares[key]
		if len(ps) == 1 {
			require.Nil(t, slots, "a lone process owns every slot")
			return
		}
		for _, s := range slots {
			require.NotContains(t, owner, s, "slot %d has two owners", s)
			owner[s] = st.ProcessID
		}
		sizes = append(sizes, len(slots))
	}
	assert.Len(t, owner, 256, "every slot has an owner")
	assert.LessOrEqual(t, slices.Max(sizes)-slices.Min(sizes), 1, "shares differ by at most one slot: %v", sizes)
}

func TestProcessLeasesShareTheSlotsFairlyAcrossJoinsAndLeaves(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	a := newLeasedProvider(t, acct, clock, "a")
	fetchOrchestration(ctx, t, a)
	renewAll(ctx, t, a)
	requireFairShares(t, orchestratorKey, a)

	b := newLeasedProvider(t, acct, clock, "b")
	c := newLeasedProvider(t, acct, clock, "c")
	fetchOrchestration(ctx, t, b)
	fetchOrchestration(ctx, t, c)
	renewAll(ctx, t, a, b, c, a, b) // a second round: each saw the others' keys
	requireFairShares(t, orchestratorKey, a, b, c)

	require.NoError(t, c.Close()) // a clean leave gives the share back at once
	renewAll(ctx, t, a, b)
	requireFairShares(t, orchestratorKey, a, b)
}

func TestAProcessThatStopsRenewingIsTakenOverAfterItsLeaseExpires(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	a, _, _ := twoLeasedProcesses(ctx, t, acct, clock, orchestratorKey, idleOrchestrationFetch(ctx, t))
	// b renews no more: it died.
	clock.Advance(testLeaseDuration / 2)
	renewAll(ctx, t, a)
	st, err := a.ProcessLeases()
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b"}, st.Members, "b's lease still runs")

	clock.Advance(testLeaseDuration / 2)
	renewAll(ctx, t, a)
	st, err = a.ProcessLeases()
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, st.Members, "b's lease expired")
	assert.Nil(t, st.Shares[orchestratorKey], "a owns every slot")
}

func TestAProcessLeaseRenewalIsOneRequest(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	a := newLeasedProvider(t, acct, clock, "a")
	newLeasedProvider(t, acct, clock, "b")
	before := acct.Counts().Requests
	for range 5 {
		clock.Advance(testLeaseDuration / 3)
		renewAll(ctx, t, a)
	}
	assert.Equal(t, int64(5), acct.Counts().Requests-before, "one PATCH per renewal, which also reads the members")
}

// A fetch looks at its own share, and at the whole queue once per renewal
// interval (a third of the lease): work in the slots of a process that
// died is found before its lease expires.
func TestAFetchFindsWorkInTheSlotsOfAProcessThatDied(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	a := newLeasedProvider(t, acct, clock, "a")
	b := newLeasedProvider(t, acct, clock, "b")
	require.Nil(t, fetchOrchestration(ctx, t, b))
	renewAll(ctx, t, b) // and dies
	require.Nil(t, fetchOrchestration(ctx, t, a))
	renewAll(ctx, t, a)
	st, err := a.ProcessLeases()
	require.NoError(t, err)
	require.Len(t, st.Members, 2)
	require.NotNil(t, st.Shares[orchestratorKey])
	clock.Advance(time.Second)
	require.Nil(t, fetchOrchestration(ctx, t, a), "a's first idle look as a member is at the whole queue, and finds nothing")

	orphan := instanceInSlotOutside(t, st.Shares[orchestratorKey])
	writer := newRulesProvider(t, acct, cdb.Config{Now: clock.Now, ReconcileInterval: time.Hour}) // a third process
	require.NoError(t, writer.EnqueueForOrchestrator(ctx, cdb.StartOrchestrationMessage{Instance: orphan, Orchestration: "TestOrch", Input: "{}", Version: ptrTo("1.0.0"), ExecutionID: 1}, 0))

	clock.Advance(time.Second) // past the poll interval: a's next idle look is at its share
	assert.Nil(t, fetchOrchestration(ctx, t, a), "the item is in b's share, which a's idle look leaves to b")

	clock.Advance(testLeaseDuration / 2) // b's lease runs on; a whole look is due
	renewAll(ctx, t, a)
	item, token, _, err := a.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "the look at the whole queue finds the work b left")
	assert.Equal(t, orphan, item.Instance)
	require.NoError(t, a.AbandonOrchestrationItem(ctx, token, 0, true))
}

// instanceInSlotOutside names an instance whose slot is not in share.
func instanceInSlotOutside(t *testing.T, share []int) string {
	t.Helper()
	for i := range 10000 {
		id := "orphan-" + string(rune('a'+i%26)) + time.Duration(i).String()
		if !slices.Contains(share, cdb.DispatchSlotForTest(id)) {
			return id
		}
	}
	t.Fatal("no instance outside the share")
	return ""
}

func TestProcessLeaseOptionsAreChecked(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	for _, o := range []cdb.ProcessLeaseOptions{
		{ProcessID: "has space"},
		{ProcessID: "slash/in/it"},
		{ProcessID: "ok", LeaseDuration: 10 * time.Millisecond},
	} {
		_, err := cdb.NewProvider(context.Background(), cdb.Config{Client: acct.Client(), ProcessLeases: &o})
		assert.ErrorIs(t, err, cdb.ErrInvalidInput, "%+v", o)
	}
	_, err := cdb.NewProvider(context.Background(), cdb.Config{Client: acct.Client(),
		Leases: cdb.NewInMemoryLeaseProvider(), ProcessLeases: &cdb.ProcessLeaseOptions{}})
	assert.ErrorIs(t, err, cdb.ErrInvalidInput, "one lease provider or the other")
	p := newRulesProvider(t, acct, cdb.Config{})
	_, err = p.ProcessLeases()
	assert.ErrorIs(t, err, cdb.ErrNoProcessLeases)
}

// Shares are per lease key: a process that only runs activities (or
// fetches with other filters) takes no share of the orchestrator queue's
// slots, which would otherwise wait for the others' whole-queue looks.
func TestAProcessTakesASharePerQueueItFetches(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	a := newLeasedProvider(t, acct, clock, "a")
	workerOnly := newLeasedProvider(t, acct, clock, "w")
	fetchOrchestration(ctx, t, a)
	for _, p := range []*cdb.CosmosProvider{a, workerOnly} {
		_, _, _, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, cdb.DefaultOnlyFilter())
		require.NoError(t, err)
	}
	renewAll(ctx, t, a, workerOnly, a)
	requireFairShares(t, "worker/nosession/DefaultOnly", a, workerOnly)
	st, err := a.ProcessLeases()
	require.NoError(t, err)
	assert.Nil(t, st.Shares[orchestratorKey], "a is the orchestrator queue's only member")
}

// The membership document does not grow with every process that ever ran:
// an entry dead for ten lease durations is removed by a live process's
// renewal.
func TestLongDeadProcessesArePrunedFromTheMembership(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	a := newLeasedProvider(t, acct, clock, "a")
	newLeasedProvider(t, acct, clock, "b") // dies at once
	members := func() map[string]time.Time {
		m, err := a.ReadProcessLeaseMembers(ctx)
		require.NoError(t, err)
		return m
	}
	clock.Advance(5 * testLeaseDuration)
	renewAll(ctx, t, a, a)
	assert.Contains(t, members(), "b", "a dead entry is kept a while")

	clock.Advance(7 * testLeaseDuration)
	renewAll(ctx, t, a, a) // the first renewal learns b is long dead, the second removes it
	assert.NotContains(t, members(), "b")
	assert.Contains(t, members(), "a")
}

// A renewal whose response is lost, or that fails, changes nothing for good:
// the PATCH sets the entry, so the next renewal sends it again; and two
// processes that find the membership document gone both end up in it,
// whichever creates it (the other's create meets a 409 and patches, or its
// PATCH finds the new document): a lost response is resolved, never read as a
// lost lease.
func TestProcessLeaseRenewalsSurviveLostResponsesAndRacingCreates(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	a, b, _ := twoLeasedProcesses(ctx, t, acct, clock, orchestratorKey, idleOrchestrationFetch(ctx, t))

	isMembership := func(r cdb.FakeRequest) bool { return r.ItemID == "members" }
	acct.InjectFault(cdb.FakeFault{Match: isMembership, Kind: cdb.FaultLoseResponse, Times: 1})
	err := cdb.RenewProcessLeaseForTest(ctx, b)
	assert.True(t, cdb.IsOutcomeUnknown(err), "the response was lost: the outcome is unknown: %v", err)
	acct.InjectFault(cdb.FakeFault{Match: isMembership, Kind: cdb.FaultStatus, Status: 503, Times: 1})
	_ = cdb.RenewProcessLeaseForTest(ctx, a) // may or may not be retried by the client
	renewAll(ctx, t, a, b)
	requireFairShares(t, orchestratorKey, a, b)

	_, err = a.Container().DeleteItem(ctx, cdb.NewPartitionKeyString("lease|members"), "members", nil)
	require.NoError(t, err)
	errs := make(chan error, 2)
	for _, p := range []*cdb.CosmosProvider{a, b} {
		go func() { errs <- cdb.RenewProcessLeaseForTest(ctx, p) }()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	renewAll(ctx, t, a, b)
	requireFairShares(t, orchestratorKey, a, b)
}

// A renewal carries the process's client totals in its entry (the same
// PATCH operation), so a reader of the membership can turn two of them into
// rates; an entry from a build that publishes none reads without totals.
func TestAProcessLeaseRenewalPublishesTheClientsTotals(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	a := newLeasedProvider(t, acct, clock, "a")
	for range 3 {
		fetchOrchestration(ctx, t, a)
	}
	clock.Advance(testLeaseDuration / 3)
	before := a.Client().Stats()
	renewAll(ctx, t, a)
	after := a.Client().Stats()
	require.Equal(t, before.Requests+1, after.Requests, "the renewal is one request, totals included")

	pk := cdb.NewPartitionKeyString("lease|members")
	resp, err := a.Container().ReadItem(ctx, pk, "members", nil)
	require.NoError(t, err)
	var doc struct {
		Members map[string]struct {
			Totals map[string]float64 `json:"totals"`
		} `json:"members"`
	}
	require.NoError(t, json.Unmarshal(resp.Value, &doc))
	assert.Equal(t, map[string]float64{"ru": before.RequestCharge, "429": float64(before.Throttles),
		"req": float64(before.Requests), "at": float64(clock.Now().UnixMilli())}, doc.Members["a"].Totals,
		"the totals as the renewal read them, before its own request")
	assert.Greater(t, before.RequestCharge, 0.0)

	var ops cdb.PatchOperations
	ops.AppendSet("/members/old", map[string]any{"until": clock.Now().Add(time.Minute).UnixMilli()})
	_, err = a.Container().PatchItem(ctx, pk, "members", ops, nil)
	require.NoError(t, err)
	members, err := a.ReadProcessLeaseMembership(ctx)
	require.NoError(t, err)
	require.NotNil(t, members["a"].Totals)
	assert.Equal(t, cdb.ProcessTotals{RequestCharge: before.RequestCharge, Throttles: before.Throttles,
		Requests: before.Requests, ReadAt: time.UnixMilli(clock.Now().UnixMilli())}, *members["a"].Totals)
	assert.Nil(t, members["old"].Totals, "an entry without totals")
	assert.Equal(t, clock.Now().Add(time.Minute).UnixMilli(), members["old"].Until.UnixMilli())
}

// The reconciler's looks across the container (undelivered outboxes,
// abandoned deletions) run on one process of those sharing it, the first
// live member by id, not on every one; the next takes them on when it
// leaves.
func TestOnlyTheFirstLiveProcessLooksAcrossTheContainer(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	open := func(id string) *cdb.CosmosProvider {
		return newRulesProvider(t, acct, cdb.Config{PollInterval: time.Hour, ReconcileInterval: 20 * time.Millisecond,
			ProcessLeases: &cdb.ProcessLeaseOptions{ProcessID: id, LeaseDuration: time.Second}})
	}
	a, b := open("a"), open("b")
	queries := func(p *cdb.CosmosProvider) int64 { return p.Client().Stats().ByOperation["QueryItems"].Requests }
	window := func() (int64, int64) {
		qa, qb := queries(a), queries(b)
		time.Sleep(500 * time.Millisecond)
		return queries(a) - qa, queries(b) - qb
	}
	require.Eventually(t, func() bool { qa, qb := window(); return qa > 0 && qb == 0 }, 10*time.Second, 10*time.Millisecond,
		"once both know each other, a looks and b does not")

	require.NoError(t, a.Close()) // a leaves the members
	require.Eventually(t, func() bool { _, qb := window(); return qb > 0 }, 10*time.Second, 10*time.Millisecond, "b takes the looks on")
}
