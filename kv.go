package cdb

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
)

// The KV store keeps duroxide's two-stage model (a delta during an
// execution, merged into the store when it ends) in an instance's
// partition, written only by the ack's batch, with every
// document bounded whatever the KV state within duroxide's limits (150
// keys of 64 KB: about 10 MB):
//
//   - the delta (the current execution's mutations, a nil value being a
//     tombstone) is not written anywhere of its own: it is the execution's
//     KV events after the execution document's kvMerged, which the history
//     holds already (staged in parts when large). History documents
//     count their KV events (kv), so a client read loads only the turns
//     that have some. Written once, a turn's values cost the commit nothing
//     more; a delta rewritten whole by each turn had no bound.
//   - the store (the state as of the last completed execution) is spread
//     over kvBuckets buckets by a hash of the key; a terminal ack
//     (Completed, ContinuedAsNew, Failed) merges the delta into the
//     buckets it touches, writing each touched bucket anew in chunk
//     documents of at most maxKVChunkBytes (`kv|<bucket>|<ack token>|<n>`),
//     deleting the bucket's previous chunks and recording kvMerged, in its
//     batch. Chunks go into the batch while they are small, and are staged
//     before it like history parts otherwise; a staged chunk the commit did
//     not make permanent is no part of the store.
//
// An instance written before the delta moved into the history may hold a
// delta document (`kvd`): it is the delta as of that version's last turn,
// which the execution's later KV events follow, and the next merge deletes
// it.

const (
	docKVStore = "kv"
	docKVDelta = "kvd"
	kvBuckets  = 16
	kvDeltaID  = "kvd"

	// maxKVChunkBytes bounds a store chunk's entries, as a history part's.
	maxKVChunkBytes = maxHistoryPartBytes
	// stageKVAbove is the size of a merge's chunks from which they are
	// staged rather than written in the batch.
	stageKVAbove = 512 * 1024
)

// kvEntry is one key's value; Value nil in the delta is a tombstone.
type kvEntry struct {
	Key       string  `json:"k"`
	Value     *string `json:"v"`
	UpdatedAt uint64  `json:"t"`
}

// kvDoc is a store chunk (or a legacy bucket, `kv|<n>`), or a legacy delta.
type kvDoc struct {
	ID       string    `json:"id"`
	PK       string    `json:"pk"`
	Type     string    `json:"type"`
	Instance string    `json:"instance"`
	Entries  []kvEntry `json:"entries"`
	TTL      int       `json:"ttl,omitempty"` // set while staged, or by a retention
	Retained bool      `json:"retained,omitempty"`
}

func kvBucket(key string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % kvBuckets)
}

// kvChunkBucket is the bucket of a store document from its id:
// `kv|<bucket>` (legacy) or `kv|<bucket>|<ack token>|<n>`.
func kvChunkBucket(id string) (int, error) {
	fields := strings.Split(id, "|")
	if len(fields) < 2 || fields[0] != "kv" {
		return 0, fmt.Errorf("KV document %q is no store chunk", id)
	}
	b, err := strconv.Atoi(fields[1])
	if err != nil || b < 0 || b >= kvBuckets {
		return 0, fmt.Errorf("KV document %q names no bucket", id)
	}
	return b, nil
}

// kvState is an instance's store and the current execution's delta.
type kvState struct {
	store  map[string]KVEntry
	delta  map[string]kvEntry
	chunks map[int][]string // the store's documents, by bucket
	// legacyDelta says a delta document written by an earlier version
	// exists; the next merge deletes it.
	legacyDelta bool
}

func newKVState() kvState {
	return kvState{store: map[string]KVEntry{}, delta: map[string]kvEntry{}, chunks: map[int][]string{}}
}

func (s kvState) clone() kvState {
	c := newKVState()
	for k, v := range s.store {
		c.store[k] = v
	}
	for k, v := range s.delta {
		c.delta[k] = v
	}
	for b, ids := range s.chunks {
		c.chunks[b] = append([]string(nil), ids...)
	}
	c.legacyDelta = s.legacyDelta
	return c
}

// add folds a KV document into the state. A staged chunk (its TTL still
// set, not by a retention) belongs to a commit that has not happened.
func (s *kvState) add(d kvDoc) error {
	if d.TTL > 0 && !d.Retained {
		return nil
	}
	if d.Type == docKVDelta {
		s.legacyDelta = true
		for _, e := range d.Entries {
			s.delta[e.Key] = e
		}
		return nil
	}
	b, err := kvChunkBucket(d.ID)
	if err != nil {
		return err
	}
	s.chunks[b] = append(s.chunks[b], d.ID)
	for _, e := range d.Entries {
		if e.Value != nil {
			s.store[e.Key] = KVEntry{Value: *e.Value, LastUpdatedAtMs: e.UpdatedAt}
		}
	}
	return nil
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

// isKVEvent says an event changes the KV store.
func isKVEvent(e Event) bool {
	switch e.Kind.(type) {
	case KeyValueSet, KeyValueCleared, KeyValuesCleared:
		return true
	}
	return false
}

func countKVEvents(events []Event) int {
	n := 0
	for _, e := range events {
		if isKVEvent(e) {
			n++
		}
	}
	return n
}

// applyEvents records KV events in the delta, in
// the order given. A set without its own time takes the event's, then now.
func (s kvState) applyEvents(events []Event, now uint64) {
	for _, e := range events {
		at := e.TimestampMs
		if at == 0 {
			at = now
		}
		switch k := e.Kind.(type) {
		case KeyValueSet:
			v := k.Value
			t := k.LastUpdatedAtMs
			if t == 0 {
				t = at
			}
			s.delta[k.Key] = kvEntry{Key: k.Key, Value: &v, UpdatedAt: t}
		case KeyValueCleared:
			s.delta[k.Key] = kvEntry{Key: k.Key, UpdatedAt: at}
		case KeyValuesCleared:
			for key := range s.delta {
				s.delta[key] = kvEntry{Key: key, UpdatedAt: at}
			}
			for key := range s.store {
				s.delta[key] = kvEntry{Key: key, UpdatedAt: at}
			}
		}
	}
}

// merge moves the delta into the store (at the end of an execution) and
// returns the buckets it touched.
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

// bucketChunks are the documents of one bucket of the store, written by
// the ack whose lock token is token, each holding at most maxKVChunkBytes
// of entries; none for an empty bucket.
func (s kvState) bucketChunks(instance, pk, token string, b int) ([]kvDoc, error) {
	var entries []kvEntry
	for k, v := range s.store {
		if kvBucket(k) == b {
			value := v.Value
			entries = append(entries, kvEntry{Key: k, Value: &value, UpdatedAt: v.LastUpdatedAtMs})
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Key < entries[j].Key })
	var docs []kvDoc
	size := 0
	for _, e := range entries {
		raw, err := json.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("encode KV entry: %w", err)
		}
		if len(docs) == 0 || size+len(raw)+1 > maxKVChunkBytes {
			id := "kv|" + strconv.Itoa(b) + "|" + token + "|" + strconv.Itoa(len(docs))
			docs = append(docs, kvDoc{ID: id, PK: pk, Type: docKVStore, Instance: instance})
			size = 0
		}
		last := &docs[len(docs)-1]
		last.Entries = append(last.Entries, e)
		size += len(raw) + 1
	}
	return docs, nil
}

// deltaSince folds into the state's delta the execution's KV events with
// ids above merged, in event order.
func (s kvState) deltaSince(events []Event, merged uint64) {
	var after []Event
	for _, e := range events {
		if e.EventID > merged && isKVEvent(e) {
			after = append(after, e)
		}
	}
	sortEvents(after)
	s.applyEvents(after, 0)
}

// kvEvents are the KV-carrying events of an execution's history documents
// (those with a kv count, and their parts), decoded, in event order.
func kvEvents(docs partitionDocs) ([]Event, error) {
	marked := partitionDocs{parts: docs.parts}
	for _, d := range docs.history {
		if d.KV > 0 {
			marked.history = append(marked.history, d)
		}
	}
	events, err := decodeHistory(marked)
	if err != nil {
		return nil, fmt.Errorf("read the KV delta: %w", err)
	}
	return events, nil
}

// kvView is the KV state a queryKV gives.
func kvView(docs partitionDocs, merged uint64) (kvState, error) {
	s := docs.kv.clone()
	events, err := kvEvents(docs)
	if err != nil {
		return s, err
	}
	s.deltaSince(events, merged)
	return s, nil
}

// allBuckets asks queryKV for the whole store.
const allBuckets = -1

// queryKV reads, in one query, the KV state of an instance whose current
// execution is exec, merged up to event merged (as its instance document
// says): the store's chunks (of one bucket, or allBuckets), a legacy delta,
// the execution document and the execution's turns with KV events after
// the merge (a merge happens at a turn's end, so a turn is after it when
// its first event is).
func (p *CosmosProvider) queryKV(ctx context.Context, pk string, exec, merged uint64, bucket int) (partitionDocs, error) {
	store := "c.type = @kv"
	params := []QueryParameter{{Name: "@pk", Value: pk}, {Name: "@exec", Value: exec}, {Name: "@merged", Value: merged}, {Name: "@kv", Value: docKVStore},
		{Name: "@kvd", Value: docKVDelta}, {Name: "@exe", Value: docExecution}, {Name: "@hist", Value: docHistory}, {Name: "@part", Value: docHistPart}}
	if bucket != allBuckets {
		store = "(c.type = @kv AND (c.id = @bucket OR STARTSWITH(c.id, @chunks)))"
		id := "kv|" + strconv.Itoa(bucket)
		params = append(params, QueryParameter{Name: "@bucket", Value: id}, QueryParameter{Name: "@chunks", Value: id + "|"})
	}
	return p.queryDocs(ctx, pk,
		"SELECT * FROM c WHERE c.pk = @pk AND ("+store+" OR c.type = @kvd OR (c.type = @exe AND c.exec = @exec)"+
			" OR (c.type = @hist AND c.exec = @exec AND c.kv > 0 AND c.first > @merged)"+
			" OR (c.type = @part AND c.exec = @exec AND c.kv > 0 AND c.first > @merged))",
		params)
}

// isTerminalStatus says whether a status ends an execution (and so merges
// its KV delta).
func isTerminalStatus(status *InstanceStatus) bool {
	return status != nil && status.IsTerminal()
}

// readKV reads an instance's KV state (of one bucket, or allBuckets): its
// instance document (the current execution, and how far its KV is
// merged), then one single-partition query.
func (p *CosmosProvider) readKV(ctx context.Context, instance string, bucket int) (kvState, error) {
	pk := instancePartitionKey(instance)
	inst, err := p.readInstanceDoc(ctx, pk)
	if err != nil {
		return kvState{}, err
	}
	if inst == nil || inst.retainedPast(p.nowMs()) {
		return newKVState(), nil // none, or its retention ended: reads as gone
	}
	docs, err := p.queryKV(ctx, pk, max(inst.CurrentExec, InitialExecutionID), inst.KVMerged, bucket)
	if err != nil {
		return kvState{}, err
	}
	return kvView(docs, inst.KVMerged)
}

// GetKVValue reads a key from the merged view (delta over store).
func (p *CosmosProvider) GetKVValue(ctx context.Context, instance, key string) (string, bool, error) {
	const op = "GetKVValue"
	if err := validateInstanceID(op, instance); err != nil {
		return "", false, err
	}
	s, err := p.readKV(ctx, instance, kvBucket(key))
	if err != nil {
		return "", false, asOperation(op, err)
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
	s, err := p.readKV(ctx, instance, allBuckets)
	if err != nil {
		return nil, asOperation(op, err)
	}
	return s.merged(), nil
}
