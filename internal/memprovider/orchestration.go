package memprovider

import (
	"context"
	"fmt"
	"time"

	"github.com/duroxide-go/cdb"
)

// FetchOrchestrationItem locks the first instance, in enqueue order of its
// visible messages, that has no valid instance lock and passes the filter,
// and returns all its visible messages as one batch.
func (p *Provider) FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration,
	filter *cdb.DispatcherCapabilityFilter) (*cdb.OrchestrationItem, string, uint32, error) {
	const op = "FetchOrchestrationItem"
	var (
		item    *cdb.OrchestrationItem
		token   string
		attempt uint32
	)
	err := p.waitFor(ctx, op, pollTimeout, func(now int64) (bool, error) {
		var err error
		item, token, attempt, err = p.fetchOrchestrationLocked(op, now, lockTimeout, filter)
		return item != nil, err
	}, p.nextOrchestratorChange)
	if err != nil || item == nil {
		return nil, "", 0, err
	}
	return item, token, attempt, nil
}

// nextOrchestratorChange is the earliest store time after now at which a
// message becomes visible or an instance lock expires; 0 for none.
func (p *Provider) nextOrchestratorChange(now int64) int64 {
	var next int64
	consider := func(t int64) {
		if t > now && (next == 0 || t < next) {
			next = t
		}
	}
	for _, r := range p.orchQueue {
		consider(r.visibleAt)
	}
	for _, l := range p.locks {
		consider(l.lockedUntil)
	}
	return next
}

// compatible reports whether the instance's current execution passes the
// capability filter: no filter, no pinned version (brand-new instances and
// pre-upgrade data), or a pinned version inside the first range, compared
// packed as duroxide's providers do.
func (p *Provider) compatible(instance string, filter *cdb.DispatcherCapabilityFilter) bool {
	if filter == nil {
		return true
	}
	exec := p.currentExecutionRow(instance)
	if exec == nil || exec.pinned == nil {
		return true
	}
	r := filter.SupportedDuroxideVersions[0] // phase 1: only the first range
	v := exec.pinned.PackedVersion()
	return r.Min.PackedVersion() <= v && v <= r.Max.PackedVersion()
}

func (p *Provider) lockValid(instance string, now int64) bool {
	l := p.locks[instance]
	return l != nil && l.lockedUntil > now
}

// fetchOrchestrationLocked is one fetch attempt, with the mutex held.
func (p *Provider) fetchOrchestrationLocked(op string, now int64, lockTimeout time.Duration,
	filter *cdb.DispatcherCapabilityFilter) (*cdb.OrchestrationItem, string, uint32, error) {
	if filter != nil && len(filter.SupportedDuroxideVersions) == 0 {
		return nil, "", 0, nil // an empty range list supports nothing
	}

	// Candidate instances in the order of their first visible message.
	var candidates []string
	seen := map[string]bool{}
	for _, r := range p.orchQueue {
		if r.visibleAt <= now && !seen[r.instance] {
			seen[r.instance] = true
			candidates = append(candidates, r.instance)
		}
	}

	for _, instance := range candidates {
		// Selection: unlocked (or expired) and compatible, before any lock is
		// taken or history is read.
		if p.lockValid(instance, now) || !p.compatible(instance, filter) {
			continue
		}
		var batch []*orchRow
		for _, r := range p.orchQueue {
			if r.instance == instance && r.visibleAt <= now {
				batch = append(batch, r)
			}
		}
		messages := make([]cdb.WorkItem, 0, len(batch))
		for _, r := range batch {
			m, err := cdb.UnmarshalWorkItem(r.item)
			if err != nil { // the store wrote these bytes; unreachable
				return nil, "", 0, refuse(op, fmt.Sprintf("stored message %d of %q: %v", r.id, instance, err), err)
			}
			messages = append(messages, cdb.WithTraceContext(m, r.trace))
		}

		item := &cdb.OrchestrationItem{Instance: instance, Messages: messages, KVSnapshot: map[string]cdb.KVEntry{},
			TraceContext: p.startTrace(instance, batch), VisibleAt: earliestVisible(batch)}
		var historyErr error
		if inst := p.instances[instance]; inst != nil {
			item.OrchestrationName = inst.name
			item.Version = "unknown"
			if inst.version != nil {
				item.Version = *inst.version
			}
			item.ExecutionID = inst.currentExecution
			item.History, historyErr = p.decodeHistory(instance, inst.currentExecution)
		} else if name, version, exec, hist, ok := p.startedFromHistory(instance); ok {
			// (a) history without an instance row: an earlier ack carried no
			// name and version.
			item.OrchestrationName, item.Version, item.ExecutionID, item.History = name, version, exec, hist
		} else if name, version, ok := startFromMessages(messages); ok {
			// (b) a brand-new instance: its start is in the batch.
			item.OrchestrationName, item.Version, item.ExecutionID = name, version, cdb.InitialExecutionID
			item.History = []cdb.Event{}
		} else if name, version, ok := p.hiddenStart(instance); ok {
			// (b') its start is queued but hidden (an abandon's delay): the
			// batch goes to the runtime named after it, which keeps its
			// messages for the start (duroxide 0.1.32).
			item.OrchestrationName, item.Version, item.ExecutionID = name, version, cdb.InitialExecutionID
			item.History = []cdb.Event{}
		} else if allQueueMessages(batch) {
			// (c) orphan persistent events for an instance that never
			// started: drop them and try the next candidate.
			p.deleteOrchRows(batch)
			continue
		} else {
			// (c) other work racing ahead of its start: leave it queued,
			// untouched, and try the next candidate (see the package doc).
			continue
		}

		// Lock the instance and stamp the batch.
		token := p.newToken("lock")
		p.locks[instance] = &instanceLock{token: token, lockedUntil: after(now, lockTimeout), lockedAt: now}
		var maxAttempt uint32
		for _, r := range batch {
			r.lockToken = token
			r.attempts++
			if r.attempts > maxAttempt {
				maxAttempt = r.attempts
			}
		}

		if historyErr != nil {
			// The lock and the attempt increments stay, so the runtime can
			// reach its poison path instead of looping on a fetch error.
			msg := "Failed to deserialize history: " + historyErr.Error()
			item.History = []cdb.Event{}
			item.HistoryError = &msg
			return item, token, maxAttempt, nil
		}
		for k, e := range p.kvStore[instance] { // the snapshot excludes kv_delta
			item.KVSnapshot[k] = cdb.KVEntry{Value: e.value, LastUpdatedAtMs: e.updatedAt}
		}
		return item, token, maxAttempt, nil
	}
	return nil, "", 0, nil
}

// startTrace is the trace context of instance's start: its row's, else
// (no turn created the row yet) that of the start in its batch.
func (p *Provider) startTrace(instance string, batch []*orchRow) cdb.TraceContext {
	if inst := p.instances[instance]; inst != nil && !inst.trace.IsZero() {
		return inst.trace
	}
	return batchTrace(batch)
}

// earliestVisible is when the batch became takeable: the earliest
// visibleAt among its rows.
func earliestVisible(batch []*orchRow) time.Time {
	if len(batch) == 0 {
		return time.Time{}
	}
	earliest := batch[0].visibleAt
	for _, r := range batch[1:] {
		earliest = min(earliest, r.visibleAt)
	}
	return time.UnixMilli(earliest)
}

// batchTrace is the trace of the first row that keeps one: on the
// orchestrator queue only starts do.
func batchTrace(batch []*orchRow) cdb.TraceContext {
	for _, r := range batch {
		if !r.trace.IsZero() {
			return r.trace
		}
	}
	return cdb.TraceContext{}
}

// startedFromHistory finds, for an instance without an instance row, the
// OrchestrationStarted of its latest execution. Undecodable history counts
// as none, as in SQLite.
func (p *Provider) startedFromHistory(instance string) (name, version string, exec uint64, hist []cdb.Event, ok bool) {
	exec = p.latestExecution(instance)
	hist, err := p.decodeHistory(instance, exec)
	if err != nil {
		return "", "", 0, nil, false
	}
	for _, ev := range hist {
		if s, isStart := ev.Kind.(cdb.OrchestrationStarted); isStart {
			return s.Name, s.Version, exec, hist, true
		}
	}
	return "", "", 0, nil, false
}

// startFromMessages takes name and version from the first StartOrchestration
// or ContinueAsNew of a batch.
func startFromMessages(messages []cdb.WorkItem) (name, version string, ok bool) {
	for _, m := range messages {
		var v *string
		switch s := m.(type) {
		case cdb.StartOrchestrationMessage:
			name, v = s.Orchestration, s.Version
		case cdb.ContinueAsNewMessage:
			name, v = s.Orchestration, s.Version
		default:
			continue
		}
		version = "unknown"
		if v != nil {
			version = *v
		}
		return name, version, true
	}
	return "", "", false
}

// hiddenStart finds a StartOrchestration queued for instance whatever its
// visibility.
func (p *Provider) hiddenStart(instance string) (name, version string, ok bool) {
	for _, r := range p.orchQueue {
		if r.instance != instance {
			continue
		}
		if m, err := cdb.UnmarshalWorkItem(r.item); err == nil {
			if s, isStart := m.(cdb.StartOrchestrationMessage); isStart {
				return startFromMessages([]cdb.WorkItem{s})
			}
		}
	}
	return "", "", false
}

func allQueueMessages(batch []*orchRow) bool {
	for _, r := range batch {
		if r.kind != "QueueMessage" {
			return false
		}
	}
	return true
}

// deleteOrchRows removes the given rows from the orchestrator queue.
func (p *Provider) deleteOrchRows(rows []*orchRow) {
	drop := map[*orchRow]bool{}
	for _, r := range rows {
		drop[r] = true
	}
	p.removeOrch(func(r *orchRow) bool { return drop[r] })
}

// removeOrch deletes the orchestrator rows matching del and returns how many.
func (p *Provider) removeOrch(del func(*orchRow) bool) int {
	kept := p.orchQueue[:0]
	n := 0
	for _, r := range p.orchQueue {
		if del(r) {
			n++
			continue
		}
		kept = append(kept, r)
	}
	for i := len(kept); i < len(p.orchQueue); i++ {
		p.orchQueue[i] = nil
	}
	p.orchQueue = kept
	return n
}

// removeWork deletes the worker rows matching del and returns how many.
func (p *Provider) removeWork(del func(*workRow) bool) int {
	kept := p.workQueue[:0]
	n := 0
	for _, r := range p.workQueue {
		if del(r) {
			n++
			continue
		}
		kept = append(kept, r)
	}
	for i := len(kept); i < len(p.workQueue); i++ {
		p.workQueue[i] = nil
	}
	p.workQueue = kept
	return n
}

// lockByToken finds the instance lock carrying token, valid or not.
func (p *Provider) lockByToken(token string) (string, *instanceLock) {
	if token == "" {
		return "", nil
	}
	for instance, l := range p.locks {
		if l.token == token {
			return instance, l
		}
	}
	return "", nil
}

// AckOrchestrationItem commits one turn atomically. All validation happens
// before the first change, so a failed ack leaves the lock, the messages
// and everything else untouched.
func (p *Provider) AckOrchestrationItem(ctx context.Context, lockToken string, executionID uint64,
	historyDelta []cdb.Event, workerItems, orchestratorItems []cdb.WorkItem,
	metadata cdb.ExecutionMetadata, cancelledActivities []cdb.ScheduledActivityIdentifier) error {
	const op = "AckOrchestrationItem"
	if err := p.begin(ctx, op); err != nil {
		return err
	}
	defer p.mu.Unlock()
	now := p.nowMs()

	// Validate.
	instance, lock := p.lockByToken(lockToken)
	if lock == nil {
		return refuse(op, "Invalid lock token", cdb.ErrInvalidLockToken)
	}
	if lock.lockedUntil <= now {
		return refuse(op, "Instance lock expired", cdb.ErrInvalidLockToken)
	}
	delta, err := p.encodeEvents(instance, executionID, historyDelta)
	if err != nil {
		return refuse(op, "Failed to append history: "+err.Error(), err)
	}
	workers := make([]encodedWorkItem, 0, len(workerItems))
	for _, w := range workerItems {
		e, err := encodeWorkItem(w)
		if err != nil {
			return refuse(op, "worker item: "+err.Error(), err)
		}
		workers = append(workers, e)
	}
	orchs := make([]encodedOrchItem, 0, len(orchestratorItems))
	for _, o := range orchestratorItems {
		e, err := encodeOrchItem(o)
		if err != nil {
			return refuse(op, "orchestrator item: "+err.Error(), err)
		}
		orchs = append(orchs, e)
	}

	// Commit. Nothing below can fail.

	// The batch: only the messages fetched under this token.
	var fetched []*orchRow
	for _, r := range p.orchQueue {
		if r.lockToken == lockToken {
			fetched = append(fetched, r)
		}
	}
	p.deleteOrchRows(fetched)

	// The instance row is created here and only here, from metadata carrying
	// both name and version; the parent is fixed at creation.
	inst := p.instances[instance]
	if metadata.OrchestrationName != nil && metadata.OrchestrationVersion != nil {
		if inst == nil {
			inst = &instanceRow{
				seq:              p.nextSeq(),
				currentExecution: executionID,
				createdAt:        now,
				parent:           cloneString(metadata.ParentInstanceID),
				trace:            batchTrace(fetched),
			}
			p.instances[instance] = inst
		}
		inst.name = *metadata.OrchestrationName
		inst.version = cloneString(metadata.OrchestrationVersion)
	}

	// The execution row, created once and never reset.
	execs := p.executions[instance]
	if execs == nil {
		execs = map[uint64]*executionRow{}
		p.executions[instance] = execs
	}
	exec := execs[executionID]
	if exec == nil {
		exec = &executionRow{status: cdb.StatusRunning, startedAt: now}
		execs[executionID] = exec
	}
	if metadata.PinnedDuroxideVersion != nil {
		v := *metadata.PinnedDuroxideVersion
		exec.pinned = &v
	}
	if inst != nil {
		if executionID > inst.currentExecution {
			inst.currentExecution = executionID
		}
		inst.updatedAt = now
		inst.parked = nil // a committed turn ends a park
	}

	// History, append-only.
	p.appendEncoded(instance, executionID, delta)

	// Status and output, even with an empty delta.
	if metadata.Status != nil {
		exec.status = *metadata.Status
		exec.output = cloneString(metadata.Output)
		if exec.status == cdb.StatusRunning {
			exec.completedAt = nil
		} else {
			t := now
			exec.completedAt = &t
		}
	}
	// Custom status: the last CustomStatusUpdated of the delta wins.
	if inst != nil {
		for i := len(delta) - 1; i >= 0; i-- {
			if cs, ok := delta[i].ev.Kind.(cdb.CustomStatusUpdated); ok {
				inst.customStatus = cloneString(cs.Status)
				inst.customStatusVersion++
				break
			}
		}
	}
	end := cdb.OrchestrationStatus{Found: true, Status: exec.status, Output: cloneString(exec.output)}
	if inst != nil {
		end.CustomStatus, end.CustomStatusVersion = cloneString(inst.customStatus), inst.customStatusVersion
	}
	p.endedLocked(instance, end)

	// KV mutations of this execution go to kv_delta, in order.
	for _, e := range delta {
		switch kv := e.ev.Kind.(type) {
		case cdb.KeyValueSet:
			v := kv.Value
			p.deltaFor(instance)[kv.Key] = kvDeltaEntry{value: &v, updatedAt: kv.LastUpdatedAtMs}
		case cdb.KeyValueCleared:
			p.deltaFor(instance)[kv.Key] = kvDeltaEntry{updatedAt: uint64(now)}
		case cdb.KeyValuesCleared:
			d := p.deltaFor(instance)
			for k := range d {
				d[k] = kvDeltaEntry{updatedAt: uint64(now)}
			}
			for k := range p.kvStore[instance] {
				if _, ok := d[k]; !ok {
					d[k] = kvDeltaEntry{updatedAt: uint64(now)}
				}
			}
		}
	}
	// A terminal turn merges kv_delta into kv_store and clears it.
	if s := metadata.Status; s != nil && s.IsTerminal() {
		for k, d := range p.kvDelta[instance] {
			if d.value == nil {
				delete(p.kvStore[instance], k)
				continue
			}
			store := p.kvStore[instance]
			if store == nil {
				store = map[string]kvStoreEntry{}
				p.kvStore[instance] = store
			}
			store[k] = kvStoreEntry{value: *d.value, updatedAt: d.updatedAt}
		}
		if len(p.kvStore[instance]) == 0 {
			delete(p.kvStore, instance)
		}
		delete(p.kvDelta, instance)
	}

	// Worker items first, then the cancellations, so an activity scheduled
	// and cancelled in the same turn leaves nothing behind.
	for _, w := range workers {
		p.insertWork(w, now)
	}
	if len(cancelledActivities) > 0 {
		type key struct {
			instance        string
			execution, acty uint64
		}
		cancel := map[key]bool{}
		for _, c := range cancelledActivities {
			cancel[key{c.Instance, c.ExecutionID, c.ActivityID}] = true
		}
		p.removeWork(func(r *workRow) bool { return cancel[key{r.instance, r.execution, r.activityID}] })
	}

	for _, o := range orchs {
		visible := now
		if o.fireAtMs != nil {
			visible = *o.fireAtMs
		}
		p.insertOrch(o, visible)
	}

	delete(p.locks, instance)
	p.notify()
	return nil
}

func (p *Provider) deltaFor(instance string) map[string]kvDeltaEntry {
	d := p.kvDelta[instance]
	if d == nil {
		d = map[string]kvDeltaEntry{}
		p.kvDelta[instance] = d
	}
	return d
}

// AbandonOrchestrationItem releases the instance lock without committing.
// An unknown token is an error; an expired one is accepted while nobody has
// re-locked the instance, as in SQLite.
func (p *Provider) AbandonOrchestrationItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	return p.giveBack(ctx, "AbandonOrchestrationItem", lockToken, delay, ignoreAttempt, nil)
}

// giveBack releases the lock of lockToken without committing; record, when
// set, writes on the instance's row (a park) in the same step.
func (p *Provider) giveBack(ctx context.Context, op, lockToken string, delay time.Duration, ignoreAttempt bool, record func(inst *instanceRow, now int64)) error {
	if err := p.begin(ctx, op); err != nil {
		return err
	}
	defer p.mu.Unlock()
	now := p.nowMs()
	instance, lock := p.lockByToken(lockToken)
	if lock == nil {
		return refuse(op, "Invalid lock token", cdb.ErrInvalidLockToken)
	}
	if inst := p.instances[instance]; inst != nil && record != nil {
		record(inst, now)
	}
	p.releaseLock(instance, lockToken, now, delay, ignoreAttempt)
	return nil
}

// releaseLock frees the instance and the messages fetched under
// lockToken, visible after delay, their attempt given back if asked.
func (p *Provider) releaseLock(instance, lockToken string, now int64, delay time.Duration, ignoreAttempt bool) {
	delete(p.locks, instance)
	visibleAt := after(now, delay)
	for _, r := range p.orchQueue {
		if r.instance != instance || r.lockToken != lockToken {
			continue // a message the fetch did not lock stays as it is (duroxide 0.1.32)
		}
		if ignoreAttempt && r.attempts > 0 {
			r.attempts--
		}
		r.lockToken = ""
		if delay > 0 {
			r.visibleAt = max(r.visibleAt, visibleAt)
		}
	}
	p.notify()
}

// RenewOrchestrationItemLock extends a still-valid instance lock.
func (p *Provider) RenewOrchestrationItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	const op = "RenewOrchestrationItemLock"
	if err := p.begin(ctx, op); err != nil {
		return err
	}
	defer p.mu.Unlock()
	now := p.nowMs()
	_, lock := p.lockByToken(lockToken)
	if lock == nil || lock.lockedUntil <= now {
		return refuse(op, "Lock token invalid, expired, or already acked", cdb.ErrInvalidLockToken)
	}
	lock.lockedUntil = after(now, extendFor)
	return nil
}

// OrchestrationLockRemaining is how long the instance lock token has left
// by the store's clock (cdb.LockRemainingReporter): zero once it has
// expired, and false when no instance lock carries the token (acked,
// abandoned, or taken by another fetch since).
func (p *Provider) OrchestrationLockRemaining(token string) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, lock := p.lockByToken(token)
	if lock == nil {
		return 0, false
	}
	return p.remaining(lock.lockedUntil), true
}

// Read returns the latest execution's history; empty for an unknown instance.
func (p *Provider) Read(ctx context.Context, instance string) ([]cdb.Event, error) {
	const op = "Read"
	if err := p.begin(ctx, op); err != nil {
		return nil, err
	}
	defer p.mu.Unlock()
	return p.readExecution(op, instance, p.latestExecution(instance))
}

// ReadWithExecution returns one execution's history.
func (p *Provider) ReadWithExecution(ctx context.Context, instance string, executionID uint64) ([]cdb.Event, error) {
	const op = "ReadWithExecution"
	if err := p.begin(ctx, op); err != nil {
		return nil, err
	}
	defer p.mu.Unlock()
	return p.readExecution(op, instance, executionID)
}

// AppendWithExecution stores events as given, all or none; an event id of 0
// or one already stored is refused, never overwritten.
func (p *Provider) AppendWithExecution(ctx context.Context, instance string, executionID uint64, newEvents []cdb.Event) error {
	const op = "AppendWithExecution"
	if err := p.begin(ctx, op); err != nil {
		return err
	}
	defer p.mu.Unlock()
	events, err := p.encodeEvents(instance, executionID, newEvents)
	if err != nil {
		return refuse(op, "Failed to append history: "+err.Error(), err)
	}
	p.appendEncoded(instance, executionID, events)
	return nil
}

// EnqueueForOrchestrator queues a message for the instance it routes to,
// visible after delay. It never creates the instance.
func (p *Provider) EnqueueForOrchestrator(ctx context.Context, item cdb.WorkItem, delay time.Duration) error {
	const op = "EnqueueForOrchestrator"
	e, err := encodeOrchItem(item)
	if err != nil {
		return refuse(op, err.Error(), err)
	}
	if err := p.begin(ctx, op); err != nil {
		return err
	}
	defer p.mu.Unlock()
	p.insertOrch(e, after(p.nowMs(), delay))
	p.notify()
	return nil
}
