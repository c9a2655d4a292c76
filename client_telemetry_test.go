package cdb_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/telemetrytest"
)

// telemetryFixture is a container on a fake account, reached by a client
// that reports to rec; the database and container were made by another
// client, so rec holds only what the test does.
type telemetryFixture struct {
	account *cdb.FakeAccount
	rec     *telemetrytest.Recorder
	orders  *cdb.ContainerClient
}

func newTelemetryFixture(t *testing.T, requestSpans bool) telemetryFixture {
	t.Helper()
	ctx := context.Background()
	account := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	setup := account.Client()
	require.NoError(t, setup.EnsureDatabase(ctx, "shop"))
	c, err := setup.NewContainer("shop", "orders")
	require.NoError(t, err)
	_, err = c.Ensure(ctx, cdb.ContainerProperties{
		ID:           "orders",
		PartitionKey: cdb.PartitionKeyDefinition{Paths: []string{"/customer"}, Kind: "Hash", Version: 2},
	})
	require.NoError(t, err)

	rec := telemetrytest.NewRecorder()
	client, err := cdb.NewClient(account.Endpoint(), cdb.ClientOptions{
		Key: account.Key(), Transport: account.Transport(),
		Telemetry: cdb.Telemetry{Meter: rec, Tracer: rec, RequestSpans: requestSpans},
	})
	require.NoError(t, err)
	orders, err := client.NewContainer("shop", "orders")
	require.NoError(t, err)
	return telemetryFixture{account: account, rec: rec, orders: orders}
}

var alice = cdb.NewPartitionKeyString("alice")

func (f telemetryFixture) createOrder(t *testing.T, id string) cdb.ItemResponse {
	t.Helper()
	resp, err := f.orders.CreateItem(context.Background(), alice, []byte(`{"id":"`+id+`","customer":"alice"}`), nil)
	require.NoError(t, err)
	return resp
}

// ordersAttrs are the attributes of an operation on shop/orders, with
// extra key/value pairs.
func ordersAttrs(op string, extra ...any) map[string]any {
	out := map[string]any{
		"db.system.name":     "azure.cosmosdb",
		"db.operation.name":  op,
		"db.namespace":       "shop",
		"db.collection.name": "orders",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		out[extra[i].(string)] = extra[i+1]
	}
	return out
}

// onePoint is the one point of instrument for operation op.
func onePoint(t *testing.T, rec *telemetrytest.Recorder, instrument, op string) telemetrytest.Point {
	t.Helper()
	points := rec.Points(instrument, map[string]any{"db.operation.name": op})
	require.Len(t, points, 1, "%s points of %s", instrument, op)
	return points[0]
}

func TestTelemetryClientMakesItsInstrumentsWhenBuilt(t *testing.T) {
	f := newTelemetryFixture(t, false)
	want := []struct{ name, unit string }{
		{"db.client.operation.duration", "s"},
		{"azure.cosmosdb.client.operation.request_charge", "{request_unit}"},
		{"cdb.client.requests", "{request}"},
		{"cdb.client.throttle.wait", "s"},
	}
	kinds := []telemetrytest.Kind{telemetrytest.KindHistogram, telemetrytest.KindHistogram, telemetrytest.KindCounter, telemetrytest.KindCounter}
	got := f.rec.Instruments()
	require.Len(t, got, len(want))
	for i, w := range want {
		assert.Equal(t, w.name, got[i].Name)
		assert.Equal(t, w.unit, got[i].Unit, w.name)
		assert.Equal(t, kinds[i], got[i].Kind, w.name)
		assert.NotEmpty(t, got[i].Description, w.name)
	}
	assert.Empty(t, f.rec.Points("", nil), "nothing recorded before an operation")
}

func TestTelemetryReadItemRecordsDurationChargeAndOneRequest(t *testing.T) {
	f := newTelemetryFixture(t, false)
	f.createOrder(t, "o1")
	f.rec.Reset()

	resp, err := f.orders.ReadItem(context.Background(), alice, "o1", nil)
	require.NoError(t, err)

	want := ordersAttrs("ReadItem", "db.response.status_code", "200")
	duration := onePoint(t, f.rec, "db.client.operation.duration", "ReadItem")
	assert.Equal(t, want, duration.Attributes())
	assert.Greater(t, duration.Value, 0.0)
	charge := onePoint(t, f.rec, "azure.cosmosdb.client.operation.request_charge", "ReadItem")
	assert.Equal(t, want, charge.Attributes())
	assert.Equal(t, resp.RequestCharge, charge.Value)
	requests := onePoint(t, f.rec, "cdb.client.requests", "ReadItem")
	assert.Equal(t, want, requests.Attributes())
	assert.Equal(t, 1.0, requests.Value)
	assert.Empty(t, f.rec.Points("cdb.client.throttle.wait", nil))
}

func TestTelemetryCreateItemRecordsA201(t *testing.T) {
	f := newTelemetryFixture(t, false)
	resp := f.createOrder(t, "o1")

	want := ordersAttrs("CreateItem", "db.response.status_code", "201")
	assert.Equal(t, want, onePoint(t, f.rec, "db.client.operation.duration", "CreateItem").Attributes())
	charge := onePoint(t, f.rec, "azure.cosmosdb.client.operation.request_charge", "CreateItem")
	assert.Equal(t, want, charge.Attributes())
	assert.Equal(t, resp.RequestCharge, charge.Value)
	assert.Greater(t, charge.Value, 0.0)
	assert.Equal(t, want, onePoint(t, f.rec, "cdb.client.requests", "CreateItem").Attributes())
}

func TestTelemetryQueryRecordsEachPageAsAnOperation(t *testing.T) {
	f := newTelemetryFixture(t, false)
	f.createOrder(t, "o1")
	f.rec.Reset()

	res, err := f.orders.QueryItems(context.Background(), "SELECT * FROM c WHERE c.customer = @c",
		[]cdb.QueryParameter{{Name: "@c", Value: "alice"}}, &cdb.QueryOptions{PartitionKey: &alice})
	require.NoError(t, err)
	require.Equal(t, 1, res.Pages)

	want := ordersAttrs("QueryItems", "db.response.status_code", "200")
	assert.Equal(t, want, onePoint(t, f.rec, "db.client.operation.duration", "QueryItems").Attributes())
	charge := onePoint(t, f.rec, "azure.cosmosdb.client.operation.request_charge", "QueryItems")
	assert.Equal(t, want, charge.Attributes())
	assert.Equal(t, res.RequestCharge, charge.Value)
	assert.Equal(t, want, onePoint(t, f.rec, "cdb.client.requests", "QueryItems").Attributes())
}

func TestTelemetryBatchRecordsOneOperation(t *testing.T) {
	f := newTelemetryFixture(t, false)
	b := f.orders.NewTransactionalBatch(alice)
	b.CreateItem([]byte(`{"id":"o1","customer":"alice"}`), nil)
	b.CreateItem([]byte(`{"id":"o2","customer":"alice"}`), nil)
	resp, err := f.orders.ExecuteTransactionalBatch(context.Background(), b, nil)
	require.NoError(t, err)
	require.True(t, resp.Success)

	want := ordersAttrs("ExecuteTransactionalBatch", "db.response.status_code", "200")
	assert.Equal(t, want, onePoint(t, f.rec, "db.client.operation.duration", "ExecuteTransactionalBatch").Attributes())
	charge := onePoint(t, f.rec, "azure.cosmosdb.client.operation.request_charge", "ExecuteTransactionalBatch")
	assert.Equal(t, want, charge.Attributes())
	assert.Equal(t, resp.RequestCharge, charge.Value)
	assert.Equal(t, want, onePoint(t, f.rec, "cdb.client.requests", "ExecuteTransactionalBatch").Attributes())
}

func TestTelemetryA404IsAFailedOperationWithItsStatus(t *testing.T) {
	f := newTelemetryFixture(t, false)
	_, err := f.orders.ReadItem(context.Background(), alice, "missing", nil)
	require.True(t, cdb.IsNotFound(err), "%v", err)

	want := ordersAttrs("ReadItem", "db.response.status_code", "404", "error.type", "404")
	assert.Equal(t, want, onePoint(t, f.rec, "db.client.operation.duration", "ReadItem").Attributes())
	assert.Equal(t, want, onePoint(t, f.rec, "azure.cosmosdb.client.operation.request_charge", "ReadItem").Attributes())
	assert.Equal(t, ordersAttrs("ReadItem", "db.response.status_code", "404"),
		onePoint(t, f.rec, "cdb.client.requests", "ReadItem").Attributes())
}

func TestTelemetryAThrottledWriteShowsBothAttemptsAndTheWait(t *testing.T) {
	f := newTelemetryFixture(t, false)
	f.account.InjectFault(cdb.FakeFault{
		Match:  func(r cdb.FakeRequest) bool { return r.Operation == "CreateItem" },
		Status: 429, SubStatus: 3200, RetryAfter: 20 * time.Millisecond, Times: 1,
	})
	resp := f.createOrder(t, "o1")
	require.Equal(t, 2, resp.Attempts)

	requests := f.rec.Points("cdb.client.requests", nil)
	require.Len(t, requests, 2)
	assert.Equal(t, ordersAttrs("CreateItem", "db.response.status_code", "429",
		"azure.cosmosdb.response.sub_status_code", int64(3200)), requests[0].Attributes())
	assert.Equal(t, ordersAttrs("CreateItem", "db.response.status_code", "201"), requests[1].Attributes())

	duration := onePoint(t, f.rec, "db.client.operation.duration", "CreateItem")
	assert.Equal(t, ordersAttrs("CreateItem", "db.response.status_code", "201"), duration.Attributes())
	assert.GreaterOrEqual(t, duration.Value, 0.020, "the duration includes the wait")

	wait := onePoint(t, f.rec, "cdb.client.throttle.wait", "CreateItem")
	assert.Equal(t, ordersAttrs("CreateItem"), wait.Attributes())
	assert.GreaterOrEqual(t, wait.Value, 0.020, "at least the retry-after the service asked for")
}

func TestTelemetryAWriteWhoseConnectionDroppedIsATransportError(t *testing.T) {
	f := newTelemetryFixture(t, false)
	f.account.InjectFault(cdb.FakeFault{
		Match: func(r cdb.FakeRequest) bool { return r.Operation == "CreateItem" },
		Kind:  cdb.FaultDropConnection, Times: 1,
	})
	_, err := f.orders.CreateItem(context.Background(), alice, []byte(`{"id":"o1","customer":"alice"}`), nil)
	require.True(t, cdb.IsOutcomeUnknown(err), "%v", err)

	want := ordersAttrs("CreateItem", "error.type", "transport")
	assert.Equal(t, want, onePoint(t, f.rec, "db.client.operation.duration", "CreateItem").Attributes())
	charge := onePoint(t, f.rec, "azure.cosmosdb.client.operation.request_charge", "CreateItem")
	assert.Equal(t, want, charge.Attributes())
	assert.Equal(t, 0.0, charge.Value)
	assert.Equal(t, want, onePoint(t, f.rec, "cdb.client.requests", "CreateItem").Attributes())
}

func TestTelemetryAnOperationCanceledBeforeItsFirstAttemptSendsNothing(t *testing.T) {
	f := newTelemetryFixture(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := f.orders.ReadItem(ctx, alice, "o1", nil)
	require.ErrorIs(t, err, context.Canceled)

	assert.Equal(t, ordersAttrs("ReadItem", "error.type", "canceled"),
		onePoint(t, f.rec, "db.client.operation.duration", "ReadItem").Attributes())
	assert.Empty(t, f.rec.Points("cdb.client.requests", map[string]any{"db.operation.name": "ReadItem"}))
}

func TestTelemetryContextAttributesAreAddedToDurationAndCharge(t *testing.T) {
	f := newTelemetryFixture(t, false)
	ctx := cdb.ContextWithMetricAttributes(context.Background(), slog.String("orchestration", "ProcessOrder"))
	ctx = cdb.ContextWithMetricAttributes(ctx, slog.String("step", "reserve"))
	_, err := f.orders.CreateItem(ctx, alice, []byte(`{"id":"o1","customer":"alice"}`), nil)
	require.NoError(t, err)

	want := ordersAttrs("CreateItem", "db.response.status_code", "201", "orchestration", "ProcessOrder", "step", "reserve")
	assert.Equal(t, want, onePoint(t, f.rec, "db.client.operation.duration", "CreateItem").Attributes())
	assert.Equal(t, want, onePoint(t, f.rec, "azure.cosmosdb.client.operation.request_charge", "CreateItem").Attributes())
	assert.Equal(t, ordersAttrs("CreateItem", "db.response.status_code", "201"),
		onePoint(t, f.rec, "cdb.client.requests", "CreateItem").Attributes(), "per-attempt counts stay by operation")
	charge := onePoint(t, f.rec, "azure.cosmosdb.client.operation.request_charge", "CreateItem").Value
	assert.Equal(t, charge, f.rec.Sum("azure.cosmosdb.client.operation.request_charge", map[string]any{"orchestration": "ProcessOrder"}),
		"the RU is attributed to the orchestration")
}

func TestTelemetryRequestSpansAreChildrenOfTheCallersSpan(t *testing.T) {
	f := newTelemetryFixture(t, true)
	f.createOrder(t, "o1")
	f.rec.Reset()

	ctx, turn := f.rec.Start(context.Background(), "turn", cdb.SpanOptions{})
	resp, err := f.orders.ReadItem(ctx, alice, "o1", nil)
	require.NoError(t, err)
	turn.End()

	spans := f.rec.SpansNamed("ReadItem orders")
	require.Len(t, spans, 1)
	s := spans[0]
	caller := f.rec.SpansNamed("turn")[0]
	assert.Equal(t, cdb.SpanKindClient, s.Kind)
	assert.Equal(t, caller.TraceID, s.TraceID)
	assert.Equal(t, caller.SpanID, s.ParentSpanID)
	assert.True(t, s.Ended)
	assert.NoError(t, s.Err)
	assert.Equal(t, ordersAttrs("ReadItem", "db.response.status_code", "200",
		"azure.cosmosdb.operation.request_charge", resp.RequestCharge), s.Attributes())
}

func TestTelemetryARequestSpanRecordsTheFailure(t *testing.T) {
	f := newTelemetryFixture(t, true)
	_, err := f.orders.ReadItem(context.Background(), alice, "missing", nil)
	require.True(t, cdb.IsNotFound(err), "%v", err)

	spans := f.rec.SpansNamed("ReadItem orders")
	require.Len(t, spans, 1)
	assert.Equal(t, err, spans[0].Err)
	assert.Equal(t, "", spans[0].ParentSpanID, "no caller's span: a root")
	assert.Equal(t, "404", spans[0].Attributes()["error.type"])
	assert.True(t, spans[0].Ended)
}

func TestTelemetryRequestSpansNameAnOperationWithoutAContainerByTheOperation(t *testing.T) {
	f := newTelemetryFixture(t, true)
	client, err := cdb.NewClient(f.account.Endpoint(), cdb.ClientOptions{
		Key: f.account.Key(), Transport: f.account.Transport(),
		Telemetry: cdb.Telemetry{Tracer: f.rec, RequestSpans: true},
	})
	require.NoError(t, err)
	_, err = client.ReadDatabase(context.Background(), "shop")
	require.NoError(t, err)

	spans := f.rec.SpansNamed("ReadDatabase")
	require.Len(t, spans, 1)
	attrs := spans[0].Attributes()
	charge, ok := attrs["azure.cosmosdb.operation.request_charge"].(float64)
	require.True(t, ok, "the request charge is a float: %#v", attrs)
	assert.Greater(t, charge, 0.0)
	delete(attrs, "azure.cosmosdb.operation.request_charge")
	assert.Equal(t, map[string]any{
		"db.system.name": "azure.cosmosdb", "db.operation.name": "ReadDatabase", "db.namespace": "shop",
		"db.response.status_code": "200",
	}, attrs)
	assert.Empty(t, f.rec.Points("", nil), "a tracer alone records no metrics")
}

func TestTelemetryNoRequestSpansUnlessAskedFor(t *testing.T) {
	f := newTelemetryFixture(t, false)
	ctx, turn := f.rec.Start(context.Background(), "turn", cdb.SpanOptions{})
	f.createOrder(t, "o1")
	_, err := f.orders.ReadItem(ctx, alice, "o1", nil)
	require.NoError(t, err)
	turn.End()

	spans := f.rec.Spans()
	require.Len(t, spans, 1, "only the caller's")
	assert.Equal(t, "turn", spans[0].Name)
	assert.NotEmpty(t, f.rec.Points("db.client.operation.duration", nil), "the metrics still are")
}

func TestTelemetryA503WithRetryAfterCountsAsAThrottleWait(t *testing.T) {
	f := newTelemetryFixture(t, false)
	f.createOrder(t, "o1")
	f.rec.Reset()
	f.account.InjectFault(cdb.FakeFault{
		Match:  func(r cdb.FakeRequest) bool { return r.Operation == "ReadItem" },
		Status: 503, RetryAfter: 10 * time.Millisecond, Times: 1,
	})
	_, err := f.orders.ReadItem(context.Background(), alice, "o1", nil)
	require.NoError(t, err)

	requests := f.rec.Points("cdb.client.requests", map[string]any{"db.operation.name": "ReadItem"})
	require.Len(t, requests, 2)
	assert.Equal(t, "503", requests[0].Attributes()["db.response.status_code"])
	assert.Equal(t, "200", requests[1].Attributes()["db.response.status_code"])
	assert.GreaterOrEqual(t, onePoint(t, f.rec, "cdb.client.throttle.wait", "ReadItem").Value, 0.010)
}

func TestTelemetryABackoffOfTheClientsOwnIsNoThrottleWait(t *testing.T) {
	f := newTelemetryFixture(t, false)
	f.createOrder(t, "o1")
	f.rec.Reset()
	f.account.InjectFault(cdb.FakeFault{
		Match:  func(r cdb.FakeRequest) bool { return r.Operation == "ReadItem" },
		Status: 503, Times: 1, // no retry-after: the client backs off on its own
	})
	_, err := f.orders.ReadItem(context.Background(), alice, "o1", nil)
	require.NoError(t, err)

	assert.Len(t, f.rec.Points("cdb.client.requests", map[string]any{"db.operation.name": "ReadItem"}), 2)
	assert.Empty(t, f.rec.Points("cdb.client.throttle.wait", nil))
}
