package cdb_test

import (
	"context"
	"fmt"

	"github.com/duroxide-go/cdb"
)

// A test gets a whole Cosmos DB account in one line, with no network.
func ExampleNewFakeAccount() {
	client := cdb.NewFakeAccount(cdb.FakeAccountOptions{}).Client()

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
	alice := cdb.NewPartitionKeyString("alice")
	if _, err := orders.CreateItem(ctx, alice, []byte(`{"id":"o1","customer":"alice","total":42}`), nil); err != nil {
		panic(err)
	}
	_, err = orders.CreateItem(ctx, alice, []byte(`{"id":"o1","customer":"alice","total":42}`), nil)
	fmt.Println("second create conflicts:", cdb.IsConflict(err))
	// Output: second create conflicts: true
}
