package cdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Process leases share the dispatch slots among the processes that run
// against one container, so that their fetches query disjoint slots instead
// of racing for the same items. Correctness never depends on them: every
// claim is a conditional write.
//
// The choice. Every process holds one entry in a single membership document
// (its own partition): its id, how long its lease runs, and the lease keys
// its fetches used lately (the queue and the fetch's filters, say
// "orchestrator/*" or "worker/nosession/DefaultOnly"). A renewal is one
// PATCH that sets the process's entry and returns the whole document, so it
// also tells the process who else is alive; the slots of each key are then
// divided deterministically among that key's live members, ordered by id:
// member r of n owns the slots s with s mod n = r. Keys keep a process that
// only runs activities (or fetches with a tag filter) from owning a share
// of slots it never queries.
//
// This is the change feed processor's "lease per unit of work, taken over
// when it expires" folded into one document: with 256 slots and a handful
// of processes, per-slot lease documents would cost a request per slot to
// renew or steal, where one entry per process costs one request per
// renewal interval whatever the slot count, and no process ever steals
// from another: a joiner shows up in the document and everyone's next
// renewal moves their share, a clean leaver removes its entry, and a dead
// process's entry simply expires. Between two renewals two processes may
// both think they own a slot, which costs a 412 now and then, never a
// duplicate; or neither may, which the whole-queue looks below cover.
//
// ProcessLeaseOptions turns on slot leases shared with the other processes
// on the container (Config.ProcessLeases).
type ProcessLeaseOptions struct {
	// ProcessID names this process among those sharing the container:
	// letters, digits, '.', '_' and '-', at most 64 (default: a random id).
	// Two live processes must not share one.
	ProcessID string
	// LeaseDuration is how long a process's share outlives its last
	// renewal (default 15s, at least 1s); it is renewed every third of it.
	LeaseDuration time.Duration
}

const (
	membershipDocID  = "members"
	docMembership    = "members"
	defaultLeaseTime = 15 * time.Second
	// pruneDeadAfter is how many lease durations a dead entry stays in the
	// membership document before a renewal removes it.
	pruneDeadAfter = 10
	// maxPrunedPerRenewal keeps a renewal's PATCH within Cosmos DB's 10
	// operations.
	maxPrunedPerRenewal = 8
)

var processIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

func (o ProcessLeaseOptions) withDefaults() (ProcessLeaseOptions, error) {
	if o.ProcessID == "" {
		o.ProcessID = "p-" + uuid.NewString()
	}
	if !processIDPattern.MatchString(o.ProcessID) {
		return o, fmt.Errorf("cdb: process leases: ProcessID %q: letters, digits, '.', '_' and '-' only, 1 to 64 of them: %w", o.ProcessID, ErrInvalidInput)
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = defaultLeaseTime
	}
	if o.LeaseDuration < time.Second {
		return o, fmt.Errorf("cdb: process leases: LeaseDuration %v is under 1s: %w", o.LeaseDuration, ErrInvalidInput)
	}
	return o, nil
}

// membershipDoc is the membership document: process id → lease.
type membershipDoc struct {
	ID      string                 `json:"id"`
	PK      string                 `json:"pk"`
	Type    string                 `json:"type"`
	Members map[string]memberLease `json:"members"`
}

type memberLease struct {
	Until int64    `json:"until"`          // ms, by the renewing process's clock
	Keys  []string `json:"keys,omitempty"` // the lease keys its fetches used lately
	// Totals are the process's client's cumulative counts as of the
	// renewal, so a reader (cdb top) can difference two of them into
	// rates; absent from entries of builds that publish none.
	Totals *memberTotals `json:"totals,omitempty"`
}

// memberTotals are a process's Client.Stats published with its renewal:
// short names, since every renewal writes them.
type memberTotals struct {
	RequestCharge float64 `json:"ru"`  // RU, over all requests
	Throttles     int64   `json:"429"` // 429 responses
	Requests      int64   `json:"req"` // HTTP requests sent, retries included
	At            int64   `json:"at"`  // ms, by the process's clock, when they were read
}

// entry is this process's entry as of now: its lease, its keys, and its
// client's totals read now (they leave out the renewal carrying them).
func (l *processLeases) entry(now time.Time) memberLease {
	stats := l.container.client.Stats()
	return memberLease{Until: now.Add(l.duration).UnixMilli(), Keys: l.activeKeys(now),
		Totals: &memberTotals{RequestCharge: stats.RequestCharge, Throttles: stats.Throttles, Requests: stats.Requests, At: now.UnixMilli()}}
}

// processLeases is the LeaseProvider of a process that shares the container
// with others.
type processLeases struct {
	container *ContainerClient
	pk        string
	id        string
	duration  time.Duration
	now       func() time.Time
	log       *slog.Logger
	requests  atomic.Int64 // requests sent for the membership

	mu          sync.Mutex
	live        []string            // live members, ordered by id, as of the last renewal
	liveByKey   map[string][]string // lease key → its live members, ordered by id
	renewedAt   time.Time           // zero until the first renewal
	etag        ETag
	dead        []string             // entries long dead, to prune with the next renewal
	used        map[string]time.Time // lease key → when a fetch of this process last used it
	lanes       *laneSet
	wholeLookAt map[string]time.Time // lease key → last idle look at the whole queue
}

func newProcessLeases(container *ContainerClient, o ProcessLeaseOptions, now func() time.Time, log *slog.Logger) *processLeases {
	return &processLeases{
		container: container, pk: instancePartitionKey("lease|" + membershipDocID), id: o.ProcessID,
		duration: o.LeaseDuration, now: now, log: log,
		liveByKey: map[string][]string{}, used: map[string]time.Time{},
		lanes: newLaneSet(), wholeLookAt: map[string]time.Time{},
	}
}

// run renews the lease every third of its duration until ctx ends, then
// gives it back.
func (l *processLeases) run(ctx context.Context) {
	tick := time.NewTicker(l.duration / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			leaveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := l.leave(leaveCtx); err != nil {
				l.log.Warn("cdb: could not give the process's slot lease back; it expires by itself", "process", l.id, "error", err)
			}
			cancel()
			return
		case <-tick.C:
			if err := l.renew(ctx); err != nil && ctx.Err() == nil {
				l.log.Warn("cdb: slot lease renewal failed; trying again at the next interval", "process", l.id, "error", err)
			}
		}
	}
}

// renew sets this process's entry and learns the live members: one PATCH,
// or a create when the document does not exist yet.
func (l *processLeases) renew(ctx context.Context) error {
	const op = "renew process lease"
	now := l.now()
	l.mu.Lock()
	prune, etag := l.dead, l.etag
	l.mu.Unlock()
	resp, err := l.patchEntry(ctx, now, prune, etag)
	if len(prune) > 0 && (IsPreconditionFailed(err) || isPatchRefused(err)) {
		resp, err = l.patchEntry(ctx, now, nil, "") // another process pruned first
	}
	if IsNotFound(err) {
		l.requests.Add(1)
		resp, err = l.createDocument(ctx, now)
		if IsConflict(err) {
			resp, err = l.patchEntry(ctx, now, nil, "")
		}
	}
	if err != nil {
		return fmt.Errorf("cdb: %s: %w", op, err)
	}
	var doc membershipDoc
	if err := json.Unmarshal(resp.Value, &doc); err != nil {
		return fmt.Errorf("cdb: %s: decode the membership document: %w", op, err)
	}
	l.adopt(doc, resp.ETag, now)
	return nil
}

func (l *processLeases) patchEntry(ctx context.Context, now time.Time, prune []string, etag ETag) (ItemResponse, error) {
	var ops PatchOperations
	ops.AppendSet("/members/"+l.id, l.entry(now)) // one operation, totals included
	opts := &ItemOptions{EnableContentResponseOnWrite: true}
	l.requests.Add(1)
	if len(prune) > 0 {
		for _, id := range prune {
			ops.AppendRemove("/members/" + id)
		}
		opts.IfMatch = &etag
	}
	return l.container.PatchItem(ctx, NewPartitionKeyString(l.pk), membershipDocID, ops, opts)
}

func (l *processLeases) createDocument(ctx context.Context, now time.Time) (ItemResponse, error) {
	body, err := json.Marshal(membershipDoc{ID: membershipDocID, PK: l.pk, Type: docMembership,
		Members: map[string]memberLease{l.id: l.entry(now)}})
	if err != nil {
		return ItemResponse{}, err
	}
	return l.container.CreateItem(ctx, NewPartitionKeyString(l.pk), body, &ItemOptions{EnableContentResponseOnWrite: true})
}

// adopt records the members a renewal returned.
func (l *processLeases) adopt(doc membershipDoc, etag ETag, now time.Time) {
	nowMs := now.UnixMilli()
	var live, dead []string
	byKey := map[string][]string{}
	for id, lease := range doc.Members {
		switch {
		case lease.Until > nowMs:
			live = append(live, id)
			for _, key := range lease.Keys {
				byKey[key] = append(byKey[key], id)
			}
		case nowMs-lease.Until > pruneDeadAfter*l.duration.Milliseconds() && processIDPattern.MatchString(id):
			dead = append(dead, id)
		}
	}
	sort.Strings(live)
	sort.Strings(dead)
	for _, ids := range byKey {
		sort.Strings(ids)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.live, l.liveByKey, l.renewedAt, l.etag = live, byKey, now, etag
	l.dead = dead[:min(len(dead), maxPrunedPerRenewal)]
}

// leave removes this process's entry, so the others take its share at
// their next renewal instead of after its lease expires.
func (l *processLeases) leave(ctx context.Context) error {
	var ops PatchOperations
	ops.AppendRemove("/members/" + l.id)
	l.requests.Add(1)
	_, err := l.container.PatchItem(ctx, NewPartitionKeyString(l.pk), membershipDocID, ops, nil)
	if IsNotFound(err) || isPatchRefused(err) {
		return nil // no document, or no entry (pruned): nothing to give back
	}
	l.mu.Lock()
	l.renewedAt = time.Time{}
	l.mu.Unlock()
	return err
}

// leads says this process is the first of the live members by id: the one
// that runs the container's chores (the reconciler's looks across every
// partition), so they cost one process's requests however many processes
// share the container. A process that cannot tell (not renewed yet, or its
// own lease lapsed) leads, so a chore is never left to nobody for long; a
// leader that leaves hands the chores on at the others' next renewal.
func (l *processLeases) leads() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.renewedAt.IsZero() || l.now().Sub(l.renewedAt) >= l.duration {
		return true
	}
	return len(l.live) == 0 || l.live[0] == l.id
}

// leadsChores says this process runs the container's chores: always
// without process leases (it cannot know the others), else when it leads
// them (processLeases.leads).
func (p *CosmosProvider) leadsChores() bool {
	return p.processLeases == nil || p.processLeases.leads()
}

// activeKeys are the lease keys this process's fetches used within a
// lease duration: the ones whose slots it takes a share of.
func (l *processLeases) activeKeys(now time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var keys []string
	for key, at := range l.used {
		if now.Sub(at) < l.duration {
			keys = append(keys, key)
		} else {
			delete(l.used, key)
		}
	}
	sort.Strings(keys)
	return keys
}

// shareLocked is this process's slots for a lease key, nil meaning all: it
// is the key's only live member, or not yet (or no longer) a member, or
// its own lease lapsed (it cannot tell who owns what, so it looks
// everywhere).
func (l *processLeases) shareLocked(key string) []int {
	if l.renewedAt.IsZero() || l.now().Sub(l.renewedAt) >= l.duration {
		return nil
	}
	members := l.liveByKey[key]
	n, rank := len(members), sort.SearchStrings(members, l.id)
	if n <= 1 || rank == n || members[rank] != l.id {
		return nil
	}
	return laneSlots(rank, n)
}

// Acquire gives the calling fetch a lane of this process's share: with k
// fetches of a queue at once, lane i gets every k-th slot of the share.
func (l *processLeases) Acquire(key string) ([]int, func()) {
	lane, active, release := l.lanes.take(key)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.used[key] = l.now()
	share := l.shareLocked(key)
	if share == nil {
		share = allSlots()
	}
	if active <= 1 {
		if len(share) == dispatchSlots {
			return nil, release
		}
		return share, release
	}
	var mine []int
	for i, s := range share {
		if i%active == lane%active {
			mine = append(mine, s)
		}
	}
	return mine, release
}

// idleScope is the slots an idle look at queue queries: the process's
// share, and the whole queue (nil) once per renewal interval (a third of
// the lease), so work in the slots of a process that died is found before
// its lease expires, and work in a slot that two processes' views of the
// members, one renewal apart, both leave to the other is found too. It
// replaces a look at the share, so it costs no extra request.
func (l *processLeases) idleScope(key string) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.used[key] = now
	share := l.shareLocked(key)
	if share == nil {
		return nil
	}
	if last, ok := l.wholeLookAt[key]; !ok || now.Sub(last) >= l.duration/3 {
		l.wholeLookAt[key] = now
		return nil
	}
	return share
}

func allSlots() []int {
	slots := make([]int, dispatchSlots)
	for i := range slots {
		slots[i] = i
	}
	return slots
}

// idleScoper is a LeaseProvider that narrows the idle look to this
// process's share.
type idleScoper interface {
	idleScope(key string) []int
}

var _ idleScoper = (*processLeases)(nil)

// ProcessLeaseState is what this process knows of the container's slot
// leases, as of its last renewal.
type ProcessLeaseState struct {
	ProcessID string
	Members   []string // the live processes, ordered by id
	// Shares are this process's slots per lease key (the queue and the
	// fetch's filters, e.g. "worker/nosession/default"), for the keys its
	// fetches used; nil: every slot.
	Shares    map[string][]int
	RenewedAt time.Time // zero before the first renewal that worked
	// Requests counts the requests sent for the membership so far
	// (renewals, the document's creation, the leave).
	Requests int64
}

// ErrNoProcessLeases is what ProcessLeases reports on a provider configured
// without Config.ProcessLeases.
var ErrNoProcessLeases = errors.New("cdb: process leases are not enabled (Config.ProcessLeases)")

// ProcessLeases reports this process's view of the slot leases it shares
// with the other processes on the container.
func (p *CosmosProvider) ProcessLeases() (ProcessLeaseState, error) {
	l := p.processLeases
	if l == nil {
		return ProcessLeaseState{}, ErrNoProcessLeases
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	shares := map[string][]int{}
	for key := range l.used {
		shares[key] = l.shareLocked(key)
	}
	return ProcessLeaseState{ProcessID: l.id, Members: append([]string(nil), l.live...), Shares: shares,
		RenewedAt: l.renewedAt, Requests: l.requests.Load()}, nil
}

// ProcessLeaseMember is one process's entry in the membership document.
type ProcessLeaseMember struct {
	Until time.Time // when its lease ends, by its own clock
	// Totals are its client's cumulative counts (Client.Stats) as of its
	// last renewal; nil from a build that publishes none.
	Totals *ProcessTotals
}

// ProcessTotals are a process's cumulative client counts, published with
// its process lease renewals. They start again from 0 when it restarts.
type ProcessTotals struct {
	RequestCharge float64   // RU, over all requests
	Throttles     int64     // 429 responses
	Requests      int64     // HTTP requests sent, retries included
	ReadAt        time.Time // when the process read them, by its own clock
}

// ReadProcessLeaseMembers reads the membership document as the store has
// it now: every process's lease end (live or not), by process id. It works
// on any provider of the container, with process leases or without (an
// operator's, say); an empty map means no process has joined.
func (p *CosmosProvider) ReadProcessLeaseMembers(ctx context.Context) (map[string]time.Time, error) {
	members, err := p.ReadProcessLeaseMembership(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(members))
	for id, m := range members {
		out[id] = m.Until
	}
	return out, nil
}

// ReadProcessLeaseMembership is ReadProcessLeaseMembers with each entry
// whole: its lease end and the totals it published (one read either way).
func (p *CosmosProvider) ReadProcessLeaseMembership(ctx context.Context) (map[string]ProcessLeaseMember, error) {
	resp, err := p.container.ReadItem(ctx, NewPartitionKeyString(instancePartitionKey("lease|"+membershipDocID)), membershipDocID, nil)
	if IsNotFound(err) {
		return map[string]ProcessLeaseMember{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cdb: read process leases: %w", err)
	}
	var doc membershipDoc
	if err := json.Unmarshal(resp.Value, &doc); err != nil {
		return nil, fmt.Errorf("cdb: read process leases: decode the membership document: %w", err)
	}
	out := make(map[string]ProcessLeaseMember, len(doc.Members))
	for id, lease := range doc.Members {
		m := ProcessLeaseMember{Until: time.UnixMilli(lease.Until)}
		if t := lease.Totals; t != nil {
			m.Totals = &ProcessTotals{RequestCharge: t.RequestCharge, Throttles: t.Throttles, Requests: t.Requests, ReadAt: time.UnixMilli(t.At)}
		}
		out[id] = m
	}
	return out, nil
}
