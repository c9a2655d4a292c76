package cdb

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"
)

// The client's metrics and request spans, named as OpenTelemetry's
// semantic conventions for database clients and Azure Cosmos DB name them
// (https://opentelemetry.io/docs/specs/semconv/database/cosmosdb/), and
// two of the client's own (cdb.*) for what the conventions do not cover:
// the attempts behind an operation and the waits the service asked for.
const (
	metricOperationDuration = "db.client.operation.duration"
	metricRequestCharge     = "azure.cosmosdb.client.operation.request_charge"
	metricRequests          = "cdb.client.requests"
	metricThrottleWait      = "cdb.client.throttle.wait"

	attrDBSystem      = "db.system.name"
	attrOperation     = "db.operation.name"
	attrNamespace     = "db.namespace"
	attrCollection    = "db.collection.name"
	attrStatusCode    = "db.response.status_code"
	attrSubStatusCode = "azure.cosmosdb.response.sub_status_code"
	attrErrorType     = "error.type"
	attrRequestCharge = "azure.cosmosdb.operation.request_charge" // on spans

	dbSystemCosmos = "azure.cosmosdb"
)

// clientTelemetry is what a Client reports through ClientOptions.Telemetry:
// its instruments, made once, and whether anything listens, so that a
// client without telemetry builds no attributes at all.
type clientTelemetry struct {
	metrics bool  // the meter records somewhere
	spans   bool  // a span per operation
	meter   Meter // for the provider on this client, which reports through it
	tracer  Tracer

	duration     Histogram
	charge       Histogram
	requests     Counter
	throttleWait Counter
}

func newClientTelemetry(t Telemetry) clientTelemetry {
	tel := newTelemetry(t)
	_, noop := tel.meter.(noopMeter)
	m := tel.meter
	return clientTelemetry{
		metrics: !noop,
		spans:   tel.requestSpans,
		meter:   m,
		tracer:  tel.tracer,
		duration: m.Histogram(metricOperationDuration, "s",
			"Duration of Cosmos DB operations, their retries and the waits between them included."),
		charge: m.Histogram(metricRequestCharge, "{request_unit}",
			"Request units an operation consumed, over all its attempts."),
		requests: m.Counter(metricRequests, "{request}",
			"HTTP requests sent to Cosmos DB, every attempt of an operation counted."),
		throttleWait: m.Counter(metricThrottleWait, "s",
			"Time spent waiting to retry because the service answered 429, 449 or 503 with a retry-after."),
	}
}

func (t *clientTelemetry) enabled() bool { return t.metrics || t.spans }

// observedOperation is an operation under way: when it started and its
// span (nil when there is none).
type observedOperation struct {
	start time.Time
	span  Span
}

// startOperation begins observing r; the context it returns carries the
// operation's span, if it has one.
func (t *clientTelemetry) startOperation(ctx context.Context, r *request) (context.Context, observedOperation) {
	if !t.enabled() {
		return ctx, observedOperation{}
	}
	o := observedOperation{start: time.Now()}
	if t.spans {
		attrs := append(appendTarget(nil, r), metricAttributes(ctx)...)
		ctx, o.span = t.tracer.Start(ctx, spanName(r), SpanOptions{Kind: SpanKindClient, Attributes: attrs})
	}
	return ctx, o
}

// endOperation records r's duration and request charge (over all its
// attempts) and ends its span.
func (t *clientTelemetry) endOperation(ctx context.Context, r *request, o observedOperation, resp *response, charge float64, err error) {
	if !t.enabled() {
		return
	}
	out := outcomeOf(resp, err)
	if t.metrics {
		extra := metricAttributes(ctx)
		attrs := make([]slog.Attr, 0, 7+len(extra))
		attrs = append(out.appendTo(appendTarget(attrs, r)), extra...)
		t.duration.Record(ctx, time.Since(o.start).Seconds(), attrs...)
		t.charge.Record(ctx, charge, attrs...)
	}
	if o.span != nil {
		o.span.SetAttributes(append(out.appendTo(nil), slog.Float64(attrRequestCharge, charge))...)
		if err != nil {
			o.span.RecordError(err)
		}
		o.span.End()
	}
}

// attempt counts one HTTP attempt of r, answered with resp or failed with
// err before an answer.
func (t *clientTelemetry) attempt(ctx context.Context, r *request, resp *response, err error) {
	if !t.metrics {
		return
	}
	out := operationOutcome{errorType: noResponseErrorType(err)}
	if resp != nil {
		out = operationOutcome{status: resp.StatusCode, subStatus: subStatusOf(resp)}
	}
	t.requests.Add(ctx, 1, out.appendTo(appendTarget(make([]slog.Attr, 0, 6), r))...)
}

// throttled adds a wait the service asked for before r's next attempt.
func (t *clientTelemetry) throttled(ctx context.Context, r *request, waited time.Duration) {
	if !t.metrics {
		return
	}
	t.throttleWait.Add(ctx, waited.Seconds(), appendTarget(make([]slog.Attr, 0, 4), r)...)
}

// appendTarget appends what names r: the system, the operation, and the
// database and container where r addresses them.
func appendTarget(attrs []slog.Attr, r *request) []slog.Attr {
	attrs = append(attrs, slog.String(attrDBSystem, dbSystemCosmos), slog.String(attrOperation, r.operation))
	db, coll := targetOf(r.ref.link)
	if db != "" {
		attrs = append(attrs, slog.String(attrNamespace, db))
	}
	if coll != "" {
		attrs = append(attrs, slog.String(attrCollection, coll))
	}
	return attrs
}

// targetOf reads the database and container from a link
// ("dbs/{db}/colls/{coll}/docs/{id}"); ids never hold a '/'.
func targetOf(link string) (db, coll string) {
	rest, ok := strings.CutPrefix(link, "dbs/")
	if !ok {
		return "", ""
	}
	db, rest, _ = strings.Cut(rest, "/")
	if rest, ok = strings.CutPrefix(rest, "colls/"); !ok {
		return db, ""
	}
	coll, _, _ = strings.Cut(rest, "/")
	return db, coll
}

// spanName is "{operation} {container}", or the operation alone, as the
// conventions name database spans.
func spanName(r *request) string {
	if _, coll := targetOf(r.ref.link); coll != "" {
		return r.operation + " " + coll
	}
	return r.operation
}

// operationOutcome is how an operation or attempt ended: the status of its
// last answer (0 for none) and, when it failed, the error's type.
type operationOutcome struct {
	status, subStatus int
	errorType         string
}

func outcomeOf(resp *response, err error) operationOutcome {
	if err == nil && resp != nil {
		return operationOutcome{status: resp.StatusCode, subStatus: subStatusOf(resp)}
	}
	if ce := (*CosmosError)(nil); errors.As(err, &ce) && ce.StatusCode != 0 {
		return operationOutcome{status: ce.StatusCode, subStatus: ce.SubStatusCode, errorType: strconv.Itoa(ce.StatusCode)}
	}
	return operationOutcome{errorType: noResponseErrorType(err)}
}

// noResponseErrorType is the error.type of a failure without an answer:
// the caller's cancellation, a deadline (the caller's or the attempt's),
// or anything else on the way ("transport").
func noResponseErrorType(err error) string {
	var netErr net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	}
	return "transport"
}

func (o operationOutcome) appendTo(attrs []slog.Attr) []slog.Attr {
	if o.status != 0 {
		attrs = append(attrs, slog.String(attrStatusCode, strconv.Itoa(o.status)))
	}
	if o.subStatus != 0 {
		attrs = append(attrs, slog.Int(attrSubStatusCode, o.subStatus))
	}
	if o.errorType != "" {
		attrs = append(attrs, slog.String(attrErrorType, o.errorType))
	}
	return attrs
}

func subStatusOf(resp *response) int {
	sub, _ := strconv.Atoi(resp.Header.Get("x-ms-substatus"))
	return sub
}
