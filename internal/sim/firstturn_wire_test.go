package sim

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// wireTry shows w one try of a request: op is "Batch" or "CreateItem".
func wireTry(t *testing.T, w *firstTurnWire, op string, body string, entered time.Time, fault string, status int, answered bool) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "https://acct/dbs/d/colls/c/docs", nil)
	require.NoError(t, err)
	if op == "Batch" {
		req.Header.Set("x-ms-cosmos-is-batch-request", "true")
	}
	w.observe(req, []byte(body), entered, fault, status, answered)
}

// firstTurnCommitBody is a first turn's commit batch: it creates the
// instance document, naming the start message and the turn's token.
func firstTurnCommitBody(instance, startMsg, token string) string {
	return fmt.Sprintf(`[{"operationType":"Create","resourceBody":{"id":"inst","type":"inst","instance":%q,"startMsg":%q,"lastAck":%q}},`+
		`{"operationType":"Create","resourceBody":{"id":"h|1","type":"hist"}}]`, instance, startMsg, token)
}

// startDocBody is a start message made at visibleAt (ms).
func startDocBody(instance, id string, visibleAt int64) string {
	return fmt.Sprintf(`{"id":%q,"type":"msg","instance":%q,"visibleAt":%d,"item":"{\"StartOrchestration\":{}}"}`, id, instance, visibleAt)
}

func TestFirstTurnWireCountsWhatBecameOfEachFirstTurnsCommit(t *testing.T) {
	now := time.UnixMilli(100_000)
	w := newFirstTurnWire(func() time.Time { return now })
	at := time.Now()
	wireTry(t, w, "Batch", firstTurnCommitBody("i1", "m|1", "lock_1"), at, "", http.StatusOK, true)                 // created
	wireTry(t, w, "Batch", firstTurnCommitBody("i2", "m|2", "lock_2"), at, faultLoseResponse, http.StatusOK, false) // applied, answer lost
	wireTry(t, w, "Batch", firstTurnCommitBody("i3", "m|3", "lock_3"), at, faultDrop, 0, false)                     // never reached the account
	wireTry(t, w, "Batch", firstTurnCommitBody("i3", "m|3", "lock_3"), at, "", http.StatusConflict, true)           // met the instance
	wireTry(t, w, "Batch", firstTurnCommitBody("i4", "m|4", "lock_4"), at, "crash-after", http.StatusOK, false)     // its node died with it
	// m|3 handed back after its refused commit, written beside the
	// instance document that exists already.
	wireTry(t, w, "CreateItem", startDocBody("i3", "m|3", 99_990), at, "", http.StatusCreated, true)
	assert.Equal(t, "first-turn-commits=4 (created=3 answer-lost=2 refused=1 committer-died=1 retried=1 tries-not-carried-out=1) handed-back-written=1 written-after-wait=0", w.summary())
	v := &violations{}
	w.check(v)
	assert.Empty(t, v.all())
}

func TestFirstTurnWireCountsAStartWrittenTheUsualWayAfterTheProvidersWait(t *testing.T) {
	now := time.UnixMilli(100_000)
	w := newFirstTurnWire(func() time.Time { return now })
	at := time.Now()
	batch := func(instance, id string, visibleAt int64) string {
		return fmt.Sprintf(`[{"operationType":"Create","resourceBody":{"id":"inst","type":"inst","instance":%q,"startMsg":%q}},{"operationType":"Create","resourceBody":%s}]`,
			instance, id, startDocBody(instance, id, visibleAt))
	}
	wireTry(t, w, "Batch", batch("i1", "m|1", 100_000-1_100), at, "", http.StatusOK, true)    // made 1.1 s before its first try
	wireTry(t, w, "Batch", batch("i2", "m|2", 100_000-50), at, "", http.StatusOK, true)       // at once
	wireTry(t, w, "Batch", batch("i3", "m|3", 100_000-5_000), at, faultUnavailable, 0, false) // after 5 s: its first try counts,
	wireTry(t, w, "Batch", batch("i3", "m|3", 100_000-5_000), at, "", http.StatusOK, true)    // not its retry
	wireTry(t, w, "Batch", batch("i4", "m|4", 100_000-600_000), at, "", http.StatusOK, true)  // the clock jumped
	wireTry(t, w, "CreateItem", startDocBody("i5", "m|5", 100_000-2_000), at, "", 201, true)  // an outbox's delivery: late by design
	assert.True(t, strings.HasSuffix(w.summary(), "written-after-wait=2"), w.summary())
}

func TestFirstTurnWireFlagsAStartBothCreatedByItsFirstTurnAndWrittenTheUsualWay(t *testing.T) {
	w := newFirstTurnWire(func() time.Time { return time.UnixMilli(100_000) })
	at := time.Now()
	wireTry(t, w, "Batch", firstTurnCommitBody("i1", "m|1", "lock_1"), at, faultLoseResponse, http.StatusOK, false)
	wireTry(t, w, "CreateItem", startDocBody("i1", "m|1", 99_000), at, "", http.StatusCreated, true) // handed back although it committed
	wireTry(t, w, "Batch", firstTurnCommitBody("i2", "m|2", "lock_2"), at, "", http.StatusConflict, true)
	wireTry(t, w, "CreateItem", startDocBody("i2", "m|2", 99_000), at, "", http.StatusCreated, true) // handed back after a refused commit: fine
	v := &violations{}
	w.check(v)
	got := v.all()
	require.Len(t, got, 1)
	assert.Equal(t, invFirstTurnOnce, got[0].Invariant)
	assert.Equal(t, "i1", got[0].Instance)
}

// answering is an account that answers every request with status.
type answering int

func (a answering) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: int(a), Body: http.NoBody, Header: http.Header{}, Request: req}, nil
}

func TestAFaultAimedAtARequestIsForcedOnceAndTheTransportShowsEveryTry(t *testing.T) {
	ft := newFaultTransport(answering(http.StatusOK), Faults{LoseResponse: true}, 1, newStats(), false)
	type try struct {
		fault    string
		status   int
		answered bool
	}
	var tries []try
	ft.tried = func(_ *http.Request, _ []byte, _ time.Time, fault string, status int, answered bool) {
		tries = append(tries, try{fault, status, answered})
	}
	ft.faultOn.Store(&faultTrigger{match: func(op string, body []byte) bool { return strings.Contains(string(body), "aimed") }, kind: faultLoseResponse})
	send := func(body string) error {
		req, err := http.NewRequest(http.MethodPost, "https://acct/dbs/d/colls/c/docs", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("x-ms-cosmos-is-batch-request", "true")
		resp, err := ft.RoundTrip(req)
		if resp != nil {
			_ = resp.Body.Close()
		}
		return err
	}
	assert.NoError(t, send("[other]"))
	assert.Error(t, send("[aimed]"), "its answer is lost")
	assert.NoError(t, send("[aimed]"), "once only")
	assert.Equal(t, []try{{"", 200, true}, {faultLoseResponse, 200, false}, {"", 200, true}}, tries)
}

// A clean close is judged with its node's faults off (close-gives-back):
// the refusals aimed at a partition's reads end with them, or a close
// that must read back a chain could not give it back.
func TestQuietEndsTheReadFaultsAimedAtAPartition(t *testing.T) {
	ft := newFaultTransport(answering(http.StatusOK), Faults{}, 1, newStats(), false)
	rf := &readFaults{pk: "p1", kind: fault403}
	rf.left.Store(5)
	ft.failReads.Store(rf)
	read := func() int {
		req, err := http.NewRequest(http.MethodGet, "https://acct/dbs/d/colls/c/docs/inst", nil)
		require.NoError(t, err)
		req.Header.Set("x-ms-documentdb-partitionkey", `["p1"]`)
		resp, err := ft.RoundTrip(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusForbidden, read(), "aimed at the partition's reads")
	ft.quiet.Store(true)
	assert.Equal(t, http.StatusOK, read(), "quiet: no fault of any kind")
}
