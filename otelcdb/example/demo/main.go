// Command demo runs a small orchestration workload on the in-memory Cosmos
// DB account with cdb's telemetry bridged to OpenTelemetry by otelcdb, and
// exports it: -metrics serves the metrics to Prometheus, -otlp pushes
// metrics (and, with -request-spans, a span per Cosmos DB request) to an
// OpenTelemetry collector over OTLP/HTTP.
//
//	go run ./example/demo -metrics :9464             # then curl localhost:9464/metrics
//	go run ./example/demo -otlp localhost:4318 -request-spans
//
// With -metrics it keeps serving after the workload until interrupted, so
// that a scraper can read the totals.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprometheus "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/otelcdb"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	metrics      string // Prometheus listener address; "" serves none
	otlp         string // OTLP/HTTP collector host:port; "" pushes nothing
	requestSpans bool
	orders       int
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.metrics, "metrics", "", "serve Prometheus metrics at this address's /metrics, e.g. :9464")
	fs.StringVar(&o.otlp, "otlp", "", "push metrics and spans over OTLP/HTTP, in plain HTTP, to this collector, e.g. localhost:4318")
	fs.BoolVar(&o.requestSpans, "request-spans", false, "make a span of every Cosmos DB request (exported with -otlp)")
	fs.IntVar(&o.orders, "orders", 20, "orchestrations to run")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.metrics == "" && o.otlp == "" {
		return o, errors.New("give -metrics ADDRESS, -otlp HOST:PORT or both")
	}
	if o.orders < 1 {
		return o, errors.New("-orders must be at least 1")
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	ex, err := newExport(ctx, o)
	if err != nil {
		return err
	}
	defer ex.shutdown()
	if ex.listener != nil {
		fmt.Fprintf(stdout, "serving Prometheus metrics at http://%s/metrics\n", ex.listener.Addr())
	}
	if err := runWorkload(ctx, ex.telemetry, o.orders); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d orders completed\n", o.orders)
	if ex.listener == nil {
		return nil // shutdown flushes the OTLP exports
	}
	fmt.Fprintln(stdout, "still serving the metrics; interrupt (Ctrl-C) to stop")
	<-ctx.Done()
	return nil
}

// export is where the telemetry goes: the providers otelcdb reports to,
// with the exporters the flags chose, and the Prometheus listener.
type export struct {
	telemetry cdb.Telemetry
	listener  net.Listener // nil without -metrics
	shutdown  func()       // flushes the OTLP exports and closes the listener
}

func newExport(ctx context.Context, o options) (export, error) {
	var readers []sdkmetric.Option
	var traceOpts []sdktrace.TracerProviderOption
	var server *http.Server
	var listener net.Listener
	if o.metrics != "" {
		// A registry of its own: the process's default one would also
		// carry the Go runtime's collectors, and is package state.
		registry := prometheus.NewRegistry()
		exporter, err := otelprometheus.New(otelprometheus.WithRegisterer(registry))
		if err != nil {
			return export{}, fmt.Errorf("prometheus exporter: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(exporter))
		if listener, err = net.Listen("tcp", o.metrics); err != nil {
			return export{}, fmt.Errorf("listen for -metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
		server = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = server.Serve(listener) }()
	}
	if o.otlp != "" {
		metrics, err := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpoint(o.otlp), otlpmetrichttp.WithInsecure())
		if err != nil {
			return export{}, fmt.Errorf("OTLP metric exporter: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(metrics, sdkmetric.WithInterval(5*time.Second))))
		spans, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(o.otlp), otlptracehttp.WithInsecure())
		if err != nil {
			return export{}, fmt.Errorf("OTLP trace exporter: %w", err)
		}
		traceOpts = append(traceOpts, sdktrace.WithBatcher(spans))
	}
	mp := sdkmetric.NewMeterProvider(readers...)
	tp := sdktrace.NewTracerProvider(traceOpts...)
	var telemetryOpts []otelcdb.Option
	if o.requestSpans {
		telemetryOpts = append(telemetryOpts, otelcdb.WithRequestSpans())
	}
	shutdown := func() {
		// A fresh context: the run's may be cancelled (Ctrl-C), and the
		// last export must still go out.
		flush, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tp.Shutdown(flush)
		_ = mp.Shutdown(flush)
		if server != nil {
			_ = server.Close()
		}
	}
	return export{telemetry: otelcdb.New(mp, tp, telemetryOpts...), listener: listener, shutdown: shutdown}, nil
}
