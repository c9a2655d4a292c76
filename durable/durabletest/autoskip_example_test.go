package durabletest_test

import (
	"context"
	"fmt"
	"log"
	"testing"
	"time"

	"github.com/duroxide-go/cdb/durable"
	"github.com/duroxide-go/cdb/durable/durabletest"
)

// A reminder a day after an order is skipped to, with no Advance: the
// skipper moves the clock to the timer once the runtime is idle, and
// exactly to it.
func ExampleClock_AutoSkip() {
	t := newExampleT() // in a test, the test's *testing.T
	defer t.finish()
	ctx := context.Background()

	clock := durabletest.NewClock()
	provider := durabletest.NewProvider(t, clock)
	registry := durable.NewRegistry()
	err := registry.RegisterOrchestration("Reminder", func(ctx *durable.OrchestrationContext, _ string) (string, error) {
		if _, err := ctx.ScheduleTimer(24 * time.Hour).Await(); err != nil {
			return "", err
		}
		return "reminded", nil
	})
	if err != nil {
		log.Fatal(err)
	}
	rt, err := durable.Start(ctx, provider, registry, clock.Options(durable.Options{}))
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Shutdown(ctx)
	start := clock.Now()
	clock.AutoSkip(t, provider)

	client := rt.Client()
	if err := client.StartOrchestration(ctx, "order-1", "Reminder", ""); err != nil {
		log.Fatal(err)
	}
	status, err := client.WaitForCompletion(ctx, "order-1", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(status.Output, "after", clock.Now().Sub(start))
	// Output: reminded after 24h0m0s
}

// exampleT stands in for a test's *testing.T in an example, which has
// none: it keeps the cleanups to run at finish. The methods durabletest
// does not call are left to the nil testing.TB, and would panic.
type exampleT struct {
	testing.TB
	cleanups []func()
}

func newExampleT() *exampleT { return &exampleT{} }

func (t *exampleT) Helper()                         {}
func (t *exampleT) Cleanup(f func())                { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Logf(format string, args ...any) { log.Printf(format, args...) }
func (t *exampleT) Fatalf(format string, args ...any) {
	log.Fatalf(format, args...)
}

// finish runs the cleanups, the last registered first, as a test's end
// does.
func (t *exampleT) finish() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}
