package cdb

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
)

// History is stored one document per ack (historyDoc): the events the turn
// appended, encoded as duroxide encodes them, plus their ids in the clear so
// duplicates are caught even when the encoded events are not readable.

// loadState returns what a turn needs of the instance: from this process's
// cache when the instance's lastAck shows it is current (a request saved),
// else with one single-partition query.
func (p *CosmosProvider) loadState(ctx context.Context, inst *instanceDoc) (*instanceState, error) {
	if s, ok := p.stateWithoutLoad(inst); ok {
		return s, nil
	}
	exec := max(inst.CurrentExec, InitialExecutionID)
	docs, err := p.queryTurnState(ctx, inst.PK, exec)
	if err != nil {
		return nil, err
	}
	s := &instanceState{commit: inst.LastAck, exec: exec, execDoc: docs.exec, eventIDs: map[uint64]bool{}, kv: docs.kv, pendingOutboxes: docs.outboxes}
	for _, d := range docs.history {
		for _, id := range d.EventIDs {
			s.eventIDs[id] = true
		}
	}
	history, err := decodeHistory(docs)
	if err != nil {
		msg := err.Error()
		s.historyError = &msg
	} else {
		s.history = history
	}
	p.deriveKVDelta(s, docs)
	p.cache.put(inst.PK, s)
	return s, nil
}

// deriveKVDelta folds the execution's KV events after its last merge into
// the loaded state's KV delta (kv.go): from the decoded history, or, when
// some other turn does not decode, from the turns that carry KV events.
func (p *CosmosProvider) deriveKVDelta(s *instanceState, docs partitionDocs) {
	var merged uint64
	if docs.exec != nil {
		merged = docs.exec.KVMerged
	}
	events := s.history
	if s.historyError != nil {
		var err error
		if events, err = kvEvents(docs); err != nil {
			p.log.Error("cdb: the current execution's KV delta cannot be read; its KV events are left out", "instance", docs.instance(), "error", err)
		}
	}
	s.kv.deltaSince(events, merged)
}

// stateWithoutLoad is the instance's state where it is known without a
// request: for an instance no ack has committed to (its first turn, or
// messages that came before a start) it is empty, as the first commit
// writes its first history, execution, KV and outbox documents and a
// deletion removes the instance document last; otherwise it is the state
// this process kept after committing the instance's last turn, if nobody
// committed since.
func (p *CosmosProvider) stateWithoutLoad(inst *instanceDoc) (*instanceState, bool) {
	if inst.LastAck == "" && inst.Rev == 0 {
		return &instanceState{commit: inst.LastAck, exec: InitialExecutionID, eventIDs: map[uint64]bool{}, kv: newKVState()}, true
	}
	return p.cachedState(inst)
}

// cachedState is the state this process kept after committing the
// instance's last turn, if nobody committed since.
func (p *CosmosProvider) cachedState(inst *instanceDoc) (*instanceState, bool) {
	s, ok := p.cache.get(inst.PK, inst.LastAck)
	return s, ok && s.exec == max(inst.CurrentExec, InitialExecutionID)
}

// partitionDocs are an instance's documents a read needs, sorted by type.
type partitionDocs struct {
	history []historyDoc      // by first event id
	parts   map[string]string // staged history parts' data, by id
	exec    *executionDoc
	kv      kvState
	// outboxes are the partition's undelivered outboxes (the turn-state
	// query reads them, so a turn's outbox is delivered after them and one
	// sender's messages keep their order).
	outboxes []outboxRef
}

// queryExecution reads one execution's history and execution documents in
// one query.
func (p *CosmosProvider) queryExecution(ctx context.Context, pk string, exec uint64) (partitionDocs, error) {
	return p.queryDocs(ctx, pk,
		"SELECT * FROM c WHERE c.pk = @pk AND c.exec = @exec AND (c.type = @hist OR c.type = @part OR c.type = @exe)",
		[]QueryParameter{{Name: "@pk", Value: pk}, {Name: "@exec", Value: exec}, {Name: "@hist", Value: docHistory},
			{Name: "@part", Value: docHistPart}, {Name: "@exe", Value: docExecution}})
}

// queryTurnState reads what a turn needs in one query: the execution's
// history and execution documents, the instance's KV documents, and its
// undelivered outboxes.
func (p *CosmosProvider) queryTurnState(ctx context.Context, pk string, exec uint64) (partitionDocs, error) {
	return p.queryDocs(ctx, pk,
		"SELECT * FROM c WHERE c.pk = @pk AND ((c.exec = @exec AND (c.type = @hist OR c.type = @part OR c.type = @exe)) OR c.type = @kv OR c.type = @kvd OR c.type = @outbox)",
		[]QueryParameter{{Name: "@pk", Value: pk}, {Name: "@exec", Value: exec}, {Name: "@hist", Value: docHistory}, {Name: "@part", Value: docHistPart},
			{Name: "@exe", Value: docExecution}, {Name: "@kv", Value: docKVStore}, {Name: "@kvd", Value: docKVDelta}, {Name: "@outbox", Value: docOutbox}})
}

// instance names the instance of the documents, for logs.
func (d partitionDocs) instance() string {
	if d.exec != nil {
		return d.exec.Instance
	}
	if len(d.history) > 0 {
		return d.history[0].Instance
	}
	return ""
}

// queryDocs runs a single-partition query and sorts its documents by type.
// A turn needs every document of its execution's history, one per turn
// before it: read in whole pages (wholePartitionRead).
func (p *CosmosProvider) queryDocs(ctx context.Context, pk, query string, params []QueryParameter) (partitionDocs, error) {
	out := partitionDocs{parts: map[string]string{}, kv: newKVState()}
	res, err := p.container.QueryItems(ctx, query, params, wholePartitionRead(pk))
	if err != nil {
		return out, err
	}
	for _, raw := range res.Items {
		var head struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(raw, &head); err != nil {
			return out, fmt.Errorf("decode document: %w", err)
		}
		if err := out.add(head.Type, raw); err != nil {
			return out, err
		}
	}
	sort.Slice(out.history, func(i, j int) bool { return out.history[i].First < out.history[j].First })
	return out, nil
}

// add files one document by its type.
func (d *partitionDocs) add(docType string, raw []byte) error {
	switch docType {
	case docHistory:
		var h historyDoc
		if err := json.Unmarshal(raw, &h); err != nil {
			return fmt.Errorf("decode history document: %w", err)
		}
		d.history = append(d.history, h)
	case docHistPart:
		var part historyPart
		if err := json.Unmarshal(raw, &part); err != nil {
			return fmt.Errorf("decode history part: %w", err)
		}
		d.parts[part.ID] = part.Data
	case docExecution:
		d.exec = new(executionDoc)
		if err := json.Unmarshal(raw, d.exec); err != nil {
			return fmt.Errorf("decode execution document: %w", err)
		}
	case docKVStore, docKVDelta:
		var kv kvDoc
		if err := json.Unmarshal(raw, &kv); err != nil {
			return fmt.Errorf("decode KV document: %w", err)
		}
		if err := d.kv.add(kv); err != nil {
			return err
		}
	case docOutbox:
		var ref outboxRef
		if err := json.Unmarshal(raw, &ref); err != nil {
			return fmt.Errorf("decode outbox document: %w", err)
		}
		d.outboxes = append(d.outboxes, ref)
	}
	return nil
}

// decodeHistory decodes the events of history documents (and their staged
// parts), ordered by event id. Any undecodable event or missing part fails
// the whole read: events are never dropped.
func decodeHistory(docs partitionDocs) ([]Event, error) {
	var events []Event
	for _, d := range docs.history {
		raws, err := historyData(d, docs.parts)
		if err != nil {
			return nil, err
		}
		for _, raw := range raws {
			e, err := UnmarshalEvent(raw)
			if err != nil {
				return nil, fmt.Errorf("history deserialization failed: execution %d: %w", d.Exec, err)
			}
			events = append(events, e)
		}
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].EventID < events[j].EventID })
	return events, nil
}

// historyData is a history document's encoded events, from its own data or
// from its staged parts.
func historyData(d historyDoc, parts map[string]string) ([]json.RawMessage, error) {
	chunks := []string{d.Data}
	if len(d.Parts) > 0 {
		chunks = chunks[:0]
		for _, id := range d.Parts {
			data, ok := parts[id]
			if !ok {
				return nil, fmt.Errorf("history deserialization failed: execution %d events from %d: part %s is missing", d.Exec, d.First, id)
			}
			chunks = append(chunks, data)
		}
	}
	var all []json.RawMessage
	for _, chunk := range chunks {
		var raws []json.RawMessage
		if err := json.Unmarshal([]byte(chunk), &raws); err != nil {
			return nil, fmt.Errorf("history deserialization failed: execution %d events from %d: %w", d.Exec, d.First, err)
		}
		all = append(all, raws...)
	}
	return all, nil
}

// encodeHistory builds the history document of a delta, written by the ack
// whose lock token is ack ("" for none).
func encodeHistory(instance, pk string, exec uint64, delta []Event, ack string) ([]byte, historyDoc, error) {
	var buf bytes.Buffer
	buf.WriteByte('[')
	ids := make([]uint64, 0, len(delta))
	size := 0
	for i, e := range delta {
		raw, err := MarshalEvent(e)
		if err != nil {
			return nil, historyDoc{}, fmt.Errorf("encode event %d: %w", e.EventID, err)
		}
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(raw)
		size += len(raw)
		ids = append(ids, e.EventID)
	}
	buf.WriteByte(']')
	first := ids[0]
	for _, id := range ids {
		first = min(first, id)
	}
	d := historyDoc{
		ID: historyDocID(exec, first), PK: pk, Type: docHistory, Instance: instance,
		Exec: exec, First: first, EventIDs: ids, Bytes: size, Data: buf.String(), Ack: ack, KV: countKVEvents(delta),
	}
	body, err := json.Marshal(d)
	return body, d, err
}

// checkEventIDs refuses a delta with event id 0 or an id already stored (or
// repeated within the delta): history is append-only.
func checkEventIDs(op string, existing map[uint64]bool, delta []Event) error {
	seen := map[uint64]bool{}
	for _, e := range delta {
		switch {
		case e.EventID == 0:
			return refuse(op, "event_id 0 is not a valid event id", ErrInvalidInput)
		case existing[e.EventID] || seen[e.EventID]:
			return refuse(op, fmt.Sprintf("duplicate event_id %d in execution %d: history is append-only", e.EventID, e.ExecutionID), ErrDuplicateEvent)
		}
		seen[e.EventID] = true
	}
	return nil
}

// Read returns the history of the instance's latest execution.
func (p *CosmosProvider) Read(ctx context.Context, instance string) ([]Event, error) {
	const op = "Read"
	if err := validateInstanceID(op, instance); err != nil {
		return nil, err
	}
	exec, err := p.latestExecution(ctx, instance)
	if err != nil {
		return nil, asOperation(op, err)
	}
	if exec == 0 {
		return []Event{}, nil
	}
	return p.readExecution(ctx, op, instance, exec)
}

// ReadWithExecution returns one execution's history.
func (p *CosmosProvider) ReadWithExecution(ctx context.Context, instance string, executionID uint64) ([]Event, error) {
	const op = "ReadWithExecution"
	if err := validateInstanceID(op, instance); err != nil {
		return nil, err
	}
	return p.readExecution(ctx, op, instance, executionID)
}

func (p *CosmosProvider) readExecution(ctx context.Context, op, instance string, exec uint64) ([]Event, error) {
	docs, err := p.queryExecution(ctx, instancePartitionKey(instance), exec)
	if err != nil {
		return nil, asOperation(op, err)
	}
	events, err := decodeHistory(docs)
	if err != nil {
		return nil, refuse(op, "", err)
	}
	if events == nil {
		events = []Event{}
	}
	return events, nil
}

// latestExecution is the instance's current execution: from its instance
// document, or, for history written without instance metadata, the highest
// execution that has history. 0 means none.
func (p *CosmosProvider) latestExecution(ctx context.Context, instance string) (uint64, error) {
	inst, err := p.readInstance(ctx, instance)
	if err != nil {
		return 0, err
	}
	if inst != nil && (inst.Deleting != "" || inst.retainedPast(p.nowMs())) {
		return 0, nil // being deleted, or its retention ended: reads as gone
	}
	if inst != nil && inst.CurrentExec > 0 {
		return inst.CurrentExec, nil
	}
	pk := instancePartitionKey(instance)
	key := NewPartitionKeyString(pk)
	res, err := p.container.QueryItems(ctx, "SELECT VALUE MAX(c.exec) FROM c WHERE c.pk = @pk AND c.type = @hist",
		[]QueryParameter{{Name: "@pk", Value: pk}, {Name: "@hist", Value: docHistory}}, &QueryOptions{PartitionKey: &key})
	if err != nil {
		return 0, err
	}
	return maxOfPartialMax(res.Items)
}

// maxOfPartialMax combines what the pages of a `SELECT VALUE MAX(...)`
// answered: the service may page an aggregate, each page carrying the
// maximum of what it read (or nothing: no item, null, or an empty object
// for an undefined aggregate), so the answer is the largest of them, 0 when
// there is none.
func maxOfPartialMax(items []json.RawMessage) (uint64, error) {
	var best uint64
	for _, raw := range items {
		if string(bytes.TrimSpace(raw)) == "{}" {
			continue
		}
		var v *uint64
		if err := json.Unmarshal(raw, &v); err != nil {
			return 0, fmt.Errorf("decode latest execution: %w", err)
		}
		if v != nil && *v > best {
			best = *v
		}
	}
	return best, nil
}

// readInstance point-reads the instance document; nil when there is none.
func (p *CosmosProvider) readInstance(ctx context.Context, instance string) (*instanceDoc, error) {
	return p.readInstanceDoc(ctx, instancePartitionKey(instance))
}

// AppendWithExecution stores events exactly as given (a test and
// fault-injection helper). A duplicate event id is refused, never
// overwritten; the instance's lastAck moves so no cached history goes stale.
func (p *CosmosProvider) AppendWithExecution(ctx context.Context, instance string, executionID uint64, newEvents []Event) error {
	const op = "AppendWithExecution"
	if err := validateInstanceID(op, instance); err != nil {
		return err
	}
	if len(newEvents) == 0 {
		return nil
	}
	pk := instancePartitionKey(instance)
	docs, err := p.queryExecution(ctx, pk, executionID)
	if err != nil {
		return asOperation(op, err)
	}
	existing := map[uint64]bool{}
	for _, d := range docs.history {
		for _, id := range d.EventIDs {
			existing[id] = true
		}
	}
	if err := checkEventIDs(op, existing, newEvents); err != nil {
		return err
	}
	body, _, err := encodeHistory(instance, pk, executionID, newEvents, "")
	if err != nil {
		return refuse(op, "", err)
	}
	b := p.container.NewTransactionalBatch(NewPartitionKeyString(pk))
	b.CreateItem(body, nil)
	inst, err := p.readInstance(ctx, instance)
	if err != nil {
		return asOperation(op, err)
	}
	if inst != nil {
		var ops PatchOperations
		ops.AppendIncrement("/rev", 1)
		ops.AppendSet("/lastAck", newLockToken("append_"))
		b.PatchItem(instanceDocID, ops, nil)
	}
	resp, err := p.container.ExecuteTransactionalBatch(ctx, b, nil)
	if err != nil {
		return asOperation(op, err)
	}
	if !resp.Success {
		_, opErr := resp.FailedOperation()
		if IsConflict(opErr) {
			return refuse(op, "duplicate event ids: history is append-only", fmt.Errorf("%w: %w", ErrDuplicateEvent, opErr))
		}
		return asOperation(op, opErr)
	}
	p.cache.drop(pk)
	return nil
}

func sortEvents(events []Event) {
	sort.SliceStable(events, func(i, j int) bool { return events[i].EventID < events[j].EventID })
}
