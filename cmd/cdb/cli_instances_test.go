package main

// cdb instances' filters and pages through the built binary, and the
// query it sends the provider.

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// agedInstance is an instance the aged fixture creates, that long ago.
type agedInstance struct {
	id, name string
	status   cdb.InstanceStatus
	ago      time.Duration
}

// agedInstances are created oldest first, so newest first they read
// order-3, order-2, report-1, order-1, old-order, old-report.
var agedInstances = []agedInstance{
	{"old-report", "Report", cdb.StatusRunning, 3 * time.Hour},
	{"old-order", "ProcessOrder", cdb.StatusCompleted, 3*time.Hour - time.Minute},
	{"order-1", "ProcessOrder", cdb.StatusRunning, 10 * time.Minute},
	{"report-1", "Report", cdb.StatusFailed, 9 * time.Minute},
	{"order-2", "ProcessOrder", cdb.StatusCompleted, 8 * time.Minute},
	{"order-3", "ProcessOrder", cdb.StatusRunning, 7 * time.Minute},
}

// agedFixture serves a fake account whose instances were created
// agedInstances' ages ago: the account's clock is set back for each
// creation, then runs on time for the binary.
func agedFixture(t *testing.T) []string {
	t.Helper()
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: now})
	srv := httptest.NewServer(acct.Handler())
	t.Cleanup(srv.Close)
	ctx := context.Background()
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client(), ShortPolling: true, Now: now})
	require.NoError(t, err)
	defer p.Close()
	for _, inst := range agedInstances {
		offset.Store(int64(-inst.ago))
		createWithStatus(ctx, t, p, inst)
	}
	offset.Store(0)
	return []string{"-endpoint", srv.URL, "-key", acct.Key()}
}

func createWithStatus(ctx context.Context, t *testing.T, p *cdb.CosmosProvider, inst agedInstance) {
	t.Helper()
	version := "1.0.0"
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.StartOrchestrationMessage{Instance: inst.id, Orchestration: inst.name, Input: "{}",
		Version: &version, ExecutionID: cdb.InitialExecutionID}, 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Equal(t, inst.id, item.Instance)
	started := cdb.Event{EventID: cdb.InitialEventID, InstanceID: inst.id, ExecutionID: cdb.InitialExecutionID, DuroxideVersion: "0.1.30",
		Kind: cdb.OrchestrationStarted{Name: inst.name, Version: version, Input: "{}"}}
	status := inst.status
	require.NoError(t, p.AckOrchestrationItem(ctx, token, cdb.InitialExecutionID, []cdb.Event{started}, nil, nil,
		cdb.ExecutionMetadata{OrchestrationName: &inst.name, OrchestrationVersion: &version, Status: &status}, nil))
}

// instancesPage is `cdb instances -o json` as a script reads it.
type instancesPage struct {
	Instances []struct {
		InstanceID string `json:"instance_id"`
	} `json:"instances"`
	Next    *string `json:"next"`
	Scanned int     `json:"scanned"`
}

func (p instancesPage) ids() []string {
	ids := []string{}
	for _, i := range p.Instances {
		ids = append(ids, i.InstanceID)
	}
	return ids
}

func listPage(t *testing.T, conn []string, args ...string) instancesPage {
	t.Helper()
	code, stdout, stderr := cli(append(append([]string{"instances", "-o", "json"}, args...), conn...)...).run(t)
	require.Equal(t, 0, code, "cdb instances %v: %s", args, stderr)
	var page instancesPage
	require.NoError(t, json.Unmarshal([]byte(stdout), &page), stdout)
	return page
}

func TestBinaryInstancesPagesWithLimitAndAfter(t *testing.T) {
	conn := agedFixture(t)
	page := listPage(t, conn, "-limit", "2")
	assert.Equal(t, []string{"order-3", "order-2"}, page.ids())
	require.NotNil(t, page.Next)
	assert.Equal(t, 2, page.Scanned, "a page reads only its own instances")

	code, stdout, stderr := cli(append([]string{"instances", "-limit", "2"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "(2 read; next page: -after "+*page.Next+")\n")

	page = listPage(t, conn, "-limit", "2", "-after", *page.Next)
	assert.Equal(t, []string{"report-1", "order-1"}, page.ids())
	require.NotNil(t, page.Next)

	page = listPage(t, conn, "-limit", "2", "-after", *page.Next)
	assert.Equal(t, []string{"old-order", "old-report"}, page.ids())
	assert.Nil(t, page.Next, "the last page has no next")

	code, stdout, stderr = cli(append([]string{"instances", "-after", "order-2"}, conn...)...).run(t)
	assert.Equal(t, 2, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, `cdb instances: -after: "order-2" is not a next page cdb instances printed (QueryInstances: ContinuationToken is malformed: invalid input)`)
}

func TestBinaryInstancesFiltersByStatusesNameAndAge(t *testing.T) {
	conn := agedFixture(t)
	page := listPage(t, conn, "-status", "running,Failed")
	assert.Equal(t, []string{"order-3", "report-1", "order-1", "old-report"}, page.ids())

	page = listPage(t, conn, "-name", "Process*")
	assert.Equal(t, []string{"order-3", "order-2", "order-1", "old-order"}, page.ids())
	assert.Equal(t, 4, page.Scanned, "the store matched the prefix")

	page = listPage(t, conn, "-older-than", "1h")
	assert.Equal(t, []string{"old-order", "old-report"}, page.ids())
	assert.Equal(t, 2, page.Scanned, "the store left the newer instances out")

	page = listPage(t, conn, "-newer-than", "1h")
	assert.Equal(t, []string{"order-3", "order-2", "report-1", "order-1"}, page.ids())
	assert.Nil(t, page.Next)

	page = listPage(t, conn, "-older-than", "8m30s", "-newer-than", "1h", "-status", "Running,Completed,Failed")
	assert.Equal(t, []string{"report-1", "order-1"}, page.ids())

	page = listPage(t, conn, "-name", "Report", "-status", "Running")
	assert.Equal(t, []string{"old-report"}, page.ids())

	code, stdout, stderr := cli(append([]string{"instances", "-older-than", "2h", "-newer-than", "1h"}, conn...)...).run(t)
	assert.Equal(t, 2, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, "-older-than 2h0m0s and -newer-than 1h0m0s select nothing")
}

// A -name pattern the store cannot match is matched on the instances the
// page read: the page may come back short of -limit, with a next.
func TestBinaryInstancesMatchesOtherPatternsOnThePageRead(t *testing.T) {
	conn := agedFixture(t)
	page := listPage(t, conn, "-name", "*Report", "-limit", "2")
	assert.Empty(t, page.ids(), "order-3 and order-2 were read, neither a Report")
	assert.Equal(t, 2, page.Scanned)
	require.NotNil(t, page.Next)

	code, stdout, stderr := cli(append([]string{"instances", "-name", "*Report", "-limit", "2"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "(no instances)\n(2 read; next page: -after "+*page.Next+")\n")

	page = listPage(t, conn, "-name", "*Report", "-limit", "2", "-after", *page.Next)
	assert.Equal(t, []string{"report-1"}, page.ids())

	page = listPage(t, conn, "-name", "Re?ort")
	assert.Equal(t, []string{"report-1", "old-report"}, page.ids())
	assert.Equal(t, 2, page.Scanned, "the store matched the literal prefix Re")
}

func TestBinaryInstancesRefusesBadFilters(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-older-than", "0s"}, "-older-than: must be positive, got 0s"},
		{[]string{"-newer-than", "soon"}, "-newer-than: not a duration"},
		{[]string{"-status", "Running,Done"}, `-status: "Done" is not one of Running, Completed, Failed, ContinuedAsNew, Queued, Parked`},
		{[]string{"-name", "[Order"}, `-name: "[Order" is not a name pattern`},
		{[]string{"-limit", "0"}, "-limit: must be 1 to 1000, got 0"},
		{[]string{"-limit", "1001"}, "-limit: must be 1 to 1000, got 1001"},
		{[]string{"-scan", "10"}, "flag provided but not defined: -scan"},
	} {
		code, stdout, stderr := cli(append([]string{"instances"}, c.args...)...).run(t)
		assert.Equal(t, 2, code, "cdb instances %v", c.args)
		assert.Empty(t, stdout)
		assert.Contains(t, stderr, c.want, "cdb instances %v", c.args)
	}
}

// recordingPager keeps the query it is asked and answers an empty page.
type recordingPager struct{ asked cdb.InstanceQuery }

func (r *recordingPager) QueryInstances(_ context.Context, q cdb.InstanceQuery) (cdb.InstancePage, error) {
	r.asked = q
	return cdb.InstancePage{}, nil
}

// The flags become the provider's query: what the store can filter is
// sent, and the rest of a -name pattern is left to the page.
func TestInstancesSendsItsFiltersToTheStore(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		q    instanceQuery
		want cdb.InstanceQuery
	}{
		{"statuses", instanceQuery{statuses: statusList{cdb.StatusRunning, cdb.StatusFailed}, limit: 5},
			cdb.InstanceQuery{Statuses: []cdb.InstanceStatus{cdb.StatusRunning, cdb.StatusFailed}, PageSize: 5}},
		{"parked", instanceQuery{statuses: statusList{statusParked}, limit: 5}, cdb.InstanceQuery{Parked: true, PageSize: 5}},
		{"a name", instanceQuery{name: "Report", limit: 5}, cdb.InstanceQuery{Name: "Report", PageSize: 5}},
		{"a prefix", instanceQuery{name: "Process*", limit: 5}, cdb.InstanceQuery{Name: "Process*", PageSize: 5}},
		{"a pattern: its literal prefix", instanceQuery{name: "Proc?ss*", limit: 5}, cdb.InstanceQuery{Name: "Proc*", PageSize: 5}},
		{"a pattern with a class", instanceQuery{name: "Order[12]", limit: 5}, cdb.InstanceQuery{Name: "Order*", PageSize: 5}},
		{"a pattern that starts wild: no name", instanceQuery{name: "*Order", limit: 5}, cdb.InstanceQuery{PageSize: 5}},
		{"ages", instanceQuery{olderThan: age(time.Hour), newerThan: age(3 * time.Hour), limit: 5, now: now},
			cdb.InstanceQuery{CreatedBefore: now.Add(-time.Hour), CreatedAfter: now.Add(-3 * time.Hour), PageSize: 5}},
		{"after", instanceQuery{after: "abc", limit: 5}, cdb.InstanceQuery{ContinuationToken: "abc", PageSize: 5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var r recordingPager
			_, err := c.q.page(context.Background(), &r)
			require.NoError(t, err)
			assert.Equal(t, c.want, r.asked)
		})
	}
}

// The help says which filters the store applies and which cdb checks on
// the page, and what a start can and cannot tell.
func TestBinaryHelpSaysWhatIsFilteredWhere(t *testing.T) {
	code, stdout, _ := cli("help", "instances").run(t)
	require.Equal(t, 0, code)
	assert.Contains(t, unwrapped(stdout), "A -name pattern other than a name or a prefix ending in * is matched by its literal prefix there and whole here")
	code, stdout, _ = cli("help", "start").run(t)
	require.Equal(t, 0, code)
	assert.Contains(t, unwrapped(stdout), "a taken id exits with code 3")
	assert.Contains(t, unwrapped(stdout), "a start still queued (reported as Queued)")
}

// refusingPager refuses every query with err.
type refusingPager struct{ err error }

func (p refusingPager) QueryInstances(context.Context, cdb.InstanceQuery) (cdb.InstancePage, error) {
	return cdb.InstancePage{}, p.err
}

// An -after the provider refuses is a usage error that keeps the refusal
// behind it, not only its text.
func TestAnAfterTheProviderRefusesIsAUsageErrorWrappingTheRefusal(t *testing.T) {
	refusal := &cdb.ProviderError{Op: "QueryInstances", Message: "ContinuationToken is malformed: invalid input",
		Err: cdb.ErrInvalidInput, Refusal: true}
	_, err := instanceQuery{after: "order-2"}.page(context.Background(), refusingPager{err: refusal})
	var usage usageError
	require.ErrorAs(t, err, &usage)
	var pe *cdb.ProviderError
	require.ErrorAs(t, err, &pe, "the provider's refusal")
	assert.Same(t, refusal, pe)
}

// A start no runtime has taken yet lists as Queued, as show reads it, and
// -status selects it by that status.
func TestBinaryInstancesListsQueuedStartsAsQueued(t *testing.T) {
	fx, key := operatorFixture(t)
	conn := []string{"-endpoint", fx.endpoint, "-key", key}
	for _, id := range []string{"waiting-1", "waiting-2"} {
		code, _, stderr := cli(append([]string{"start", "ProcessOrder", "-id", id}, conn...)...).run(t)
		require.Equal(t, 0, code, stderr)
	}

	code, stdout, stderr := cli(append([]string{"instances"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, stdout, "(no instances)")
	assert.Regexp(t, `waiting-1\s+Queued\s+ProcessOrder@unknown\s+1\s`, stdout)
	assert.Regexp(t, `waiting-2\s+Queued\s+ProcessOrder@unknown\s+1\s`, stdout)

	assert.ElementsMatch(t, []string{"waiting-1", "waiting-2"}, listPage(t, conn, "-status", "queued").ids())
	assert.Equal(t, []string{"busy"}, listPage(t, conn, "-status", "Running").ids(), "the fixture's running instance, no queued start")
	assert.ElementsMatch(t, []string{"waiting-1", "waiting-2"}, listPage(t, conn, "-name", "Process*").ids())
}
