package sdkcompat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type order struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Total    int    `json:"total"`
	Status   string `json:"status"`
}

func (o order) json(t *testing.T) []byte {
	t.Helper()
	b, err := json.Marshal(o)
	require.NoError(t, err)
	return b
}

func newSDKClient(t *testing.T, e emulator) *azcosmos.Client {
	t.Helper()
	cred, err := azcosmos.NewKeyCredential(e.key)
	require.NoError(t, err)
	c, err := azcosmos.NewClientWithKey(e.endpoint, cred, nil)
	require.NoError(t, err)
	return c
}

// newOrdersContainer creates database db and container orders (pk /customer)
// through the SDK.
func newOrdersContainer(ctx context.Context, t *testing.T, c *azcosmos.Client) *azcosmos.ContainerClient {
	t.Helper()
	_, err := c.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "shop"}, nil)
	require.NoError(t, err, "create database")
	db, err := c.NewDatabase("shop")
	require.NoError(t, err)
	_, err = db.CreateContainer(ctx, azcosmos.ContainerProperties{
		ID:                     "orders",
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/customer"}},
	}, nil)
	require.NoError(t, err, "create container")
	cc, err := c.NewContainer("shop", "orders")
	require.NoError(t, err)
	return cc
}

func statusOf(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

func TestSDKDatabasesAndContainers(t *testing.T) {
	ctx := context.Background()
	c := newSDKClient(t, startEmulator(t))
	cc := newOrdersContainer(ctx, t, c)

	_, err := c.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "shop"}, nil)
	assert.Equal(t, http.StatusConflict, statusOf(err), "creating an existing database")

	db, err := c.NewDatabase("shop")
	require.NoError(t, err)
	dbResp, err := db.Read(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, "shop", dbResp.DatabaseProperties.ID)

	props, err := cc.Read(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"/customer"}, props.ContainerProperties.PartitionKeyDefinition.Paths)

	_, err = cc.Delete(ctx, nil)
	require.NoError(t, err)
	_, err = cc.Read(ctx, nil)
	assert.Equal(t, http.StatusNotFound, statusOf(err), "reading a deleted container")

	_, err = db.Delete(ctx, nil)
	require.NoError(t, err)
	_, err = db.Read(ctx, nil)
	assert.Equal(t, http.StatusNotFound, statusOf(err), "reading a deleted database")
}

// The SDK's ReadThroughput (an offers query for the resource's _rid, then
// a read of the offer by its own rid, signed lower-cased) reads what
// CreateContainer and CreateDatabase provisioned, and the 400 RU/s a
// container created without throughput gets.
func TestSDKThroughput(t *testing.T) {
	ctx := context.Background()
	c := newSDKClient(t, startEmulator(t))
	autoscale := azcosmos.NewAutoscaleThroughputProperties(4000)
	_, err := c.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "shared"}, &azcosmos.CreateDatabaseOptions{ThroughputProperties: &autoscale})
	require.NoError(t, err)
	shared, err := c.NewDatabase("shared")
	require.NoError(t, err)
	got, err := shared.ReadThroughput(ctx, nil)
	require.NoError(t, err)
	maxRU, ok := got.ThroughputProperties.AutoscaleMaxThroughput()
	assert.True(t, ok)
	assert.EqualValues(t, 4000, maxRU)

	cc := newOrdersContainer(ctx, t, c)
	got, err = cc.ReadThroughput(ctx, nil)
	require.NoError(t, err)
	ru, ok := got.ThroughputProperties.ManualThroughput()
	assert.True(t, ok)
	assert.EqualValues(t, 400, ru, "a provisioned account's default")

	db, err := c.NewDatabase("shop")
	require.NoError(t, err)
	manual := azcosmos.NewManualThroughputProperties(1000)
	_, err = db.CreateContainer(ctx, azcosmos.ContainerProperties{
		ID: "invoices", PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Paths: []string{"/customer"}},
	}, &azcosmos.CreateContainerOptions{ThroughputProperties: &manual})
	require.NoError(t, err)
	invoices, err := c.NewContainer("shop", "invoices")
	require.NoError(t, err)
	got, err = invoices.ReadThroughput(ctx, nil)
	require.NoError(t, err)
	ru, ok = got.ThroughputProperties.ManualThroughput()
	assert.True(t, ok)
	assert.EqualValues(t, 1000, ru)
}

// On a serverless account the SDK's ReadThroughput gets the service's 400.
func TestSDKThroughputOnServerless(t *testing.T) {
	ctx := context.Background()
	c := newSDKClient(t, startEmulator(t, "-serverless"))
	cc := newOrdersContainer(ctx, t, c)
	_, err := cc.ReadThroughput(ctx, nil)
	assert.Equal(t, http.StatusBadRequest, statusOf(err))
	assert.Contains(t, err.Error(), "Reading or replacing offers is not supported for serverless accounts.")
}

func TestSDKItemCRUDWithETags(t *testing.T) {
	ctx := context.Background()
	cc := newOrdersContainer(ctx, t, newSDKClient(t, startEmulator(t)))
	pk := azcosmos.NewPartitionKeyString("alice")
	o := order{ID: "o1", Customer: "alice", Total: 10, Status: "new"}

	created, err := cc.CreateItem(ctx, pk, o.json(t), nil)
	require.NoError(t, err)
	require.NotEmpty(t, created.ETag)

	_, err = cc.CreateItem(ctx, pk, o.json(t), nil)
	assert.Equal(t, http.StatusConflict, statusOf(err), "creating the same id twice")

	read, err := cc.ReadItem(ctx, pk, "o1", nil)
	require.NoError(t, err)
	var got order
	require.NoError(t, json.Unmarshal(read.Value, &got))
	assert.Equal(t, o, got)
	assert.Equal(t, created.ETag, read.ETag)

	o.Status = "paid"
	replaced, err := cc.ReplaceItem(ctx, pk, "o1", o.json(t), &azcosmos.ItemOptions{IfMatchEtag: &created.ETag})
	require.NoError(t, err)
	assert.NotEqual(t, created.ETag, replaced.ETag, "a write must change the etag")

	_, err = cc.ReplaceItem(ctx, pk, "o1", o.json(t), &azcosmos.ItemOptions{IfMatchEtag: &created.ETag})
	assert.Equal(t, http.StatusPreconditionFailed, statusOf(err), "replace with a stale etag")

	_, err = cc.DeleteItem(ctx, pk, "o1", &azcosmos.ItemOptions{IfMatchEtag: &created.ETag})
	assert.Equal(t, http.StatusPreconditionFailed, statusOf(err), "delete with a stale etag")
	_, err = cc.DeleteItem(ctx, pk, "o1", &azcosmos.ItemOptions{IfMatchEtag: &replaced.ETag})
	require.NoError(t, err)
	_, err = cc.ReadItem(ctx, pk, "o1", nil)
	assert.Equal(t, http.StatusNotFound, statusOf(err), "reading a deleted item")
}

func TestSDKUpsert(t *testing.T) {
	ctx := context.Background()
	cc := newOrdersContainer(ctx, t, newSDKClient(t, startEmulator(t)))
	pk := azcosmos.NewPartitionKeyString("bob")
	o := order{ID: "o2", Customer: "bob", Total: 5, Status: "new"}

	first, err := cc.UpsertItem(ctx, pk, o.json(t), nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, first.RawResponse.StatusCode)

	o.Total = 6
	second, err := cc.UpsertItem(ctx, pk, o.json(t), nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, second.RawResponse.StatusCode)

	read, err := cc.ReadItem(ctx, pk, "o2", nil)
	require.NoError(t, err)
	var got order
	require.NoError(t, json.Unmarshal(read.Value, &got))
	assert.Equal(t, 6, got.Total)
}

func TestSDKPatch(t *testing.T) {
	ctx := context.Background()
	cc := newOrdersContainer(ctx, t, newSDKClient(t, startEmulator(t)))
	pk := azcosmos.NewPartitionKeyString("carol")
	_, err := cc.CreateItem(ctx, pk, order{ID: "o3", Customer: "carol", Total: 1, Status: "new"}.json(t), nil)
	require.NoError(t, err)

	ops := azcosmos.PatchOperations{}
	ops.AppendSet("/status", "shipped")
	ops.AppendIncrement("/total", 41)
	patched, err := cc.PatchItem(ctx, pk, "o3", ops, &azcosmos.ItemOptions{EnableContentResponseOnWrite: true})
	require.NoError(t, err)
	var got order
	require.NoError(t, json.Unmarshal(patched.Value, &got))
	assert.Equal(t, order{ID: "o3", Customer: "carol", Total: 42, Status: "shipped"}, got)

	conditional := azcosmos.PatchOperations{}
	conditional.SetCondition("from c where c.status = 'new'")
	conditional.AppendSet("/status", "cancelled")
	_, err = cc.PatchItem(ctx, pk, "o3", conditional, nil)
	assert.Equal(t, http.StatusPreconditionFailed, statusOf(err), "patch whose condition is false")
}

func TestSDKTransactionalBatch(t *testing.T) {
	ctx := context.Background()
	cc := newOrdersContainer(ctx, t, newSDKClient(t, startEmulator(t)))
	pk := azcosmos.NewPartitionKeyString("dave")

	batch := cc.NewTransactionalBatch(pk)
	batch.CreateItem(order{ID: "a", Customer: "dave", Total: 1}.json(t), nil)
	batch.CreateItem(order{ID: "b", Customer: "dave", Total: 2}.json(t), nil)
	batch.ReadItem("a", nil)
	resp, err := cc.ExecuteTransactionalBatch(ctx, batch, nil)
	require.NoError(t, err)
	require.True(t, resp.Success)
	require.Len(t, resp.OperationResults, 3)
	assert.EqualValues(t, http.StatusCreated, resp.OperationResults[0].StatusCode)
	assert.EqualValues(t, http.StatusOK, resp.OperationResults[2].StatusCode)

	failing := cc.NewTransactionalBatch(pk)
	failing.CreateItem(order{ID: "c", Customer: "dave"}.json(t), nil)
	failing.CreateItem(order{ID: "a", Customer: "dave"}.json(t), nil) // conflicts
	resp, err = cc.ExecuteTransactionalBatch(ctx, failing, nil)
	require.NoError(t, err)
	assert.False(t, resp.Success)
	require.Len(t, resp.OperationResults, 2)
	assert.EqualValues(t, http.StatusFailedDependency, resp.OperationResults[0].StatusCode)
	assert.EqualValues(t, http.StatusConflict, resp.OperationResults[1].StatusCode)
	_, err = cc.ReadItem(ctx, pk, "c", nil)
	assert.Equal(t, http.StatusNotFound, statusOf(err), "a rolled-back batch must leave nothing behind")
}

func TestSDKPagedQueries(t *testing.T) {
	ctx := context.Background()
	cc := newOrdersContainer(ctx, t, newSDKClient(t, startEmulator(t, "-ranges", "4")))
	customers := []string{"erin", "frank", "grace"}
	want := map[string][]string{}
	for i := 0; i < 30; i++ {
		cust := customers[i%len(customers)]
		o := order{ID: fmt.Sprintf("q%02d", i), Customer: cust, Total: i}
		_, err := cc.CreateItem(ctx, azcosmos.NewPartitionKeyString(cust), o.json(t), nil)
		require.NoError(t, err)
		want[cust] = append(want[cust], o.ID)
	}

	t.Run("single partition with ORDER BY", func(t *testing.T) {
		pager := cc.NewQueryItemsPager(
			"SELECT * FROM c WHERE c.customer = @c AND c.total >= @min ORDER BY c.total DESC",
			azcosmos.NewPartitionKeyString("erin"),
			&azcosmos.QueryOptions{PageSizeHint: 3, QueryParameters: []azcosmos.QueryParameter{{Name: "@c", Value: "erin"}, {Name: "@min", Value: 0}}},
		)
		var ids []string
		pages := 0
		for pager.More() {
			page, err := pager.NextPage(ctx)
			require.NoError(t, err)
			pages++
			for _, item := range page.Items {
				var o order
				require.NoError(t, json.Unmarshal(item, &o))
				ids = append(ids, o.ID)
			}
		}
		assert.Greater(t, pages, 1, "10 items at 3 a page must take several pages")
		expected := append([]string(nil), want["erin"]...)
		sort.Sort(sort.Reverse(sort.StringSlice(expected)))
		assert.Equal(t, expected, ids)
	})

	t.Run("cross partition filter", func(t *testing.T) {
		pager := cc.NewQueryItemsPager("SELECT VALUE c.id FROM c WHERE c.total < @n", azcosmos.NewPartitionKey(),
			&azcosmos.QueryOptions{PageSizeHint: 4, QueryParameters: []azcosmos.QueryParameter{{Name: "@n", Value: 30}}})
		var ids []string
		for pager.More() {
			page, err := pager.NextPage(ctx)
			require.NoError(t, err)
			for _, item := range page.Items {
				var id string
				require.NoError(t, json.Unmarshal(item, &id))
				ids = append(ids, id)
			}
		}
		sort.Strings(ids)
		var all []string
		for _, v := range want {
			all = append(all, v...)
		}
		sort.Strings(all)
		assert.Equal(t, all, ids)
	})
}

func TestSDKWrongKeyIsRefused(t *testing.T) {
	e := startEmulator(t)
	e.key = "dGhpcyBpcyBub3QgdGhlIGtleSB0aGUgZW11bGF0b3IgdXNlcw=="
	c := newSDKClient(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: "nope"}, nil)
	// The SDK's first request reads the account (GET /); it reports that
	// failure with %v, so the status is only in the text.
	require.Error(t, err)
	assert.Contains(t, err.Error(), "401")
}
