package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/duroxide-go/cdb"
)

// The transactional batch and PATCH steps of `cdb doctor` (doctor.go): the
// provider commits every turn as one batch of up to 100 operations and
// about 2 MB, and takes its locks with conditional PATCHes.

// itemJSON is a small item of partition pk.
func itemJSON(id, pk string, fields string) []byte {
	s := `{"id":"` + id + `","pk":"` + pk + `"`
	if fields != "" {
		s += "," + fields
	}
	return []byte(s + "}")
}

// batchOperations runs every kind of batch operation in one batch.
func (d *doctor) batchOperations(ctx context.Context) stepOutcome {
	const pkValue = "doctor-batch"
	pk := cdb.NewPartitionKeyString(pkValue)
	var cond cdb.PatchOperations
	cond.AppendSet("/v", 2)
	cond.SetCondition("from c where c.v = 0")
	b := d.container.NewTransactionalBatch(pk)
	b.CreateItem(itemJSON("a", pkValue, `"v":0`), nil)
	b.CreateItem(itemJSON("b", pkValue, `"v":0`), nil)
	b.UpsertItem(itemJSON("c", pkValue, `"v":0`), nil)
	b.ReadItem("a", nil)
	b.ReplaceItem("b", itemJSON("b", pkValue, `"v":1`), nil)
	b.PatchItem("c", cond, nil)
	b.DeleteItem("a", nil)
	resp, err := d.container.ExecuteTransactionalBatch(ctx, b, nil)
	const meaning = "the service does not run the provider's batches as it relies on: turns cannot commit"
	if err != nil {
		return failed(err, "a batch of create, upsert, read, replace, conditional patch and delete", meaning, "")
	}
	want := []int{201, 201, 201, 200, 200, 200, 204}
	if got := batchStatuses(resp); !resp.Success || !slices.Equal(got, want) {
		return failed(nil, fmt.Sprintf("a batch of every operation answered %v, not %v", got, want), meaning, "report it with this line")
	}
	if resp.OperationResults[3].ResourceBody == nil {
		return failed(nil, "the batch's read answered no body", meaning, "report it with this line")
	}
	for _, i := range []int{0, 1, 2, 4, 5} {
		if resp.OperationResults[i].ETag == "" {
			return failed(nil, fmt.Sprintf("the batch's write %d answered no eTag", i), meaning, "report it with this line")
		}
	}
	return passed("create, create, upsert, read, replace, conditional patch and delete in one batch answered %v", want)
}

// batchAtomicity sends a batch whose second operation fails: it must
// apply nothing, and answer 207 with the failure's status and 424 for the
// others, as a provider's turn relies on.
func (d *doctor) batchAtomicity(ctx context.Context) stepOutcome {
	const pkValue = "doctor-atomic"
	pk := cdb.NewPartitionKeyString(pkValue)
	if _, err := d.container.CreateItem(ctx, pk, itemJSON("b", pkValue, ""), nil); err != nil {
		return failed(err, "create an item", "", "")
	}
	bad := d.container.NewTransactionalBatch(pk)
	bad.CreateItem(itemJSON("a", pkValue, ""), nil)
	bad.CreateItem(itemJSON("b", pkValue, ""), nil) // exists: 409
	resp, err := d.container.ExecuteTransactionalBatch(ctx, bad, nil)
	const meaning = "the service's failed batches do not fail as a whole: a turn could commit in part"
	if err != nil {
		return failed(err, "a batch whose second create conflicts", meaning, "")
	}
	answered := fmt.Sprintf("a batch whose second create conflicts answered %d %v", resp.StatusCode, batchStatuses(resp))
	_, err = d.container.ReadItem(ctx, pk, "a", nil)
	switch {
	case err == nil:
		return d.lacks(answered+" and kept its first create", "atomic batches")
	case !cdb.IsNotFound(err):
		return failed(err, "read the failed batch's first item", "", "")
	}
	index, opErr := resp.FailedOperation()
	if resp.Success || index != 1 || !cdb.IsConflict(opErr) || resp.OperationResults[0].StatusCode != http.StatusFailedDependency {
		return failed(nil, answered, meaning, "report it with this line")
	}
	return passed("%s and applied nothing", answered)
}

func batchStatuses(resp cdb.TransactionalBatchResponse) []int {
	out := make([]int, len(resp.OperationResults))
	for i, r := range resp.OperationResults {
		out[i] = r.StatusCode
	}
	return out
}

// createBatch is a batch of n creates in partition pkValue.
func createBatch(cc *cdb.ContainerClient, pkValue string, n int) *cdb.TransactionalBatch {
	b := cc.NewTransactionalBatch(cdb.NewPartitionKeyString(pkValue))
	for i := range n {
		b.CreateItem(itemJSON(fmt.Sprintf("%s-%03d", pkValue, i), pkValue, ""), nil)
	}
	return b
}

// batch100 sends the largest batch the provider sends: 100 operations.
func (d *doctor) batch100(ctx context.Context) stepOutcome {
	resp, err := d.container.ExecuteTransactionalBatch(ctx, createBatch(d.container, "doctor-b100", cdb.MaxBatchOperations), nil)
	const meaning = "the service refuses batches the provider sends: large turns cannot commit"
	if err != nil {
		return failed(err, "a batch of 100 creates", meaning, "")
	}
	if !resp.Success || len(resp.OperationResults) != cdb.MaxBatchOperations {
		return failed(nil, fmt.Sprintf("a batch of 100 creates answered %d with %d results", resp.StatusCode, len(resp.OperationResults)), meaning, "report it with this line")
	}
	return passed("a batch of 100 creates committed")
}

// batch101 checks the limit from both sides: the client refuses 101
// operations before sending, and the service refuses them too (a probe
// client adds the 101st operation on the wire).
func (d *doctor) batch101(ctx context.Context) stepOutcome {
	_, err := d.container.ExecuteTransactionalBatch(ctx, createBatch(d.container, "doctor-b101", cdb.MaxBatchOperations+1), nil)
	if !errors.Is(err, cdb.ErrBatchTooManyOperations) {
		return failed(err, "the client did not refuse a batch of 101 operations", "the client would send batches the service refuses", "report it with this line")
	}
	probe, err := d.probeClient()
	if err != nil {
		return failed(err, "build the probe client", "", "")
	}
	cc, err := probe.NewContainer(d.cfg.Database, d.cfg.Container)
	if err != nil {
		return failed(err, "the probe's container", "", "")
	}
	_, err = cc.ExecuteTransactionalBatch(ctx, createBatch(cc, "doctor-b101", cdb.MaxBatchOperations), nil)
	var ce *cdb.CosmosError
	switch {
	case cdb.HasStatus(err, http.StatusBadRequest):
		_, sub, _ := cdb.StoreStatus(err)
		return passed("the client refuses 101 operations itself (ErrBatchTooManyOperations); sent on the wire, the service refused them with 400/%d", sub)
	case errors.As(err, &ce) && ce.StatusCode >= 200 && ce.StatusCode < 300:
		// The client reports the answer to 101 operations as a mismatch.
		return d.lacks(fmt.Sprintf("101 operations on the wire answered %d", ce.StatusCode), "the limit of 100 operations per batch "+
			"(the client enforces it itself, ErrBatchTooManyOperations, so the provider never sends more)")
	case err != nil:
		return failed(err, "101 operations on the wire", "", "")
	}
	return failed(nil, "the probe's batch of 101 operations answered no error",
		"the doctor's probe did not add the 101st operation", "report it with this line")
}

// probeClient is a client whose transport adds one Read to every batch it
// sends: the only way to send what the client itself refuses. The
// signature covers no body, so the service sees a well-formed request.
func (d *doctor) probeClient() (*cdb.Client, error) {
	opts := d.cfg.ClientOptions
	base, err := probeTransport(opts.TLS)
	if err != nil {
		return nil, err
	}
	opts.TLS = cdb.TLSOptions{}
	opts.Transport = batchExtender{base: base, extra: json.RawMessage(`{"operationType":"Read","id":"doctor-b101-000"}`)}
	opts.Key = d.cfg.Key
	return cdb.NewClient(d.cfg.Endpoint, opts)
}

// probeTransport is a transport with the TLS settings of the doctor's
// client.
func probeTransport(o cdb.TLSOptions) (*http.Transport, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: o.RootCAs, InsecureSkipVerify: o.InsecureSkipVerify}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", cdb.EnvCAFile, err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if o.RootCAs != nil {
			pool = o.RootCAs.Clone()
		}
		pool.AppendCertsFromPEM(pem)
		cfg.RootCAs = pool
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = cfg
	return t, nil
}

// batchExtender appends extra to the operations of every batch request.
type batchExtender struct {
	base  http.RoundTripper
	extra json.RawMessage
}

func (e batchExtender) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.EqualFold(req.Header.Get("x-ms-cosmos-is-batch-request"), "true") || req.Body == nil {
		return e.base.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("probe: read the batch: %w", err)
	}
	var ops []json.RawMessage
	if err := json.Unmarshal(body, &ops); err != nil {
		return nil, fmt.Errorf("probe: decode the batch: %w", err)
	}
	if body, err = json.Marshal(append(ops, e.extra)); err != nil {
		return nil, fmt.Errorf("probe: encode the batch: %w", err)
	}
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return e.base.RoundTrip(out)
}

// batchNearLimit is the body size of the near-2 MB batch: the provider
// keeps this much slack under the service's limit.
const batchNearLimit = cdb.MaxBatchBytes - 32*1024

// batchNear2MB commits a batch whose body is about 2 MB less the
// provider's slack, in two items of about 1 MB.
func (d *doctor) batchNear2MB(ctx context.Context) stepOutcome {
	const pkValue, items = "doctor-big", 2
	b := d.container.NewTransactionalBatch(cdb.NewPartitionKeyString(pkValue))
	total := 0
	for i := range items {
		id := fmt.Sprintf("doctor-big-%d", i)
		// Each operation's envelope: {"operationType":"Create","resourceBody":...}, and a comma.
		fill := batchNearLimit/items - len(itemJSON(id, pkValue, `"data":""`)) - len(`{"operationType":"Create","resourceBody":},`)
		item := itemJSON(id, pkValue, `"data":"`+strings.Repeat("x", fill)+`"`)
		total += len(item) + len(`{"operationType":"Create","resourceBody":},`)
		b.CreateItem(item, nil)
	}
	resp, err := d.container.ExecuteTransactionalBatch(ctx, b, nil)
	detail := fmt.Sprintf("a batch of %d creates, a body of about %d bytes (2 MiB less 32 KiB)", items, total)
	const meaning = "the service refuses a batch as large as the provider may send: large turns cannot commit"
	if err != nil {
		return failed(err, detail, meaning, "")
	}
	if !resp.Success {
		return failed(nil, fmt.Sprintf("%s answered %d %v", detail, resp.StatusCode, batchStatuses(resp)), meaning, "report it with this line")
	}
	return passed("%s committed", detail)
}

// patch applies every PATCH operation under a condition that holds, with
// a double-quoted \u-escaped literal as the provider writes them, then the
// same condition, now false: 412, as the provider's locks rely on.
func (d *doctor) patch(ctx context.Context) stepOutcome {
	const id = "doctor-patch"
	pk := cdb.NewPartitionKeyString(id)
	if _, err := d.container.CreateItem(ctx, pk, itemJSON(id, id, `"a":1,"s":"x","obj":{"k":"v","keep":true},"n":5,"old":"o"`), nil); err != nil {
		return failed(err, "create the item", "", "")
	}
	var ops cdb.PatchOperations
	ops.AppendAdd("/added", "new")
	ops.AppendSet("/s", "y")
	ops.AppendReplace("/a", 2)
	ops.AppendRemove("/obj/k")
	ops.AppendIncrement("/n", 3)
	ops.AppendMove("/old", "/moved")
	ops.AppendSet("/ttl", -1)
	ops.SetCondition(`from c where c.a = 1 AND c.s = "\u0078"`)
	const meaning = "the service does not apply the provider's PATCHes as it relies on: locks and queues fail"
	if _, err := d.container.PatchItem(ctx, pk, id, ops, nil); err != nil {
		return failed(err, "add, set, replace, remove, incr, move under a true condition", meaning, "")
	}
	read, err := d.container.ReadItem(ctx, pk, id, nil)
	if err != nil {
		return failed(err, "read the patched item", "", "")
	}
	var got map[string]any
	if err := json.Unmarshal(read.Value, &got); err != nil {
		return failed(err, "decode the patched item", "", "")
	}
	want := map[string]any{"added": "new", "s": "y", "a": 2.0, "obj": map[string]any{"keep": true}, "n": 8.0, "moved": "o", "ttl": -1.0}
	for k, v := range want {
		if fmt.Sprint(got[k]) != fmt.Sprint(v) {
			return failed(nil, fmt.Sprintf("after the PATCH %s is %v, not %v", k, got[k], v), meaning, "report it with this line")
		}
	}
	if _, ok := got["old"]; ok {
		return failed(nil, "after the PATCH's move, /old is still there", meaning, "report it with this line")
	}
	_, err = d.container.PatchItem(ctx, pk, id, ops, nil)
	if !cdb.IsPreconditionFailed(err) {
		return failed(err, "the same PATCH under its now false condition did not answer 412", meaning, "report it with this line")
	}
	return passed("add, set, replace, remove, incr, move and set /ttl -1 applied under a true condition; the same condition, now false, answered 412")
}

// largestItemBytes is the largest document the provider writes: a staged
// outbox part leaves 8 KiB of the 2 MiB limit free for the system
// properties the service adds (partSlack in the library's ack_writer.go).
const largestItemBytes = cdb.MaxDocumentBytes - 8*1024

// largestItem writes one item of the provider's largest size and reads it
// back whole: a service (or a proxy on the way) that refuses or cuts such
// a document would fail a large turn's commit.
func (d *doctor) largestItem(ctx context.Context) stepOutcome {
	const id = "doctor-largest"
	pk := cdb.NewPartitionKeyString(id)
	fill := largestItemBytes - len(itemJSON(id, id, `"data":""`))
	item := itemJSON(id, id, `"data":"`+strings.Repeat("x", fill)+`"`)
	detail := fmt.Sprintf("an item of %d bytes (2 MiB less 8 KiB, the provider's largest)", len(item))
	const meaning = "the service refuses or alters a document as large as the provider writes: large outputs and turns cannot commit"
	if _, err := d.container.CreateItem(ctx, pk, item, nil); err != nil {
		return failed(err, detail, meaning, "")
	}
	read, err := d.container.ReadItem(ctx, pk, id, nil)
	if err != nil {
		return failed(err, detail+" was written; reading it back", meaning, "")
	}
	var back struct {
		Data string `json:"data"`
	}
	if err := json.Unmarshal(read.Value, &back); err != nil || len(back.Data) != fill || strings.Trim(back.Data, "x") != "" {
		return failed(err, fmt.Sprintf("%s read back as %d bytes, its data %d of %d", detail, len(read.Value), len(back.Data), fill),
			meaning, "report it with this line")
	}
	return passed("%s was written and read back whole (%d bytes with the service's properties)", detail, len(read.Value))
}
