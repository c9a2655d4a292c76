package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/duroxide-go/cdb"
)

// runDemo walks through what the storage layer does, on the embedded
// in-memory Cosmos DB or, when COSMOS_ENDPOINT is set, on that account:
// bootstrap, writes with ETags, an atomic batch and its rollback, paged and
// range-targeted queries, and what every step cost in requests and RU.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", stderr)
	customers := fs.Int("customers", 8, "customers (logical partitions) to create orders for")
	orders := fs.Int("orders", 5, "orders per customer")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *customers < 1 || *orders < 1 || *orders > 99 {
		return usageError{msg: "-customers must be ≥ 1 and -orders between 1 and 99"}
	}
	client, where, err := demoClient()
	if err != nil {
		return err
	}
	d := &demo{client: client, out: stdout}
	fmt.Fprintf(stdout, "cdb demo on %s\n\n", where)
	return d.run(ctx, *customers, *orders)
}

// demoClient connects to COSMOS_ENDPOINT when set, else to a fresh
// in-memory account with four partition key ranges.
func demoClient() (*cdb.Client, string, error) {
	endpoint := os.Getenv("COSMOS_ENDPOINT")
	if endpoint == "" {
		acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{PartitionKeyRanges: 4})
		return acct.Client(), "the embedded in-memory Cosmos DB (set COSMOS_ENDPOINT and COSMOS_KEY for a real account)", nil
	}
	opts := cdb.ClientOptions{Key: os.Getenv("COSMOS_KEY")}
	opts.TLS.InsecureSkipVerify = os.Getenv("COSMOS_INSECURE_SKIP_VERIFY") == "true"
	c, err := cdb.NewClient(endpoint, opts)
	if err != nil {
		return nil, "", fmt.Errorf("connect to COSMOS_ENDPOINT: %w", err)
	}
	return c, c.Endpoint(), nil
}

type demo struct {
	client *cdb.Client
	out    io.Writer
	orders *cdb.ContainerClient
	db     string
}

type demoOrder struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Total    int    `json:"total"`
	Status   string `json:"status"`
}

func (d *demo) run(ctx context.Context, customers, perCustomer int) error {
	steps := []struct {
		title string
		run   func(context.Context) error
	}{
		{"bootstrap: database and container, created if missing", d.bootstrap},
		{fmt.Sprintf("write %d orders for each of %d customers, one atomic batch per customer", perCustomer, customers),
			func(ctx context.Context) error { return d.writeOrders(ctx, customers, perCustomer) }},
		{"optimistic concurrency: a stale ETag is refused", d.staleETag},
		{"atomicity: a batch whose last operation conflicts leaves nothing behind", d.rollback},
		{"single-partition query with ORDER BY, two orders a page", d.pagedQuery},
		{"cross-partition ORDER BY: refused by the gateway, served per partition key range", d.perRangeQuery},
	}
	total := d.client.Stats()
	for i, s := range steps {
		before := d.client.Stats()
		fmt.Fprintf(d.out, "%d. %s\n", i+1, s.title)
		if err := s.run(ctx); err != nil {
			return fmt.Errorf("step %d (%s): %w", i+1, s.title, err)
		}
		after := d.client.Stats()
		fmt.Fprintf(d.out, "   cost: %d requests, %.2f RU\n\n", after.Requests-before.Requests, after.RequestCharge-before.RequestCharge)
	}
	end := d.client.Stats()
	fmt.Fprintf(d.out, "total: %d requests, %.2f RU, %d retries\n", end.Requests-total.Requests, end.RequestCharge-total.RequestCharge, end.Retries-total.Retries)
	if os.Getenv("COSMOS_ENDPOINT") != "" {
		return d.client.DeleteDatabase(ctx, d.db)
	}
	return nil
}

func (d *demo) bootstrap(ctx context.Context) error {
	d.db = "cdb-demo"
	if os.Getenv("COSMOS_ENDPOINT") != "" {
		d.db = fmt.Sprintf("cdb-demo-%d", time.Now().UnixNano())
	}
	if err := d.client.EnsureDatabase(ctx, d.db); err != nil {
		return err
	}
	cc, err := d.client.NewContainer(d.db, "orders")
	if err != nil {
		return err
	}
	policy := cdb.DefaultIndexingPolicy()
	policy.CompositeIndexes = [][]cdb.CompositeIndex{{{Path: "/status", Order: "ascending"}, {Path: "/total", Order: "descending"}}}
	props, err := cc.Ensure(ctx, cdb.ContainerProperties{
		ID:             "orders",
		PartitionKey:   cdb.PartitionKeyDefinition{Paths: []string{"/customer"}, Kind: "Hash", Version: 2},
		IndexingPolicy: &policy,
	})
	if err != nil {
		return err
	}
	d.orders = cc
	fmt.Fprintf(d.out, "   database %q, container %q partitioned by %s\n", d.db, props.ID, props.PartitionKey.Paths[0])
	return nil
}

func customerName(i int) string { return fmt.Sprintf("customer-%02d", i) }

func (d *demo) writeOrders(ctx context.Context, customers, perCustomer int) error {
	for c := 0; c < customers; c++ {
		name := customerName(c)
		batch := d.orders.NewTransactionalBatch(cdb.NewPartitionKeyString(name))
		for o := 0; o < perCustomer; o++ {
			body, err := json.Marshal(demoOrder{ID: fmt.Sprintf("order-%02d", o), Customer: name, Total: (c*7 + o*13) % 100, Status: "new"})
			if err != nil {
				return err
			}
			batch.CreateItem(body, nil)
		}
		resp, err := d.orders.ExecuteTransactionalBatch(ctx, batch, nil)
		if err != nil {
			return err
		}
		if !resp.Success {
			_, failure, _ := resp.FailedOperation()
			return fmt.Errorf("batch for %s failed: %w", name, failure)
		}
	}
	fmt.Fprintf(d.out, "   %d orders in %d batches\n", customers*perCustomer, customers)
	return nil
}

func (d *demo) staleETag(ctx context.Context) error {
	pk := cdb.NewPartitionKeyString(customerName(0))
	read, err := d.orders.ReadItem(ctx, pk, "order-00", nil)
	if err != nil {
		return err
	}
	var o demoOrder
	if err := json.Unmarshal(read.Value, &o); err != nil {
		return err
	}
	o.Status = "paid"
	body, _ := json.Marshal(o)
	if _, err := d.orders.ReplaceItem(ctx, pk, o.ID, body, &cdb.ItemOptions{IfMatch: &read.ETag}); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "   replace with the ETag just read: ok\n")
	_, err = d.orders.ReplaceItem(ctx, pk, o.ID, body, &cdb.ItemOptions{IfMatch: &read.ETag})
	if !cdb.IsPreconditionFailed(err) {
		return fmt.Errorf("want 412 for a stale ETag, got %v", err)
	}
	fmt.Fprintf(d.out, "   replace with the same (now stale) ETag: 412 precondition failed\n")
	return nil
}

func (d *demo) rollback(ctx context.Context) error {
	name := customerName(1)
	batch := d.orders.NewTransactionalBatch(cdb.NewPartitionKeyString(name))
	for _, id := range []string{"extra-1", "extra-2", "order-00"} {
		body, _ := json.Marshal(demoOrder{ID: id, Customer: name, Status: "new"})
		batch.CreateItem(body, nil)
	}
	resp, err := d.orders.ExecuteTransactionalBatch(ctx, batch, nil)
	if err != nil {
		return err
	}
	if resp.Success {
		return errors.New("a batch with a conflicting create committed")
	}
	for i, r := range resp.OperationResults {
		fmt.Fprintf(d.out, "   operation %d: %d\n", i+1, r.StatusCode)
	}
	_, err = d.orders.ReadItem(ctx, cdb.NewPartitionKeyString(name), "extra-1", nil)
	if !cdb.IsNotFound(err) {
		return fmt.Errorf("extra-1 should have been rolled back, read gave %v", err)
	}
	fmt.Fprintf(d.out, "   extra-1 and extra-2 were rolled back\n")
	return nil
}

func (d *demo) pagedQuery(ctx context.Context) error {
	name := customerName(2)
	pk := cdb.NewPartitionKeyString(name)
	res, err := d.orders.QueryItems(ctx,
		"SELECT VALUE {\"id\": c.id, \"total\": c.total} FROM c WHERE c.customer = @customer ORDER BY c.total DESC",
		[]cdb.QueryParameter{{Name: "@customer", Value: name}},
		&cdb.QueryOptions{PartitionKey: &pk, MaxItemCount: 2})
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "   %s's orders by total, %d pages:", name, res.Pages)
	for _, raw := range res.Items {
		fmt.Fprintf(d.out, " %s", raw)
	}
	fmt.Fprintln(d.out)
	return nil
}

func (d *demo) perRangeQuery(ctx context.Context) error {
	const q = "SELECT TOP 3 c.customer, c.id, c.total FROM c WHERE c.status = @status ORDER BY c.status ASC, c.total DESC"
	params := []cdb.QueryParameter{{Name: "@status", Value: "new"}}
	_, err := d.orders.QueryItems(ctx, q, params, nil)
	var ce *cdb.CosmosError
	if errors.As(err, &ce) {
		fmt.Fprintf(d.out, "   as one cross-partition query: %d substatus %d (the gateway cannot serve it)\n", ce.StatusCode, ce.SubStatusCode)
	} else {
		fmt.Fprintf(d.out, "   as one cross-partition query: served (this server does not refuse it, real Cosmos DB does)\n")
	}
	byRange, err := d.orders.QueryItemsPerRange(ctx, q, params, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "   per range (%d ranges), the top 3 of each:\n", len(byRange))
	var candidates []demoOrder
	for _, rangeID := range sortedKeys(byRange) {
		fmt.Fprintf(d.out, "     range %s:", rangeID)
		for _, raw := range byRange[rangeID].Items {
			var o demoOrder
			if err := json.Unmarshal(raw, &o); err != nil {
				return err
			}
			candidates = append(candidates, o)
			fmt.Fprintf(d.out, " %s/%s=%d", o.Customer, o.ID, o.Total)
		}
		fmt.Fprintln(d.out)
	}
	sort.SliceStable(candidates, func(i, j int) bool { return candidates[i].Total > candidates[j].Total })
	fmt.Fprintf(d.out, "   merged on the client, the top 3 overall:")
	for _, o := range candidates[:min(3, len(candidates))] {
		fmt.Fprintf(d.out, " %s/%s=%d", o.Customer, o.ID, o.Total)
	}
	fmt.Fprintln(d.out)
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
