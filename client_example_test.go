package cdb_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/duroxide-go/cdb"
)

// newOrders returns a container "orders" partitioned by /customer in a new
// in-memory account, for the examples.
func newOrders(ctx context.Context) *cdb.ContainerClient {
	client := cdb.NewFakeAccount(cdb.FakeAccountOptions{}).Client()
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
	return orders
}

type order struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Total    int    `json:"total"`
	Status   string `json:"status"`
}

func orderJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// NewClient connects to an account by endpoint and master key. Here the
// account is the in-memory one, reached through its transport; for a real
// account pass its https endpoint and key, and leave Transport nil.
func ExampleNewClient() {
	account := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	client, err := cdb.NewClient(account.Endpoint(), cdb.ClientOptions{
		Key:       account.Key(),
		Transport: account.Transport(),
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := client.EnsureDatabase(ctx, "shop"); err != nil {
		panic(err)
	}
	db, err := client.ReadDatabase(ctx, "shop")
	if err != nil {
		panic(err)
	}
	fmt.Println("database:", db.ID)
	// Output: database: shop
}

// Items are created, read, replaced on a condition (the ETag read), patched
// and deleted, each in its logical partition.
func ExampleContainerClient_ReplaceItem() {
	ctx := context.Background()
	orders := newOrders(ctx)
	alice := cdb.NewPartitionKeyString("alice")

	if _, err := orders.CreateItem(ctx, alice, orderJSON(order{ID: "o1", Customer: "alice", Total: 42, Status: "new"}), nil); err != nil {
		panic(err)
	}
	read, err := orders.ReadItem(ctx, alice, "o1", nil)
	if err != nil {
		panic(err)
	}
	var o order
	if err := json.Unmarshal(read.Value, &o); err != nil {
		panic(err)
	}

	// Replace only if nobody changed the item since it was read.
	o.Status = "paid"
	etag := read.ETag
	if _, err := orders.ReplaceItem(ctx, alice, "o1", orderJSON(o), &cdb.ItemOptions{IfMatch: &etag}); err != nil {
		panic(err)
	}
	// The same ETag is stale now: the second replace is refused with 412.
	_, err = orders.ReplaceItem(ctx, alice, "o1", orderJSON(o), &cdb.ItemOptions{IfMatch: &etag})
	fmt.Println("stale ETag refused:", cdb.IsPreconditionFailed(err))

	var ops cdb.PatchOperations
	ops.AppendIncrement("/total", 8)
	ops.AppendSet("/status", "shipped")
	patched, err := orders.PatchItem(ctx, alice, "o1", ops, &cdb.ItemOptions{EnableContentResponseOnWrite: true})
	if err != nil {
		panic(err)
	}
	if err := json.Unmarshal(patched.Value, &o); err != nil {
		panic(err)
	}
	fmt.Println("after patch:", o.Total, o.Status)

	if _, err := orders.DeleteItem(ctx, alice, "o1", nil); err != nil {
		panic(err)
	}
	_, err = orders.ReadItem(ctx, alice, "o1", nil)
	fmt.Println("deleted:", cdb.IsNotFound(err))
	// Output:
	// stale ETag refused: true
	// after patch: 50 shipped
	// deleted: true
}

// Queries are parameterised; a pager walks the results page by page, each
// page's continuation token leading to the next.
func ExampleContainerClient_NewQueryItemsPager() {
	ctx := context.Background()
	orders := newOrders(ctx)
	alice := cdb.NewPartitionKeyString("alice")
	for i, total := range []int{5, 50, 500, 70} {
		o := order{ID: fmt.Sprintf("o%d", i), Customer: "alice", Total: total}
		if _, err := orders.CreateItem(ctx, alice, orderJSON(o), nil); err != nil {
			panic(err)
		}
	}

	pager := orders.NewQueryItemsPager(
		"SELECT VALUE c.total FROM c WHERE c.customer = @customer AND c.total >= @min",
		[]cdb.QueryParameter{{Name: "@customer", Value: "alice"}, {Name: "@min", Value: 10}},
		&cdb.QueryOptions{PartitionKey: &alice, MaxItemCount: 2})
	sum, pages := 0, 0
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			panic(err)
		}
		pages++
		for _, raw := range page.Items {
			var total int
			if err := json.Unmarshal(raw, &total); err != nil {
				panic(err)
			}
			sum += total
		}
	}
	fmt.Println("sum:", sum, "pages:", pages)
	// Output: sum: 620 pages: 2
}

// A transactional batch commits all its operations in one partition, or
// none: here the second batch fails on a duplicate id and its first
// operation is rolled back.
func ExampleContainerClient_ExecuteTransactionalBatch() {
	ctx := context.Background()
	orders := newOrders(ctx)
	alice := cdb.NewPartitionKeyString("alice")

	b := orders.NewTransactionalBatch(alice)
	b.CreateItem(orderJSON(order{ID: "o1", Customer: "alice", Total: 1}), nil)
	b.CreateItem(orderJSON(order{ID: "o2", Customer: "alice", Total: 2}), nil)
	resp, err := orders.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println("first batch committed:", resp.Success)

	b = orders.NewTransactionalBatch(alice)
	b.CreateItem(orderJSON(order{ID: "o3", Customer: "alice", Total: 3}), nil)
	b.CreateItem(orderJSON(order{ID: "o1", Customer: "alice", Total: 1}), nil) // exists: 409
	resp, err = orders.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil {
		panic(err)
	}
	index, cause := resp.FailedOperation()
	fmt.Println("second batch committed:", resp.Success, "- failed operation:", index, "conflict:", cdb.IsConflict(cause))
	_, err = orders.ReadItem(ctx, alice, "o3", nil)
	fmt.Println("o3 rolled back:", cdb.IsNotFound(err))
	// Output:
	// first batch committed: true
	// second batch committed: false - failed operation: 1 conflict: true
	// o3 rolled back: true
}

// Client failures are *cdb.CosmosError values (IsNotFound, IsConflict and
// IsPreconditionFailed classify them); input refused before sending is a
// *cdb.ValidationError wrapping a sentinel; provider failures wrap the
// sentinel of their condition, found with errors.Is.
func Example_errorHandling() {
	ctx := context.Background()
	orders := newOrders(ctx)
	alice := cdb.NewPartitionKeyString("alice")

	_, err := orders.ReadItem(ctx, alice, "missing", nil)
	var ce *cdb.CosmosError
	if errors.As(err, &ce) {
		fmt.Println("status:", ce.StatusCode, "not found:", cdb.IsNotFound(err), "conflict:", cdb.IsConflict(err))
	}
	fmt.Println("same as HasStatus:", cdb.HasStatus(err, http.StatusNotFound))

	_, err = orders.CreateItem(ctx, alice, []byte(`{"id":"a/b","customer":"alice"}`), nil)
	var ve *cdb.ValidationError
	fmt.Println("refused before sending:", errors.As(err, &ve), errors.Is(err, cdb.ErrInvalidID))

	provider, err := cdb.NewProvider(ctx, cdb.Config{Client: cdb.NewFakeAccount(cdb.FakeAccountOptions{}).Client()})
	if err != nil {
		panic(err)
	}
	defer provider.Close()
	_, err = provider.GetInstanceInfo(ctx, "no-such-order")
	err = fmt.Errorf("show order: %w", err) // however it was wrapped since
	fmt.Println("instance not found:", errors.Is(err, cdb.ErrInstanceNotFound), "retryable:", cdb.IsRetryable(err))
	err = provider.AckWorkItem(ctx, "stale-token", nil)
	fmt.Println("invalid lock token:", errors.Is(err, cdb.ErrInvalidLockToken))
	var pe *cdb.ProviderError
	if errors.As(err, &pe) {
		fmt.Println("operation:", pe.Op)
	}
	// Output:
	// status: 404 not found: true conflict: false
	// same as HasStatus: true
	// refused before sending: true true
	// instance not found: true retryable: false
	// invalid lock token: true
	// operation: AckWorkItem
}
