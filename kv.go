package cdb

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
)

// The KV store keeps duroxide's two-stage model (reference §2.12) in an
// instance's partition, written only by the ack's batch (R1):
//
//   - the delta document (`kvd`) holds the current execution's mutations, a
//     nil value being a tombstone; every ack with KV events rewrites it;
//   - the store is spread over kvBuckets bucket documents (`kv|<n>`, by a
//     hash of the key) holding the state as of the last completed
//     execution; a terminal ack (Completed, ContinuedAsNew, Failed) merges
//     the delta into the buckets it touches and empties the delta.
//
// However many keys a turn touches, the ack writes at most kvBuckets + 1 KV
// documents, so a KV-heavy turn still commits in one batch.

const (
	docKVStore = "kv"
	docKVDelta = "kvd"
	kvBuckets  = 16
	kvDeltaID  = "kvd"
)

// kvEntry is one key's value; Value nil in the delta is a tombstone.
type kvEntry struct {
	Key       string  `json:"k"`
	Value     *string `json:"v"`
	UpdatedAt uint64  `json:"t"`
}

// kvDoc is a store bucket or the delta.
type kvDoc struct {
	ID       string    `json:"id"`
	PK       string    `json:"pk"`
	Type     string    `json:"type"`
	Instance string    `json:"instance"`
	Entries  []kvEntry `json:"entries"`
}

func kvBucket(key string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % kvBuckets)
}

func kvBucketID(b int) string { return "kv|" + strconv.Itoa(b) }

// kvState is an instance's store and delta.
type kvState struct {
	store map[string]KVEntry
	delta map[string]kvEntry
}

func newKVState() kvState {
	return kvState{store: map[string]KVEntry{}, delta: map[string]kvEntry{}}
}

func (s kvState) clone() kvState {
	c := newKVState()
	for k, v := range s.store {
		c.store[k] = v
	}
	for k, v := range s.delta {
		c.delta[k] = v
	}
	return c
}

// add folds a KV document into the state.
func (s kvState) add(d kvDoc) {
	for _, e := range d.Entries {
		switch {
		case d.Type == docKVDelta:
			s.delta[e.Key] = e
		case e.Value != nil:
			s.store[e.Key] = KVEntry{Value: *e.Value, LastUpdatedAtMs: e.UpdatedAt}
		}
	}
}

// merged is the client's view: the delta over the store, tombstones hiding
// keys.
func (s kvState) merged() map[string]string {
	out := make(map[string]string, len(s.store)+len(s.delta))
	for k, v := range s.store {
		out[k] = v.Value
	}
	for k, e := range s.delta {
		if e.Value == nil {
			delete(out, k)
		} else {
			out[k] = *e.Value
		}
	}
	return out
}

// snapshot is the fetch's view: the store only, never the delta, so a
// replayed read-modify-write sees what it saw the first time.
func (s kvState) snapshot() map[string]KVEntry {
	out := make(map[string]KVEntry, len(s.store))
	for k, v := range s.store {
		out[k] = v
	}
	return out
}

// applyEvents records a turn's KV events in the delta (reference §2.3 step
// 10) and reports whether there were any.
func (s kvState) applyEvents(delta []Event, now uint64) bool {
	changed := false
	for _, e := range delta {
		switch k := e.Kind.(type) {
		case KeyValueSet:
			v := k.Value
			t := k.LastUpdatedAtMs
			if t == 0 {
				t = now
			}
			s.delta[k.Key] = kvEntry{Key: k.Key, Value: &v, UpdatedAt: t}
			changed = true
		case KeyValueCleared:
			s.delta[k.Key] = kvEntry{Key: k.Key, UpdatedAt: now}
			changed = true
		case KeyValuesCleared:
			for key := range s.delta {
				s.delta[key] = kvEntry{Key: key, UpdatedAt: now}
			}
			for key := range s.store {
				s.delta[key] = kvEntry{Key: key, UpdatedAt: now}
			}
			changed = true
		}
	}
	return changed
}

// merge moves the delta into the store (reference §2.3 step 11) and returns
// the buckets it touched.
func (s kvState) merge() []int {
	touched := map[int]bool{}
	for key, e := range s.delta {
		if e.Value == nil {
			delete(s.store, key)
		} else {
			s.store[key] = KVEntry{Value: *e.Value, LastUpdatedAtMs: e.UpdatedAt}
		}
		touched[kvBucket(key)] = true
		delete(s.delta, key)
	}
	buckets := make([]int, 0, len(touched))
	for b := range touched {
		buckets = append(buckets, b)
	}
	sort.Ints(buckets)
	return buckets
}

// deltaDoc and bucketDoc encode the state's documents.
func (s kvState) deltaDoc(instance, pk string) kvDoc {
	d := kvDoc{ID: kvDeltaID, PK: pk, Type: docKVDelta, Instance: instance, Entries: []kvEntry{}}
	for _, e := range s.delta {
		d.Entries = append(d.Entries, e)
	}
	sort.Slice(d.Entries, func(i, j int) bool { return d.Entries[i].Key < d.Entries[j].Key })
	return d
}

func (s kvState) bucketDoc(instance, pk string, b int) kvDoc {
	d := kvDoc{ID: kvBucketID(b), PK: pk, Type: docKVStore, Instance: instance, Entries: []kvEntry{}}
	for k, v := range s.store {
		if kvBucket(k) == b {
			value := v.Value
			d.Entries = append(d.Entries, kvEntry{Key: k, Value: &value, UpdatedAt: v.LastUpdatedAtMs})
		}
	}
	sort.Slice(d.Entries, func(i, j int) bool { return d.Entries[i].Key < d.Entries[j].Key })
	return d
}

// isTerminalStatus says whether a status ends an execution (and so merges
// its KV delta).
func isTerminalStatus(status *InstanceStatus) bool {
	return status != nil && status.IsTerminal()
}

// readKV reads an instance's KV documents with one single-partition query.
func (p *CosmosProvider) readKV(ctx context.Context, instance string) (kvState, error) {
	pk := instancePartitionKey(instance)
	key := NewPartitionKeyString(pk)
	res, err := p.container.QueryItems(ctx, "SELECT * FROM c WHERE c.pk = @pk AND (c.type = @kv OR c.type = @kvd)",
		[]QueryParameter{{Name: "@pk", Value: pk}, {Name: "@kv", Value: docKVStore}, {Name: "@kvd", Value: docKVDelta}},
		&QueryOptions{PartitionKey: &key})
	if err != nil {
		return kvState{}, err
	}
	s := newKVState()
	for _, raw := range res.Items {
		var d kvDoc
		if err := json.Unmarshal(raw, &d); err != nil {
			return kvState{}, fmt.Errorf("decode KV document: %w", err)
		}
		s.add(d)
	}
	return s, nil
}

// GetKVValue reads a key from the merged view (delta over store).
func (p *CosmosProvider) GetKVValue(ctx context.Context, instance, key string) (string, bool, error) {
	const op = "GetKVValue"
	if err := validateInstanceID(op, instance); err != nil {
		return "", false, err
	}
	s, err := p.readKV(ctx, instance)
	if err != nil {
		return "", false, wrap(op, err)
	}
	v, ok := s.merged()[key]
	return v, ok, nil
}

// GetKVAllValues reads every key of the merged view.
func (p *CosmosProvider) GetKVAllValues(ctx context.Context, instance string) (map[string]string, error) {
	const op = "GetKVAllValues"
	if err := validateInstanceID(op, instance); err != nil {
		return nil, err
	}
	s, err := p.readKV(ctx, instance)
	if err != nil {
		return nil, wrap(op, err)
	}
	return s.merged(), nil
}
