package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/durable"
)

// runWorkload runs orders orchestrations on a fresh in-memory Cosmos DB
// account, the client, the provider and the runtime all reporting to tel,
// and waits for each to complete.
func runWorkload(ctx context.Context, tel cdb.Telemetry, orders int) error {
	account := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	provider, err := cdb.NewProvider(ctx, cdb.Config{
		Endpoint: account.Endpoint(), Key: account.Key(),
		ClientOptions: cdb.ClientOptions{Transport: account.Transport(), Telemetry: tel},
	})
	if err != nil {
		return fmt.Errorf("provider: %w", err)
	}
	defer provider.Close()
	registry, err := newRegistry()
	if err != nil {
		return err
	}
	rt, err := durable.Start(ctx, provider, registry, durable.Options{Telemetry: tel})
	if err != nil {
		return fmt.Errorf("start the runtime: %w", err)
	}
	defer func() {
		stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(stop)
	}()
	client := rt.Client()
	for i := range orders {
		if err := client.StartOrchestration(ctx, fmt.Sprintf("order-%d", i), "Order", fmt.Sprint(i)); err != nil {
			return fmt.Errorf("start order-%d: %w", i, err)
		}
	}
	for i := range orders {
		status, err := client.WaitForCompletion(ctx, fmt.Sprintf("order-%d", i), time.Minute)
		if err != nil {
			return fmt.Errorf("wait for order-%d: %w", i, err)
		}
		if status.State != durable.StateCompleted {
			return fmt.Errorf("order-%d ended %s", i, status.State)
		}
	}
	return nil
}

// newRegistry registers an order: two reservations in parallel, then a
// charge.
func newRegistry() (*durable.Registry, error) {
	reg := durable.NewRegistry()
	echo := func(_ durable.ActivityContext, in string) (string, error) { return in, nil }
	return reg, errors.Join(
		reg.RegisterOrchestration("Order", order),
		reg.RegisterActivity("Reserve", echo),
		reg.RegisterActivity("Charge", echo),
	)
}

func order(ctx *durable.OrchestrationContext, input string) (string, error) {
	reservations := ctx.Join(
		ctx.ScheduleActivity("Reserve", input+"/a"),
		ctx.ScheduleActivity("Reserve", input+"/b"),
	)
	for _, r := range reservations {
		if r.Err != nil {
			return "", r.Err
		}
	}
	return ctx.ScheduleActivity("Charge", input).Await()
}
