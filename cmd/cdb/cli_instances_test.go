package main

// cdb instances' filters and pages through the built binary, and the
// bisection that finds -older-than's first instance in a few reads.

import (
	"context"
	"encoding/json"
	"fmt"
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
	Total   *int    `json:"total"`
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

func ptrTo[T any](v T) *T { return &v }

func TestBinaryInstancesPagesWithLimitAndAfter(t *testing.T) {
	conn := agedFixture(t)
	page := listPage(t, conn, "-limit", "2")
	assert.Equal(t, []string{"order-3", "order-2"}, page.ids())
	assert.Equal(t, ptrTo(6), page.Total, "without -name or an age, total counts every match")
	assert.Equal(t, ptrTo("order-2"), page.Next)
	assert.Equal(t, 2, page.Scanned, "a page reads only its own instances")

	page = listPage(t, conn, "-limit", "2", "-after", "order-2")
	assert.Equal(t, []string{"report-1", "order-1"}, page.ids())
	assert.Equal(t, ptrTo("order-1"), page.Next)

	page = listPage(t, conn, "-limit", "2", "-after", "order-1")
	assert.Equal(t, []string{"old-order", "old-report"}, page.ids())
	assert.Nil(t, page.Next, "the last page has no next")

	code, stdout, stderr := cli(append([]string{"instances", "-limit", "2"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "(2 of 6; next page: -after order-2)\n")

	code, stdout, stderr = cli(append([]string{"instances", "-after", "gone"}, conn...)...).run(t)
	assert.Equal(t, 1, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, `cdb instances: -after: instance "gone" not listed (deleted since?): start again without -after`)
}

func TestBinaryInstancesFiltersByStatusesNameAndAge(t *testing.T) {
	conn := agedFixture(t)
	page := listPage(t, conn, "-status", "running,Failed")
	assert.Equal(t, []string{"order-3", "report-1", "order-1", "old-report"}, page.ids())
	assert.Equal(t, ptrTo(4), page.Total)

	page = listPage(t, conn, "-name", "Process*")
	assert.Equal(t, []string{"order-3", "order-2", "order-1", "old-order"}, page.ids())
	assert.Nil(t, page.Total, "-name is checked on the instances read: the total is not known")

	page = listPage(t, conn, "-older-than", "1h")
	assert.Equal(t, []string{"old-order", "old-report"}, page.ids())
	assert.Equal(t, 2, page.Scanned, "the newer instances are stepped over by bisection, not scanned")

	page = listPage(t, conn, "-newer-than", "1h")
	assert.Equal(t, []string{"order-3", "order-2", "report-1", "order-1"}, page.ids())
	assert.Equal(t, 5, page.Scanned, "newest first, the first older instance ends the listing")
	assert.Nil(t, page.Next)

	page = listPage(t, conn, "-older-than", "8m30s", "-newer-than", "1h", "-status", "Running,Completed,Failed")
	assert.Equal(t, []string{"report-1", "order-1"}, page.ids())

	page = listPage(t, conn, "-name", "Report", "-status", "Running")
	assert.Equal(t, []string{"old-report"}, page.ids())
}

// With -name a page reads at most -scan instances: it may end short of
// -limit, with a next to go on from.
func TestBinaryInstancesScanBoundsAFilteredPage(t *testing.T) {
	conn := agedFixture(t)
	page := listPage(t, conn, "-name", "Report", "-scan", "2")
	assert.Empty(t, page.ids(), "order-3 and order-2 were read, neither a Report")
	assert.Equal(t, 2, page.Scanned)
	assert.Equal(t, ptrTo("order-2"), page.Next)

	page = listPage(t, conn, "-name", "Report", "-scan", "2", "-after", "order-2")
	assert.Equal(t, []string{"report-1"}, page.ids())
	assert.Equal(t, ptrTo("order-1"), page.Next)

	code, stdout, stderr := cli(append([]string{"instances", "-name", "Report", "-scan", "2"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "(no instances)\n(2 read; next page: -after order-2)\n")
}

func TestBinaryInstancesRefusesBadFilters(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-older-than", "0s"}, "-older-than: must be positive, got 0s"},
		{[]string{"-newer-than", "soon"}, "-newer-than: not a duration"},
		{[]string{"-status", "Running,Done"}, `-status: "Done" is not one of Running, Completed, Failed, ContinuedAsNew, Parked`},
		{[]string{"-name", "[Order"}, `-name: "[Order" is not a name pattern`},
		{[]string{"-scan", "0"}, "-scan: must be at least 1"},
	} {
		code, stdout, stderr := cli(append([]string{"instances"}, c.args...)...).run(t)
		assert.Equal(t, 2, code, "cdb instances %v", c.args)
		assert.Empty(t, stdout)
		assert.Contains(t, stderr, c.want, "cdb instances %v", c.args)
	}
}

// countingLister is a listing of n instances, one created a minute before
// the next, that counts the instance reads.
type countingLister struct {
	ids   []string
	now   time.Time
	reads int
}

func newCountingLister(n int, now time.Time) *countingLister {
	l := &countingLister{now: now}
	for i := range n {
		l.ids = append(l.ids, fmt.Sprintf("minutes-%d", i+1)) // newest first: the first is a minute old
	}
	return l
}

func (l *countingLister) ListInstances(context.Context) ([]string, error) { return l.ids, nil }

func (l *countingLister) ListInstancesByStatus(context.Context, cdb.InstanceStatus) ([]string, error) {
	return l.ids, nil
}

func (l *countingLister) GetInstanceInfo(_ context.Context, id string) (cdb.InstanceInfo, error) {
	l.reads++
	i := indexOf(l.ids, id)
	created := l.now.Add(-time.Duration(i+1) * time.Minute)
	return cdb.InstanceInfo{InstanceID: id, Status: cdb.StatusRunning, CreatedAt: uint64(created.UnixMilli())}, nil
}

func TestOlderThanFindsItsFirstInstanceInLogarithmicReads(t *testing.T) {
	now := time.UnixMilli(time.Now().UnixMilli()) // the store keeps milliseconds
	l := newCountingLister(100_000, now)
	q := instanceQuery{olderThan: age(90_000 * time.Minute), limit: 3, scan: 1000, now: now}
	page, err := q.page(context.Background(), l)
	require.NoError(t, err)
	require.Len(t, page.Instances, 3)
	assert.Equal(t, l.ids[90_000], page.Instances[0].InstanceID, "the first instance created more than 90000 minutes ago")
	assert.LessOrEqual(t, l.reads, 17+3, "bisection over 100000 ids, then the page")
}

// The help says which filters the store applies and which cdb checks on
// each instance it reads, and what a start can and cannot tell.
func TestBinaryHelpSaysWhatIsFilteredWhere(t *testing.T) {
	code, stdout, _ := cli("help", "instances").run(t)
	require.Equal(t, 0, code)
	assert.Contains(t, stdout, "filters only by status: -name and the ages are checked\non each instance read, at most -scan a page")
	code, stdout, _ = cli("help", "start").run(t)
	require.Equal(t, 0, code)
	assert.Contains(t, stdout, "a taken id exits with code 3")
	assert.Contains(t, stdout, "a start still\nqueued is not seen")
}
