package durable_test

import (
	"context"
	"fmt"
	"log"
	"strconv"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/durable"
)

// Continue-as-new: a long-running loop ends each round with ContinueAsNew,
// so the instance starts a new execution with a fresh, short history and
// carries only its input over. Its id stays the same; WaitForCompletion
// waits for the execution that returns.
func ExampleOrchestrationContext_ContinueAsNew() {
	ctx := context.Background()
	provider, err := cdb.NewProvider(ctx, cdb.Config{Client: cdb.NewFakeAccount(cdb.FakeAccountOptions{}).Client()})
	if err != nil {
		log.Fatal(err)
	}
	defer provider.Close()

	registry := durable.NewRegistry()
	err = registry.RegisterOrchestration("Countdown", func(ctx *durable.OrchestrationContext, input string) (string, error) {
		n, err := strconv.Atoi(input)
		if err != nil {
			return "", err
		}
		if n > 0 {
			// A round's work would go here: activities, timers, events.
			return ctx.ContinueAsNew(strconv.Itoa(n - 1))
		}
		return fmt.Sprintf("liftoff in execution %d", ctx.ExecutionID()), nil
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
	if err := client.StartOrchestration(ctx, "countdown-1", "Countdown", "3"); err != nil {
		log.Fatal(err)
	}
	status, err := client.WaitForCompletion(ctx, "countdown-1", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(status.Output)
	executions, err := client.ListExecutions(ctx, "countdown-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(executions)
	// Output:
	// liftoff in execution 4
	// [1 2 3 4]
}
