package cosmostest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// vercelWorkarounds adapts requests written to the real protocol to two bugs
// of @vercel/cosmosdb-server 1.0.1 (reference B):
//
//   - a point read of a missing document answers 500 unless the request
//     carries the cross-partition header, which real Cosmos DB ignores there;
//   - batch operations other than Create need a per-operation "partitionKey"
//     field, which the real service takes from the request header;
//   - partition key range ids come back as JSON numbers, where the real
//     service sends strings.
type vercelWorkarounds struct {
	next http.RoundTripper
}

func (w vercelWorkarounds) RoundTrip(req *http.Request) (*http.Response, error) {
	switch {
	case isPointRead(req):
		req = req.Clone(req.Context())
		req.Header.Set("x-ms-documentdb-query-enablecrosspartition", "True")
	case strings.EqualFold(req.Header.Get("x-ms-cosmos-is-batch-request"), "true"):
		patched, err := withPerOperationPartitionKey(req)
		if err != nil {
			return nil, err
		}
		req = patched
	}
	resp, err := w.next.RoundTrip(req)
	if err != nil || !isPartitionKeyRangesRead(req) || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	return withStringRangeIDs(resp)
}

func isPartitionKeyRangesRead(req *http.Request) bool {
	return req.Method == http.MethodGet && strings.HasSuffix(req.URL.EscapedPath(), "/pkranges")
}

// withStringRangeIDs rewrites {"PartitionKeyRanges":[{"id":0,...}]} so each
// id is the string the real service sends.
func withStringRangeIDs(resp *http.Response) (*http.Response, error) {
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("vercel workaround: read pkranges: %w", err)
	}
	var feed map[string]json.RawMessage
	if err := json.Unmarshal(body, &feed); err != nil {
		return nil, fmt.Errorf("vercel workaround: decode pkranges: %w", err)
	}
	var ranges []map[string]json.RawMessage
	if err := json.Unmarshal(feed["PartitionKeyRanges"], &ranges); err != nil {
		return nil, fmt.Errorf("vercel workaround: decode pkranges: %w", err)
	}
	for _, r := range ranges {
		if id := r["id"]; len(id) > 0 && id[0] != '"' {
			r["id"], _ = json.Marshal(string(id))
		}
	}
	if feed["PartitionKeyRanges"], err = json.Marshal(ranges); err != nil {
		return nil, err
	}
	if body, err = json.Marshal(feed); err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return resp, nil
}

func isPointRead(req *http.Request) bool {
	if req.Method != http.MethodGet {
		return false
	}
	segs := strings.Split(strings.Trim(req.URL.EscapedPath(), "/"), "/")
	return len(segs) == 6 && segs[4] == "docs"
}

// withPerOperationPartitionKey copies the request and adds the partition key
// header's value to every batch operation that lacks one.
func withPerOperationPartitionKey(req *http.Request) (*http.Request, error) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, fmt.Errorf("vercel workaround: read batch body: %w", err)
	}
	_ = req.Body.Close()
	var ops []map[string]json.RawMessage
	if err := json.Unmarshal(body, &ops); err != nil {
		return nil, fmt.Errorf("vercel workaround: decode batch body: %w", err)
	}
	pk, err := json.Marshal(req.Header.Get("x-ms-documentdb-partitionkey"))
	if err != nil {
		return nil, err
	}
	for _, op := range ops {
		if _, ok := op["partitionKey"]; !ok {
			op["partitionKey"] = pk
		}
	}
	patched, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("vercel workaround: encode batch body: %w", err)
	}
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(patched))
	out.ContentLength = int64(len(patched))
	out.Header.Set("Content-Length", strconv.Itoa(len(patched)))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(patched)), nil }
	return out, nil
}
