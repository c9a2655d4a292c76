package cdb_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// QueryInstances: the filters, paging newest first across partition key
// ranges (ties within a millisecond, a split between pages), what a page
// costs, instances being deleted, and the input it refuses.

// listingFixture is a provider on an account of the given number of
// ranges, on a clock that stands still unless a test moves it, so that
// a test decides which instances share a millisecond.
type listingFixture struct {
	acct  *cdb.FakeAccount
	p     *cdb.CosmosProvider
	clock *testClock
}

func newListingFixture(t *testing.T, ranges int) listingFixture {
	t.Helper()
	clock := newTestClock()
	now := clock.Now()
	clock.Advance(time.UnixMilli(now.UnixMilli() + 1).Sub(now)) // on a millisecond, as the store keeps times
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{PartitionKeyRanges: ranges, Now: clock.Now})
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now, ReconcileInterval: time.Hour})
	return listingFixture{acct: acct, p: p, clock: clock}
}

// start creates instance id of orchestration name, now on the fixture's
// clock, its first turn leaving it with status.
func (f listingFixture) start(ctx context.Context, t *testing.T, id, name string, status cdb.InstanceStatus) {
	t.Helper()
	version := "1.0.0"
	require.NoError(t, f.p.EnqueueForOrchestrator(ctx, cdb.StartOrchestrationMessage{Instance: id, Orchestration: name, Input: "{}",
		Version: &version, ExecutionID: cdb.InitialExecutionID}, 0))
	item, token, _, err := f.p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item)
	require.Equal(t, id, item.Instance)
	started := cdb.Event{EventID: cdb.InitialEventID, InstanceID: id, ExecutionID: cdb.InitialExecutionID, DuroxideVersion: "0.1.30",
		Kind: cdb.OrchestrationStarted{Name: name, Version: version, Input: "{}"}}
	require.NoError(t, f.p.AckOrchestrationItem(ctx, token, cdb.InitialExecutionID, []cdb.Event{started}, nil, nil,
		cdb.ExecutionMetadata{OrchestrationName: &name, OrchestrationVersion: &version, Status: &status}, nil))
}

// startMany creates n Running instances "<prefix>-NNN", perMs of them in
// each millisecond.
func (f listingFixture) startMany(ctx context.Context, t *testing.T, prefix string, n, perMs int) {
	t.Helper()
	for i := range n {
		if i > 0 && i%perMs == 0 {
			f.clock.Advance(time.Millisecond)
		}
		f.start(ctx, t, fmt.Sprintf("%s-%03d", prefix, i), "Work", cdb.StatusRunning)
	}
	f.clock.Advance(time.Millisecond)
}

func ids(page cdb.InstancePage) []string {
	out := []string{}
	for _, i := range page.Instances {
		out = append(out, i.InstanceID)
	}
	return out
}

func queryPage(t *testing.T, p *cdb.CosmosProvider, q cdb.InstanceQuery) cdb.InstancePage {
	t.Helper()
	page, err := p.QueryInstances(rulesContext(t), q)
	require.NoError(t, err)
	return page
}

// everyPage follows the continuation tokens to the last page, and returns
// what the pages listed, in order, and how many pages it took.
func everyPage(t *testing.T, p *cdb.CosmosProvider, q cdb.InstanceQuery, between func(page int)) ([]cdb.InstanceInfo, int) {
	t.Helper()
	var listed []cdb.InstanceInfo
	for pages := 1; pages <= 1000; pages++ {
		page := queryPage(t, p, q)
		require.LessOrEqual(t, len(page.Instances), max(q.PageSize, 1), "a page holds at most PageSize")
		listed = append(listed, page.Instances...)
		if page.ContinuationToken == "" {
			return listed, pages
		}
		q.ContinuationToken = page.ContinuationToken
		if between != nil {
			between(pages)
		}
	}
	require.FailNow(t, "the pages never end")
	return nil, 0
}

// assertNewestFirstOnce asserts listed holds each of want exactly once,
// ordered by creation time, then instance id, both descending.
func assertNewestFirstOnce(t *testing.T, listed []cdb.InstanceInfo, want []string) {
	t.Helper()
	seen := map[string]int{}
	for i, info := range listed {
		seen[info.InstanceID]++
		if i > 0 {
			prev := listed[i-1]
			newer := prev.CreatedAt > info.CreatedAt || prev.CreatedAt == info.CreatedAt && prev.InstanceID > info.InstanceID
			assert.True(t, newer, "%s (%d) is listed after %s (%d)", info.InstanceID, info.CreatedAt, prev.InstanceID, prev.CreatedAt)
		}
	}
	for _, id := range want {
		assert.Equal(t, 1, seen[id], "%s is listed once", id)
	}
	assert.Len(t, listed, len(want))
}

func TestQueryInstancesFiltersOnTheServer(t *testing.T) {
	ctx := rulesContext(t)
	f := newListingFixture(t, 2)
	t0 := f.clock.Now()
	for _, inst := range []struct {
		id, name string
		status   cdb.InstanceStatus
	}{
		{"old-report", "Report", cdb.StatusRunning},
		{"old-order", "ProcessOrder", cdb.StatusCompleted},
		{"order-1", "ProcessOrder", cdb.StatusRunning},
		{"report-1", "Report", cdb.StatusFailed},
		{"order-2", "ProcessOrder", cdb.StatusCompleted},
		{"refund-1", "ProcessRefund", cdb.StatusContinuedAsNew},
	} {
		f.start(ctx, t, inst.id, inst.name, inst.status)
		f.clock.Advance(time.Minute)
	}
	minute := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }

	for _, c := range []struct {
		name string
		q    cdb.InstanceQuery
		want []string
	}{
		{"everything", cdb.InstanceQuery{}, []string{"refund-1", "order-2", "report-1", "order-1", "old-order", "old-report"}},
		{"one status", cdb.InstanceQuery{Statuses: []cdb.InstanceStatus{cdb.StatusCompleted}}, []string{"order-2", "old-order"}},
		{"statuses", cdb.InstanceQuery{Statuses: []cdb.InstanceStatus{cdb.StatusRunning, cdb.StatusFailed}}, []string{"report-1", "order-1", "old-report"}},
		{"exact name", cdb.InstanceQuery{Name: "Report"}, []string{"report-1", "old-report"}},
		{"exact name matches no prefix", cdb.InstanceQuery{Name: "Process"}, []string{}},
		{"name prefix", cdb.InstanceQuery{Name: "Process*"}, []string{"refund-1", "order-2", "order-1", "old-order"}},
		{"a lone star is every name", cdb.InstanceQuery{Name: "*"}, []string{"refund-1", "order-2", "report-1", "order-1", "old-order", "old-report"}},
		{"created after", cdb.InstanceQuery{CreatedAfter: minute(3)}, []string{"refund-1", "order-2"}},
		{"created before", cdb.InstanceQuery{CreatedBefore: minute(2)}, []string{"old-order", "old-report"}},
		{"created between", cdb.InstanceQuery{CreatedAfter: minute(1), CreatedBefore: minute(4)}, []string{"report-1", "order-1"}},
		{"ended after", cdb.InstanceQuery{EndedAfter: minute(3)}, []string{"order-2", "report-1"}},
		{"ended after, and a status", cdb.InstanceQuery{EndedAfter: minute(1), Statuses: []cdb.InstanceStatus{cdb.StatusCompleted}}, []string{"order-2", "old-order"}},
		{"every filter", cdb.InstanceQuery{Statuses: []cdb.InstanceStatus{cdb.StatusRunning, cdb.StatusCompleted}, Name: "Process*",
			CreatedAfter: minute(1), CreatedBefore: minute(5)}, []string{"order-2", "order-1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			page := queryPage(t, f.p, c.q)
			assert.Equal(t, c.want, ids(page))
			assert.Empty(t, page.ContinuationToken, "one page holds them all")
			assert.Positive(t, page.RequestCharge)
		})
	}

	page := queryPage(t, f.p, cdb.InstanceQuery{Name: "Report", PageSize: 1})
	require.Equal(t, []string{"report-1"}, ids(page))
	info := page.Instances[0]
	assert.Equal(t, "Report", info.OrchestrationName)
	assert.Equal(t, "1.0.0", info.OrchestrationVersion)
	assert.Equal(t, cdb.StatusFailed, info.Status)
	assert.EqualValues(t, 1, info.CurrentExecutionID)
	assert.EqualValues(t, minute(3).UnixMilli(), info.CreatedAt)
	assert.Nil(t, info.Output, "a listing reads no output")
	assert.Nil(t, info.ParentInstanceID)
	assert.NotEmpty(t, page.ContinuationToken, "old-report is next")
}

func TestQueryInstancesPagesThroughEveryInstanceOnceNewestFirst(t *testing.T) {
	ctx := rulesContext(t)
	f := newListingFixture(t, 3)
	f.startMany(ctx, t, "inst", 250, 3) // runs of three in a millisecond, cut anywhere by pages of 7
	var want []string
	for i := range 250 {
		want = append(want, fmt.Sprintf("inst-%03d", i))
	}
	listed, pages := everyPage(t, f.p, cdb.InstanceQuery{PageSize: 7}, nil)
	assertNewestFirstOnce(t, listed, want)
	assert.Equal(t, 36, pages, "250 in pages of 7")
}

// Instances created in one millisecond, in every range: ORDER BY createdAt
// leaves them in any order, and a range's answer may stop in the middle
// of them; each is still listed once, by instance id descending.
func TestQueryInstancesListsTiesAcrossRangesOnce(t *testing.T) {
	ctx := rulesContext(t)
	f := newListingFixture(t, 4)
	f.startMany(ctx, t, "early", 5, 1)
	f.startMany(ctx, t, "same", 60, 60)
	f.startMany(ctx, t, "late", 5, 1)
	var want []string
	for _, prefix := range []string{"early", "same", "late"} {
		n := map[string]int{"early": 5, "same": 60, "late": 5}[prefix]
		for i := range n {
			want = append(want, fmt.Sprintf("%s-%03d", prefix, i))
		}
	}
	for _, size := range []int{1, 7, 59, 60, 61} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			listed, _ := everyPage(t, f.p, cdb.InstanceQuery{PageSize: size}, nil)
			assertNewestFirstOnce(t, listed, want)
		})
	}
}

// A page is one query per partition key range, whatever the container
// holds, and reads no instance on its own.
func TestQueryInstancesPageCostsOneQueryPerRange(t *testing.T) {
	ctx := rulesContext(t)
	const ranges = 4
	f := newListingFixture(t, ranges)
	f.startMany(ctx, t, "inst", 40, 1)
	first := queryPage(t, f.p, cdb.InstanceQuery{PageSize: 10}) // reads the range list once
	f.acct.ResetCounts()

	page := queryPage(t, f.p, cdb.InstanceQuery{PageSize: 10, ContinuationToken: first.ContinuationToken})
	require.Len(t, page.Instances, 10)
	counts := f.acct.Counts()
	assert.EqualValues(t, ranges, counts.Requests, "one request per range: %v", counts.ByOperation)
	assert.EqualValues(t, ranges, counts.ByOperation["Query"])
	assert.Zero(t, counts.ByOperation["ReadItem"], "no instance is read on its own")
	assert.LessOrEqual(t, counts.DocumentsReturned, int64(ranges*11), "at most a page and one more from each range")
	assert.InDelta(t, counts.RequestCharge, page.RequestCharge, 1e-9, "the page reports what it cost")
}

func TestQueryInstancesGoesOnAcrossASplitBetweenPages(t *testing.T) {
	ctx := rulesContext(t)
	f := newListingFixture(t, 2)
	f.startMany(ctx, t, "inst", 60, 2)
	var want []string
	for i := range 60 {
		want = append(want, fmt.Sprintf("inst-%03d", i))
	}
	listed, _ := everyPage(t, f.p, cdb.InstanceQuery{PageSize: 7}, func(page int) {
		if page == 2 {
			require.NoError(t, f.acct.SplitPartitionKeyRanges("duroxide", "duroxide"))
		}
	})
	assertNewestFirstOnce(t, listed, want)
	ranges, err := f.p.Container().ReadPartitionKeyRanges(ctx, true)
	require.NoError(t, err)
	assert.Len(t, ranges, 4, "the pages after the split read the four ranges")
}

// A tree whose deletion stopped after its first step (its root marked) is
// left out whole, as GetInstanceInfo leaves it out; the ancestors are read
// only while some deletion is in flight.
func TestQueryInstancesLeavesOutATreeBeingDeleted(t *testing.T) {
	ctx := rulesContext(t)
	f := newListingFixture(t, 2)
	providertest.CreateInstance(ctx, t, f.p, "root")
	startChild(ctx, t, f.p, "root::child", "root")
	startChild(ctx, t, f.p, "root::child::leaf", "root::child")
	providertest.CreateInstance(ctx, t, f.p, "other")

	f.acct.ResetCounts()
	page := queryPage(t, f.p, cdb.InstanceQuery{})
	assert.ElementsMatch(t, []string{"root", "root::child", "root::child::leaf", "other"}, ids(page))
	assert.Zero(t, f.acct.Counts().ByOperation["ReadItem"], "nothing is being deleted: no ancestor is read")

	// Once the intent's batch is sent, the deleting process loses every
	// connection: the root is marked, its descendants are not yet.
	var recorded atomic.Bool
	remove := f.acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultDropConnection, Match: func(r cdb.FakeRequest) bool {
		if recorded.Load() {
			return true
		}
		recorded.Store(r.Operation == "Batch" && r.PartitionKey == `["root"]`)
		return false
	}})
	_, err := f.p.DeleteInstance(ctx, "root", true)
	require.True(t, cdb.IsRetryable(err), "the injected lost connection, worth retrying: %v", err)
	require.True(t, recorded.Load())
	remove()

	f.acct.ResetCounts()
	page = queryPage(t, f.p, cdb.InstanceQuery{})
	assert.Equal(t, []string{"other"}, ids(page))
	assert.EqualValues(t, 1, f.acct.Counts().ByOperation["ReadItem"], "the leaf's parent is read once; the child's parent is the marked root")
}

func TestQueryInstancesListsOnlyParkedInstances(t *testing.T) {
	ctx := rulesContext(t)
	f := newListingFixture(t, 2)
	f.start(ctx, t, "done", "Report", cdb.StatusCompleted)
	f.start(ctx, t, "busy", "Report", cdb.StatusRunning)
	f.start(ctx, t, "stuck", "Report", cdb.StatusRunning)
	f.start(ctx, t, "stuck-order", "ProcessOrder", cdb.StatusRunning)
	for _, id := range []string{"stuck", "stuck-order"} {
		require.NoError(t, f.p.EnqueueForOrchestrator(ctx, pokeItem(id), 0))
		item, token, _, err := f.p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.Equal(t, id, item.Instance)
		require.NoError(t, f.p.ParkOrchestrationItem(ctx, token, time.Hour, "diverged"))
	}

	page := queryPage(t, f.p, cdb.InstanceQuery{Parked: true})
	assert.ElementsMatch(t, []string{"stuck", "stuck-order"}, ids(page))
	for _, info := range page.Instances {
		require.NotNil(t, info.Parked, info.InstanceID)
		assert.Equal(t, "diverged", info.Parked.Reason)
	}
	assert.Equal(t, []string{"stuck"}, ids(queryPage(t, f.p, cdb.InstanceQuery{Parked: true, Name: "Report"})))
	assert.Empty(t, ids(queryPage(t, f.p, cdb.InstanceQuery{Parked: true, Statuses: []cdb.InstanceStatus{cdb.StatusCompleted}})),
		"a parked instance is Running")
}

func TestQueryInstancesRefusesBadInput(t *testing.T) {
	ctx := rulesContext(t)
	f := newListingFixture(t, 1)
	jan1 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	token := func(json string) string { return base64.RawURLEncoding.EncodeToString([]byte(json)) }
	for _, c := range []struct {
		q    cdb.InstanceQuery
		want string
	}{
		{cdb.InstanceQuery{PageSize: -1}, "QueryInstances: PageSize -1: want 0 (for 100) to 1000: invalid input"},
		{cdb.InstanceQuery{PageSize: 1001}, "QueryInstances: PageSize 1001: want 0 (for 100) to 1000: invalid input"},
		{cdb.InstanceQuery{CreatedAfter: jan1.Add(time.Hour), CreatedBefore: jan1},
			"QueryInstances: CreatedAfter 2026-01-01T01:00:00Z is after CreatedBefore 2026-01-01T00:00:00Z: invalid input"},
		{cdb.InstanceQuery{Name: "Pro*cess"}, `QueryInstances: Name "Pro*cess": '*' may only end it: invalid input`},
		{cdb.InstanceQuery{Name: "Process**"}, `QueryInstances: Name "Process**": '*' may only end it: invalid input`},
		{cdb.InstanceQuery{Statuses: []cdb.InstanceStatus{cdb.StatusRunning, "Done"}},
			`QueryInstances: status "Done": want one of Running, Completed, Failed, ContinuedAsNew, Queued: invalid input`},
		{cdb.InstanceQuery{ContinuationToken: "order-2"}, "QueryInstances: ContinuationToken is malformed: invalid input"},
		{cdb.InstanceQuery{ContinuationToken: token(`[1]`)}, "QueryInstances: ContinuationToken is malformed: invalid input"},
		{cdb.InstanceQuery{ContinuationToken: `{"fp":"1a2b","lo":1}`}, "QueryInstances: ContinuationToken is malformed: invalid input"},
		{cdb.InstanceQuery{ContinuationToken: token(`{"fp":"1a2b","lo":1}`)}, "QueryInstances: ContinuationToken was not given by QueryInstances: invalid input"},
		{cdb.InstanceQuery{ContinuationToken: token(`{"v":2,"at":5}`)}, "QueryInstances: ContinuationToken was not given by QueryInstances: invalid input"},
	} {
		before := f.acct.Counts().Requests
		_, err := f.p.QueryInstances(ctx, c.q)
		require.Error(t, err, "%+v", c.q)
		assert.ErrorIs(t, err, cdb.ErrInvalidInput, "%+v", c.q)
		assert.ErrorIs(t, err, cdb.ErrRefused, "%+v", c.q)
		assert.EqualError(t, err, c.want)
		assert.Equal(t, before, f.acct.Counts().Requests, "refused before anything is sent: %+v", c.q)
	}
}

// A token that does not decode is refused as invalid input, and the
// decoder's error stays reachable behind the refusal.
func TestQueryInstancesRefusalOfAMalformedTokenWrapsTheDecodeError(t *testing.T) {
	ctx := rulesContext(t)
	f := newListingFixture(t, 1)

	_, err := f.p.QueryInstances(ctx, cdb.InstanceQuery{ContinuationToken: base64.RawURLEncoding.EncodeToString([]byte(`[1]`))})
	require.ErrorIs(t, err, cdb.ErrInvalidInput)
	var typeErr *json.UnmarshalTypeError
	assert.ErrorAs(t, err, &typeErr, "the JSON decoder's error")

	_, err = f.p.QueryInstances(ctx, cdb.InstanceQuery{ContinuationToken: "{not base64}"})
	require.ErrorIs(t, err, cdb.ErrInvalidInput)
	var b64Err base64.CorruptInputError
	assert.ErrorAs(t, err, &b64Err, "the base64 decoder's error")
}

// The default page holds 100, and the largest 1000.
func TestQueryInstancesPageSizeBounds(t *testing.T) {
	ctx := rulesContext(t)
	f := newListingFixture(t, 1)
	f.startMany(ctx, t, "inst", 101, 1)
	page := queryPage(t, f.p, cdb.InstanceQuery{})
	assert.Len(t, page.Instances, cdb.DefaultInstancePageSize)
	assert.NotEmpty(t, page.ContinuationToken)
	page = queryPage(t, f.p, cdb.InstanceQuery{PageSize: cdb.MaxInstancePageSize})
	assert.Len(t, page.Instances, 101)
	assert.Empty(t, page.ContinuationToken)
	sorted := ids(page)
	assert.True(t, sort.SliceIsSorted(sorted, func(i, j int) bool { return sorted[i] > sorted[j] }), "newest first")
}

// A range asked again for a millisecond's ties that is gone meanwhile (a
// split) is replaced by asking every range for them.
func TestQueryInstancesAsksEveryRangeForTiesWhenOneIsGone(t *testing.T) {
	ctx := rulesContext(t)
	f := newListingFixture(t, 2)
	f.startMany(ctx, t, "same", 30, 30)
	var gone atomic.Int32
	f.acct.InjectFault(cdb.FakeFault{Kind: cdb.FaultStatus, Status: 410, SubStatus: 1002, Times: 1, Match: func(r cdb.FakeRequest) bool {
		hit := r.Operation == "Query" && r.PartitionKeyRangeID != "" && strings.Contains(string(r.Body), "c.createdAt = @at")
		if hit {
			gone.Add(1)
		}
		return hit
	}})
	var want []string
	for i := range 30 {
		want = append(want, fmt.Sprintf("same-%03d", i))
	}
	listed, _ := everyPage(t, f.p, cdb.InstanceQuery{PageSize: 7}, nil)
	assertNewestFirstOnce(t, listed, want)
	assert.Positive(t, gone.Load(), "a range asked for the ties answered gone")
}
