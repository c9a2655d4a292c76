package durable_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/durable"
)

// A sub-orchestration: the parent starts one child per parcel, each a whole
// orchestration with a history of its own (instance "{parent}::sub::{n}"
// unless WithInstanceID names it), and joins them as it joins activities.
// A child that fails makes its future's Await return the failure.
func ExampleOrchestrationContext_ScheduleSubOrchestration() {
	ctx := context.Background()
	provider, err := cdb.NewProvider(ctx, cdb.Config{Client: cdb.NewFakeAccount(cdb.FakeAccountOptions{}).Client()})
	if err != nil {
		log.Fatal(err)
	}
	defer provider.Close()

	registry := durable.NewRegistry()
	err = errors.Join(
		registry.RegisterActivity("Label", func(_ durable.ActivityContext, parcel string) (string, error) {
			return "label for " + parcel, nil
		}),
		registry.RegisterOrchestration("ShipParcel", func(ctx *durable.OrchestrationContext, parcel string) (string, error) {
			return ctx.ScheduleActivity("Label", parcel).Await()
		}),
		registry.RegisterOrchestration("ShipOrder", func(ctx *durable.OrchestrationContext, _ string) (string, error) {
			children := []*durable.Future{
				ctx.ScheduleSubOrchestration("ShipParcel", "books"),
				ctx.ScheduleSubOrchestration("ShipParcel", "lamp", durable.WithInstanceID("order-9-lamp")),
			}
			var labels []string
			for _, r := range ctx.Join(children...) {
				if r.Err != nil {
					return "", r.Err
				}
				labels = append(labels, r.Value)
			}
			return strings.Join(labels, "; "), nil
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
	if err := client.StartOrchestration(ctx, "order-9", "ShipOrder", ""); err != nil {
		log.Fatal(err)
	}
	status, err := client.WaitForCompletion(ctx, "order-9", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(status.Output)
	child, err := client.GetStatus(ctx, "order-9-lamp")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("order-9-lamp:", child.State)
	// Output:
	// label for books; label for lamp
	// order-9-lamp: Completed
}
