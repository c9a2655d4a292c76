package durable_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/durable"
)

// A flaky activity retried by a policy: the card is declined twice, and the
// third attempt, 20 ms and then 40 ms later (durable timers), succeeds.
func ExampleWithRetry() {
	ctx := context.Background()
	provider, err := cdb.NewProvider(ctx, cdb.Config{Client: cdb.NewFakeAccount(cdb.FakeAccountOptions{}).Client()})
	if err != nil {
		log.Fatal(err)
	}
	defer provider.Close()

	var runs atomic.Int32
	registry := durable.NewRegistry()
	err = errors.Join(
		registry.RegisterActivity("Charge", func(_ durable.ActivityContext, order string) (string, error) {
			if runs.Add(1) <= 2 {
				return "", errors.New("card declined")
			}
			return "receipt for " + order, nil
		}),
		registry.RegisterOrchestration("Pay", func(ctx *durable.OrchestrationContext, order string) (string, error) {
			policy := durable.RetryPolicy{MaxAttempts: 5, FirstInterval: 20 * time.Millisecond, BackoffCoefficient: 2, MaxInterval: time.Second}
			return ctx.ScheduleActivity("Charge", order, durable.WithRetry(policy)).Await()
		}),
	)
	if err != nil {
		log.Fatal(err)
	}
	rt, err := durable.Start(ctx, provider, registry, durable.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Shutdown(ctx)

	client := rt.Client()
	if err := client.StartOrchestration(ctx, "pay-1", "Pay", "order-1"); err != nil {
		log.Fatal(err)
	}
	status, err := client.WaitForCompletion(ctx, "pay-1", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(status.Output, "after", runs.Load(), "attempts")
	// Output: receipt for order-1 after 3 attempts
}
