package durable_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/durable"
)

// An orchestration that calls one activity, run on the in-memory Cosmos DB:
// the provider, a registry, the runtime, and a client that starts an
// instance and waits for its output.
func Example() {
	ctx := context.Background()
	// The in-memory Cosmos DB; on a real account, pass the Config of
	// cdb.ConfigFromEnv() instead.
	account := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	provider, err := cdb.NewProvider(ctx, cdb.Config{Client: account.Client()})
	if err != nil {
		log.Fatal(err)
	}
	defer provider.Close()

	registry := durable.NewRegistry()
	err = registry.RegisterActivity("Greet", func(_ durable.ActivityContext, name string) (string, error) {
		return "Hello, " + name + "!", nil
	})
	if err != nil {
		log.Fatal(err)
	}
	err = registry.RegisterOrchestration("Hello", func(ctx *durable.OrchestrationContext, name string) (string, error) {
		return ctx.ScheduleActivity("Greet", name).Await()
	})
	if err != nil {
		log.Fatal(err)
	}

	// Options{} is a working configuration: work enqueued by this process
	// wakes the runtime at once, whatever its poll intervals.
	rt, err := durable.Start(ctx, provider, registry, durable.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Shutdown(ctx)

	client := rt.Client()
	if err := client.StartOrchestration(ctx, "hello-1", "Hello", "Gopher"); err != nil {
		log.Fatal(err)
	}
	status, err := client.WaitForCompletion(ctx, "hello-1", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(status.State, status.Output)
	// Output: Completed Hello, Gopher!
}

// Fan-out/fan-in: schedule one activity per item, then Join them. The
// activities run in parallel on the runtime's workers; Join returns their
// results in the order they were scheduled. The typed helpers carry Go
// values as JSON.
func ExampleOrchestrationContext_Join() {
	ctx := context.Background()
	provider, err := cdb.NewProvider(ctx, cdb.Config{Client: cdb.NewFakeAccount(cdb.FakeAccountOptions{}).Client()})
	if err != nil {
		log.Fatal(err)
	}
	defer provider.Close()

	registry := durable.NewRegistry()
	err = durable.RegisterTypedActivity(registry, "Square", func(_ durable.ActivityContext, n int) (int, error) {
		return n * n, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	err = durable.RegisterTypedOrchestration(registry, "SumOfSquares", func(ctx *durable.OrchestrationContext, numbers []int) (int, error) {
		futures := make([]*durable.Future, len(numbers))
		for i, n := range numbers {
			futures[i] = ctx.ScheduleActivityJSON("Square", n)
		}
		sum := 0
		for _, r := range ctx.Join(futures...) {
			if r.Err != nil {
				return 0, r.Err
			}
			square, err := durable.DecodeJSON[int](r.Value)
			if err != nil {
				return 0, err
			}
			sum += square
		}
		return sum, nil
	})
	if err != nil {
		log.Fatal(err)
	}

	rt, err := durable.Start(ctx, provider, registry, durable.Options{WorkerConcurrency: 4})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Shutdown(ctx)

	client := rt.Client()
	if err := client.StartOrchestrationTyped(ctx, "sum-1", "SumOfSquares", []int{1, 2, 3, 4}); err != nil {
		log.Fatal(err)
	}
	sum, err := durable.WaitForCompletionAs[int](ctx, client, "sum-1", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(sum)
	// Output: 30
}

// An external event: the orchestration waits for "Approval" with a
// timeout, and the client raises it. The client need not wait until the
// orchestration waits: an event raised earlier (here, possibly before the
// orchestration's first turn) is kept for the first wait of its name.
func ExampleClient_RaiseEvent() {
	ctx := context.Background()
	provider, err := cdb.NewProvider(ctx, cdb.Config{Client: cdb.NewFakeAccount(cdb.FakeAccountOptions{}).Client()})
	if err != nil {
		log.Fatal(err)
	}
	defer provider.Close()

	registry := durable.NewRegistry()
	err = registry.RegisterOrchestration("Expense", func(ctx *durable.OrchestrationContext, item string) (string, error) {
		by, err := ctx.WaitForEvent("Approval", durable.WithEventTimeout(72*time.Hour)).Await()
		if errors.Is(err, durable.ErrEventTimeout) {
			return item + " rejected: no approval in time", nil
		}
		if err != nil {
			return "", err
		}
		return item + " approved by " + by, nil
	})
	if err != nil {
		log.Fatal(err)
	}

	rt, err := durable.Start(ctx, provider, registry, durable.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Shutdown(ctx)

	client := rt.Client()
	if err := client.StartOrchestration(ctx, "expense-1", "Expense", "laptop"); err != nil {
		log.Fatal(err)
	}
	if err := client.RaiseEvent(ctx, "expense-1", "Approval", "alice"); err != nil {
		log.Fatal(err)
	}
	status, err := client.WaitForCompletion(ctx, "expense-1", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(status.Output)
	// Output: laptop approved by alice
}

// A durable timer: the orchestration sleeps without holding a goroutine or a
// lock, and wakes on whichever process runs the runtime when it fires.
// Select races it against an event, the usual way to give a wait a
// deadline: the loser is cancelled.
func ExampleOrchestrationContext_ScheduleTimer() {
	ctx := context.Background()
	provider, err := cdb.NewProvider(ctx, cdb.Config{Client: cdb.NewFakeAccount(cdb.FakeAccountOptions{}).Client()})
	if err != nil {
		log.Fatal(err)
	}
	defer provider.Close()

	registry := durable.NewRegistry()
	err = registry.RegisterOrchestration("Reminder", func(ctx *durable.OrchestrationContext, _ string) (string, error) {
		timer := ctx.ScheduleTimer(50 * time.Millisecond)
		paid := ctx.WaitForEvent("Paid")
		if ctx.Select(timer, paid) == 0 {
			return "reminder sent", nil
		}
		return "paid in time", nil
	})
	if err != nil {
		log.Fatal(err)
	}

	rt, err := durable.Start(ctx, provider, registry, durable.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Shutdown(ctx)

	client := rt.Client()
	if err := client.StartOrchestration(ctx, "invoice-1", "Reminder", ""); err != nil {
		log.Fatal(err)
	}
	status, err := client.WaitForCompletion(ctx, "invoice-1", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(status.Output)
	// Output: reminder sent
}
