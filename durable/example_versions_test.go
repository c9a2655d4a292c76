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

// Versions: changing what a running orchestration schedules would break
// its replay, so a changed orchestration is registered as a new version of
// the same name. A new start runs the latest version; an instance keeps the
// version it started with; WithVersion starts (or continues as new, or
// starts a child) at an exact one.
func ExampleRegistry_RegisterOrchestrationVersion() {
	ctx := context.Background()
	provider, err := cdb.NewProvider(ctx, cdb.Config{Client: cdb.NewFakeAccount(cdb.FakeAccountOptions{}).Client()})
	if err != nil {
		log.Fatal(err)
	}
	defer provider.Close()

	registry := durable.NewRegistry()
	err = errors.Join(
		registry.RegisterOrchestrationVersion("Quote", "1.0.0", func(ctx *durable.OrchestrationContext, item string) (string, error) {
			return item + " at list price (" + ctx.OrchestrationVersion() + ")", nil
		}),
		// Versions of a name are registered in increasing order.
		registry.RegisterOrchestrationVersion("Quote", "2.0.0", func(ctx *durable.OrchestrationContext, item string) (string, error) {
			return item + " with the loyalty discount (" + ctx.OrchestrationVersion() + ")", nil
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
	if err := client.StartOrchestration(ctx, "quote-latest", "Quote", "chair"); err != nil {
		log.Fatal(err)
	}
	if err := client.StartOrchestration(ctx, "quote-pinned", "Quote", "chair", durable.WithVersion("1.0.0")); err != nil {
		log.Fatal(err)
	}
	for _, id := range []string{"quote-latest", "quote-pinned"} {
		status, err := client.WaitForCompletion(ctx, id, time.Minute)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(id+":", status.Output)
	}
	// Output:
	// quote-latest: chair with the loyalty discount (2.0.0)
	// quote-pinned: chair at list price (1.0.0)
}
