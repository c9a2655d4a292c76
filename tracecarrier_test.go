package cdb

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var fixtureTrace = TraceContext{TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", TraceState: "vendor=x"}

// The duroxide JSON of a start and of an activity is byte for byte the
// golden's with a trace and a VisibleAt set: both are Go only, and decoding the
// golden gives none.
func TestATraceLeavesDuroxidesJSONUnchanged(t *testing.T) {
	checked := 0
	for _, tc := range workItemGoldens {
		traced := WithVisibleAt(WithTraceContext(tc.item, fixtureTrace), fixtureVisibleAt)
		if TraceContextOf(traced).IsZero() {
			continue // a kind that carries no trace
		}
		checked++
		t.Run(tc.file, func(t *testing.T) {
			golden := readGolden(t, tc.file)
			encoded, err := MarshalWorkItem(traced)
			require.NoError(t, err)
			assert.Equal(t, string(golden), string(encoded), "serde-exact encoding")
			viaStdlib, err := json.Marshal(traced)
			require.NoError(t, err)
			assert.Equal(t, string(golden), string(viaStdlib), "json.Marshal encoding")
			decoded, err := UnmarshalWorkItem(golden)
			require.NoError(t, err)
			assert.Equal(t, TraceContext{}, TraceContextOf(decoded), "duroxide's JSON carries no trace")
			if act, ok := decoded.(ActivityExecuteMessage); ok {
				assert.True(t, act.VisibleAt.IsZero(), "duroxide's JSON carries no VisibleAt")
			}
		})
	}
	assert.Equal(t, 6, checked, "the start and activity goldens")
}

// fixtureVisibleAt is a fetched activity's VisibleAt, set beside the trace
// in the goldens above: it must not reach the JSON either.
var fixtureVisibleAt = time.UnixMilli(1_700_000_000_123)

// Only activities carry a VisibleAt; WithVisibleAt hands every other kind
// back as it is.
func TestOnlyActivitiesCarryAVisibleAt(t *testing.T) {
	for _, tc := range workItemGoldens {
		withTime := WithVisibleAt(tc.item, fixtureVisibleAt)
		if act, ok := withTime.(ActivityExecuteMessage); ok {
			assert.Equal(t, fixtureVisibleAt, act.VisibleAt, tc.file)
			continue
		}
		assert.Equal(t, tc.item, withTime, tc.file)
	}
}

// Only starts and activities carry a trace; WithTraceContext hands every
// other kind back as it is.
func TestOnlyStartsAndActivitiesCarryATrace(t *testing.T) {
	for _, tc := range workItemGoldens {
		traced := WithTraceContext(tc.item, fixtureTrace)
		switch tc.item.(type) {
		case StartOrchestrationMessage, ActivityExecuteMessage:
			assert.Equal(t, fixtureTrace, TraceContextOf(traced), tc.file)
		default:
			assert.Equal(t, tc.item, traced, tc.file)
			assert.True(t, TraceContextOf(traced).IsZero(), tc.file)
		}
	}
}

// The Cosmos provider keeps the trace in the queue document's own "trace"
// field; the item field is duroxide's JSON unchanged, and a fetch's decode
// gives the trace back.
func TestAQueueDocumentKeepsTheTraceBesideTheItem(t *testing.T) {
	p := &CosmosProvider{}
	start := StartOrchestrationMessage{Instance: "order-42", Orchestration: "ProcessOrder", Input: `{"sku":"A-1","qty":2}`, ExecutionID: 1, Trace: fixtureTrace}
	act := ActivityExecuteMessage{Instance: "order-42", ExecutionID: 1, ID: 2, Name: "ReserveStock", Input: "A-1", Trace: fixtureTrace}
	startDoc, err := p.newMessageDoc(start, "m|1", immediateAt(1, 1), "", "")
	require.NoError(t, err)
	workDoc, err := p.newWorkDoc(act, "w|1", immediateAt(1, 2), "", nil, "")
	require.NoError(t, err)
	for file, body := range map[string][]byte{"workitem_StartOrchestration.json": startDoc, "workitem_ActivityExecute.json": workDoc} {
		var doc queueDoc
		require.NoError(t, json.Unmarshal(body, &doc))
		assert.Equal(t, string(readGolden(t, file)), doc.Item, "%s: the item is duroxide's JSON", file)
		assert.Equal(t, fixtureTrace, doc.Trace, file)
		item, err := doc.workItem()
		require.NoError(t, err)
		assert.Equal(t, fixtureTrace, TraceContextOf(item), file)
	}

	untraced, err := p.newMessageDoc(TimerFiredMessage{Instance: "order-42", ExecutionID: 1, ID: 4, FireAtMs: 5}, "m|2", dueAt(5, 3), "", "")
	require.NoError(t, err)
	var fields map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(untraced, &fields))
	assert.NotContains(t, fields, "trace", "a document without a trace has no trace field")
}
