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

// Quote is a typed activity's input.
type Quote struct {
	Item     string `json:"item"`
	Quantity int    `json:"quantity"`
}

// A typed activity scheduled with its input as JSON: the future goes
// straight into AwaitAs, which decodes the output. An input json cannot
// encode would come back from AwaitAs as the error, with nothing scheduled.
func ExampleOrchestrationContext_ScheduleActivityJSON() {
	ctx := context.Background()
	provider, err := cdb.NewProvider(ctx, cdb.Config{Client: cdb.NewFakeAccount(cdb.FakeAccountOptions{}).Client()})
	if err != nil {
		log.Fatal(err)
	}
	defer provider.Close()

	registry := durable.NewRegistry()
	err = errors.Join(
		durable.RegisterTypedActivity(registry, "Price", func(_ durable.ActivityContext, q Quote) (int, error) {
			return 250 * q.Quantity, nil // cents
		}),
		durable.RegisterTypedOrchestration(registry, "Checkout", func(ctx *durable.OrchestrationContext, q Quote) (string, error) {
			cents, err := durable.AwaitAs[int](ctx.ScheduleActivityJSON("Price", q))
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%d x %s: %d.%02d", q.Quantity, q.Item, cents/100, cents%100), nil
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
	if err := client.StartOrchestrationTyped(ctx, "checkout-1", "Checkout", Quote{Item: "pen", Quantity: 3}); err != nil {
		log.Fatal(err)
	}
	out, err := durable.WaitForCompletionAs[string](ctx, client, "checkout-1", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out)
	// Output: 3 x pen: 7.50
}

// Tally is a typed loop's state, carried from one execution to the next.
type Tally struct {
	Page  int `json:"page"`
	Total int `json:"total"`
}

// A typed loop: each execution counts one page, then continues as new with
// its state as JSON, so no history grows longer than one page's work.
// ContinueAsNewJSON returns only an input that does not encode, as its
// error; an orchestration whose output is not a string returns that error
// with its own zero output.
func ExampleOrchestrationContext_ContinueAsNewJSON() {
	ctx := context.Background()
	provider, err := cdb.NewProvider(ctx, cdb.Config{Client: cdb.NewFakeAccount(cdb.FakeAccountOptions{}).Client()})
	if err != nil {
		log.Fatal(err)
	}
	defer provider.Close()

	pages := [][]string{{"a", "b"}, {"c"}, {"d", "e", "f"}}
	registry := durable.NewRegistry()
	err = errors.Join(
		durable.RegisterTypedActivity(registry, "CountPage", func(_ durable.ActivityContext, page int) (int, error) {
			return len(pages[page]), nil
		}),
		durable.RegisterTypedOrchestration(registry, "CountAll", func(ctx *durable.OrchestrationContext, t Tally) (Tally, error) {
			if t.Page == len(pages) {
				return t, nil
			}
			n, err := durable.AwaitAs[int](ctx.ScheduleActivityJSON("CountPage", t.Page))
			if err != nil {
				return Tally{}, err
			}
			_, err = ctx.ContinueAsNewJSON(Tally{Page: t.Page + 1, Total: t.Total + n})
			return Tally{}, err
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
	if err := client.StartOrchestrationTyped(ctx, "count-1", "CountAll", Tally{}); err != nil {
		log.Fatal(err)
	}
	tally, err := durable.WaitForCompletionAs[Tally](ctx, client, "count-1", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d items on %d pages\n", tally.Total, tally.Page)
	// Output: 6 items on 3 pages
}
