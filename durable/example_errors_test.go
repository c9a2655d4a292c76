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

// CardDeclined is a payment activity's own error type.
type CardDeclined struct {
	Reason string // such as "insufficient_funds"
}

func (e *CardDeclined) Error() string { return "card declined: " + e.Reason }

// NonRetryable marks the error as not worth trying again
// (durable.IsNonRetryable).
func (e *CardDeclined) NonRetryable() bool { return true }

// An activity's error reaches the orchestration whole: registered with
// RegisterError, errors.As finds it, fields and all, in what Await returns.
func ExampleRegisterError() {
	ctx := context.Background()
	provider, err := cdb.NewProvider(ctx, cdb.Config{Client: cdb.NewFakeAccount(cdb.FakeAccountOptions{}).Client()})
	if err != nil {
		log.Fatal(err)
	}
	defer provider.Close()

	registry := durable.NewRegistry()
	err = errors.Join(
		durable.RegisterError[*CardDeclined](registry),
		registry.RegisterActivity("Charge", func(durable.ActivityContext, string) (string, error) {
			return "", &CardDeclined{Reason: "insufficient_funds"}
		}),
		registry.RegisterOrchestration("Pay", func(ctx *durable.OrchestrationContext, order string) (string, error) {
			_, err := ctx.ScheduleActivity("Charge", order).Await()
			var declined *CardDeclined
			if errors.As(err, &declined) {
				return fmt.Sprintf("ask for another card (%s, retry: %t)", declined.Reason, !durable.IsNonRetryable(err)), nil
			}
			return "paid", err
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
	if err := client.StartOrchestration(ctx, "order-7", "Pay", "order-7"); err != nil {
		log.Fatal(err)
	}
	status, err := client.WaitForCompletion(ctx, "order-7", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(status.Output)
	// Starting the same id again is refused.
	err = client.StartOrchestration(ctx, "order-7", "Pay", "order-7")
	fmt.Println(errors.Is(err, durable.ErrInstanceExists))
	// Output:
	// ask for another card (insufficient_funds, retry: false)
	// true
}
