package telemetrytest_test

import (
	"context"
	"fmt"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/telemetrytest"
)

// A test gives a Recorder to the client and asserts on what it reported.
func ExampleRecorder() {
	account := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	rec := telemetrytest.NewRecorder()
	client, err := cdb.NewClient(account.Endpoint(), cdb.ClientOptions{
		Key: account.Key(), Transport: account.Transport(),
		Telemetry: cdb.Telemetry{Meter: rec, Tracer: rec, RequestSpans: true},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := client.EnsureDatabase(ctx, "shop"); err != nil {
		panic(err)
	}
	orders, err := client.NewContainer("shop", "orders")
	if err != nil {
		panic(err)
	}
	if _, err := orders.Ensure(ctx, cdb.ContainerProperties{
		ID:           "orders",
		PartitionKey: cdb.PartitionKeyDefinition{Paths: []string{"/customer"}, Kind: "Hash", Version: 2},
	}); err != nil {
		panic(err)
	}

	ctx, turn := rec.Start(ctx, "turn", cdb.SpanOptions{})
	alice := cdb.NewPartitionKeyString("alice")
	if _, err := orders.CreateItem(ctx, alice, []byte(`{"id":"o1","customer":"alice"}`), nil); err != nil {
		panic(err)
	}
	_, err = orders.ReadItem(ctx, alice, "o2", nil)
	turn.End()

	fmt.Println("read o2 found nothing:", cdb.IsNotFound(err))
	for _, op := range []string{"CreateItem", "ReadItem"} {
		for _, p := range rec.Points("db.client.operation.duration", map[string]any{"db.operation.name": op}) {
			a := p.Attributes()
			line := fmt.Sprint(op, " status ", a["db.response.status_code"])
			if errorType, failed := a["error.type"]; failed {
				line += fmt.Sprint(" error.type ", errorType)
			}
			fmt.Println(line)
		}
	}
	// the in-memory account's model: 4.95 for an item under 1 KB + 0.2 for
	// each of its 3 indexed terms (id, customer, _ts)
	fmt.Println("RU of the create:", rec.Sum("azure.cosmosdb.client.operation.request_charge", map[string]any{"db.operation.name": "CreateItem"}))
	create := rec.SpansNamed("CreateItem orders")[0]
	fmt.Println("the create's span is the turn's child:", create.ParentSpanID == rec.SpansNamed("turn")[0].SpanID)
	// Output:
	// read o2 found nothing: true
	// CreateItem status 201
	// ReadItem status 404 error.type 404
	// RU of the create: 5.55
	// the create's span is the turn's child: true
}
