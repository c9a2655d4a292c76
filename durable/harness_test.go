package durable

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/hostspeed"
	"github.com/duroxide-go/cdb/internal/memprovider"
)

// providerCase is a provider the end-to-end tests run on.
type providerCase struct {
	name string
	new  func(t *testing.T) cdb.Provider
}

// testProviders are the in-memory reference provider and the Cosmos DB
// provider on the in-memory Cosmos DB account, both long polling.
var testProviders = []providerCase{
	{name: "memory", new: func(t *testing.T) cdb.Provider {
		p := memprovider.New(memprovider.Options{LongPolling: true})
		t.Cleanup(func() { _ = p.Close() })
		return p
	}},
	{name: "cosmos", new: func(t *testing.T) cdb.Provider {
		acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
		p, err := cdb.NewProvider(context.Background(), cdb.Config{
			Client:            acct.Client(),
			PollInterval:      20 * time.Millisecond,
			ReconcileInterval: 100 * time.Millisecond,
			OutboxMinAge:      50 * time.Millisecond,
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		return p
	}},
}

// fastOptions keep the end-to-end tests quick: short polls, short locks.
// The locks are short on the host the tests were tuned on (idle, 2 cores,
// -race) and longer in proportion on a slower one (internal/hostspeed): a
// lock must outlive a fetch, a renewal's round trip and an ack, which on
// the npm server with three test binaries sharing 2 cores took over a
// second, so that every attempt of an activity lost its lock and the
// instance ended as poison.
func fastOptions(t *testing.T) Options {
	return Options{
		MinPollInterval:         10 * time.Millisecond,
		LongPollTimeout:         500 * time.Millisecond,
		OrchestratorLockTimeout: hostspeed.Scale(2 * time.Second),
		WorkerLockTimeout:       hostspeed.Scale(time.Second),
		Logger:                  slog.New(&testLogHandler{t: t}),
	}
}

// harness is a runtime and a client on one provider, for one test.
type harness struct {
	t        *testing.T
	ctx      context.Context
	provider cdb.Provider
	registry *Registry
	rt       *Runtime
	client   *Client
}

// eachProvider runs body as a parallel subtest on every provider: the
// in-process ones, then the real-protocol targets of this run
// (targets_test.go).
func eachProvider(t *testing.T, body func(t *testing.T, h *harness)) {
	for _, pc := range slices.Concat(testProviders, externalProviders()) {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			body(t, newHarness(t, pc.new(t)))
		})
	}
}

// eachSample runs a sample as eachProvider does, and on the in-memory
// provider then replays every execution it left in the store on the code
// that wrote it: what the samples write is what a deploy check replays
// (Replayer), so every shape they produce must replay clean.
func eachSample(t *testing.T, body func(t *testing.T, h *harness)) {
	eachProvider(t, func(t *testing.T, h *harness) {
		body(t, h)
		if _, inMemory := h.provider.(*memprovider.Provider); inMemory {
			h.replaysClean()
		}
	})
}

// replaysClean stops the runtime, so that no instance moves on, then
// replays every execution of every instance in the store.
func (h *harness) replaysClean() {
	h.t.Helper()
	if h.rt != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(h.t, h.rt.Shutdown(ctx))
	}
	instances, err := h.client.ListInstances(h.ctx)
	require.NoError(h.t, err)
	replayer := NewReplayer(h.registry)
	for _, instance := range instances {
		require.NoError(h.t, replayer.ReplayInstance(h.ctx, h.provider, instance), "instance %s", instance)
	}
}

// newCosmosHarness is a harness on the Cosmos DB provider over acct.
func newCosmosHarness(t *testing.T, acct *cdb.FakeAccount) *harness {
	p, err := cdb.NewProvider(context.Background(), cdb.Config{Client: acct.Client(), PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return newHarness(t, p)
}

func newHarness(t *testing.T, p cdb.Provider) *harness {
	return &harness{t: t, ctx: context.Background(), provider: p, registry: NewRegistry(), client: NewClient(p)}
}

func (h *harness) activity(name string, fn ActivityFunc) {
	require.NoError(h.t, h.registry.RegisterActivity(name, fn))
}

func (h *harness) orchestration(name string, fn OrchestrationFunc) {
	require.NoError(h.t, h.registry.RegisterOrchestration(name, fn))
}

// run starts the runtime; it is shut down (and must stop cleanly) when the
// test ends.
// lockedByTheTestsClock gives the harness its locks' unscaled lengths
// (worker 1 s, orchestrator 2 s), for a test whose store's clock moves only
// when the test moves it, past a lock: such a lock cannot expire behind the
// test's back however slow the host, and a lock scaled with the host would
// outlast the step the test moves the clock by.
func lockedByTheTestsClock(o *Options) {
	o.OrchestratorLockTimeout, o.WorkerLockTimeout = 2*time.Second, time.Second
}

func (h *harness) run(tweak ...func(*Options)) {
	opts := fastOptions(h.t)
	for _, f := range tweak {
		f(&opts)
	}
	rt, err := Start(h.ctx, h.provider, h.registry, opts)
	require.NoError(h.t, err)
	h.rt = rt
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(h.t, rt.Shutdown(ctx))
	})
}

func (h *harness) start(instance, name, input string, opts ...StartOption) {
	require.NoError(h.t, h.client.StartOrchestration(h.ctx, instance, name, input, opts...))
}

// wait waits for the instance to finish and returns its status. The wait
// is only a bound for a test that would otherwise hang: 15 s was outlasted
// by a 100-message inbox against the npm server under -race on a loaded
// 2-core machine (it takes about 5 s alone); a minute, scaled with the
// host's slowness.
func (h *harness) wait(instance string) Status {
	st, err := h.client.WaitForCompletion(h.ctx, instance, hostspeed.Scale(time.Minute))
	require.NoError(h.t, err, "instance %s", instance)
	return st
}

// completed waits for the instance and requires it completed.
func (h *harness) completed(instance string) string {
	st := h.wait(instance)
	if st.State == StateFailed {
		h.t.Fatalf("%s failed: %s", instance, st.Error.DisplayMessage())
	}
	require.Equal(h.t, StateCompleted, st.State)
	return st.Output
}

// waitForHistory polls the latest execution's history until cond holds.
func (h *harness) waitForHistory(instance string, cond func([]cdb.Event) bool) []cdb.Event {
	var history []cdb.Event
	err := poll(h.ctx, hostspeed.Scale(time.Minute), func() (bool, error) {
		var err error
		history, err = h.provider.Read(h.ctx, instance)
		return err == nil && cond(history), err
	})
	require.NoError(h.t, err, "waiting for the history of %s", instance)
	return history
}

func hasEvent[T cdb.EventKind](history []cdb.Event) bool {
	for _, ev := range history {
		if _, ok := ev.Kind.(T); ok {
			return true
		}
	}
	return false
}

func eventsOf[T cdb.EventKind](history []cdb.Event) []T {
	var out []T
	for _, ev := range history {
		if k, ok := ev.Kind.(T); ok {
			out = append(out, k)
		}
	}
	return out
}

// testLogHandler sends warnings and errors to the test log, so a failing
// test shows what the runtime complained about.
type testLogHandler struct {
	t     *testing.T
	attrs []slog.Attr
}

func (h *testLogHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *testLogHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	for _, a := range h.attrs {
		b.WriteString(" " + a.String())
	}
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	h.t.Log(b.String())
	return nil
}

func (h *testLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &testLogHandler{t: h.t, attrs: append(append([]slog.Attr{}, h.attrs...), attrs...)}
}

func (h *testLogHandler) WithGroup(string) slog.Handler { return h }
