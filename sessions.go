package cdb

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Sessions pin activities to one worker. As in duroxide, a
// session is keyed by its id alone: the activities of every instance that
// names session "gpu-0" go to the owner of "gpu-0". So a session's
// document lives in a partition of its own, not in any instance's, and a
// fetch of a session-bound item takes two writes in two partitions: first
// the session claim (a conditional write in the session's partition), then
// the item's lock (If-Match in the instance's partition). There is no
// transaction between them, and none is needed: a claim whose item lock
// then fails only makes this owner the session's owner, which it would have
// become with the item, until the claim expires or its owner takes the
// session's items. Acks and renewals of items do not write the session:
// this process notes their time, and RenewSessionLock, the owner's
// heartbeat, counts it as the session's last activity (and writes it).

const (
	docSession   = "session"
	sessionDocID = "session" // one per partition; no instance document has this id
)

// sessionDoc is a session's owner and lease.
type sessionDoc struct {
	ID           string `json:"id"`
	PK           string `json:"pk"`
	Type         string `json:"type"`
	Session      string `json:"session"`
	Owner        string `json:"owner"`
	LockedUntil  int64  `json:"lockedUntil"`
	LastActivity int64  `json:"lastActivity"`
	ETag         ETag   `json:"_etag,omitempty"`
}

// sessionPartitionKey is the partition of a session's document. It shares
// the instances' encoding (a hash when long); an instance literally named
// "session|<id>" would share the partition, which is harmless: the ids and
// types differ.
func sessionPartitionKey(session string) string {
	return instancePartitionKey("session|" + session)
}

// sqlString is a Cosmos DB SQL string literal; conditions take no
// parameters, so strings are quoted with JSON's escaping.
func sqlString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// sessionBook is what this process knows of sessions: their owners and
// lock expiries as last seen (from its own claims, and from claims it found
// another owner holding), and when it last claimed, acked or renewed an
// item of each. Correctness never depends on it: the book only keeps the
// fetch from asking again about sessions owned elsewhere, and carries the
// activity the heartbeat reports.
type sessionBook struct {
	mu    sync.Mutex
	notes map[string]*sessionNote
}

type sessionNote struct {
	owner        string
	here         bool // the owner is one of this process's: it claimed or renewed the session here
	lockedUntil  int64
	lastActivity int64
}

// maxSessionNotes bounds the book; expired notes go first.
const maxSessionNotes = 4096

func newSessionBook() *sessionBook { return &sessionBook{notes: map[string]*sessionNote{}} }

func (b *sessionBook) note(session string, now int64) *sessionNote {
	n, ok := b.notes[session]
	if !ok {
		if len(b.notes) >= maxSessionNotes {
			for id, old := range b.notes {
				if old.lockedUntil <= now {
					delete(b.notes, id)
				}
			}
		}
		n = &sessionNote{}
		b.notes[session] = n
	}
	return n
}

// owned records that owner holds the session until lockedUntil; here says
// the owner is one of this process's.
func (b *sessionBook) owned(session, owner string, here bool, lockedUntil, now int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.note(session, now)
	n.owner, n.here, n.lockedUntil = owner, here, lockedUntil
}

// holderHere is the owner of this process that holds the session now, as
// far as this process knows.
func (b *sessionBook) holderHere(session string, now int64) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, ok := b.notes[session]
	if !ok || !n.here || n.lockedUntil <= now {
		return "", false
	}
	return n.owner, true
}

// touched records activity of this process on the session.
func (b *sessionBook) touched(session string, now int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.note(session, now)
	n.lastActivity = max(n.lastActivity, now)
}

func (b *sessionBook) known(session string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.notes[session]
	return ok
}

func (b *sessionBook) lastActivity(session string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n, ok := b.notes[session]; ok {
		return n.lastActivity
	}
	return 0
}

func (b *sessionBook) forget(session string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.notes, session)
}

// heldElsewhere lists the sessions another owner than owner holds now, for
// the candidate query to leave out until their locks end.
func (b *sessionBook) heldElsewhere(owner string, now int64) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for id, n := range b.notes {
		if n.owner != owner && n.owner != "" && n.lockedUntil > now && len(out) < maxSkipped {
			out = append(out, id)
		}
	}
	return out
}

// holdsAny says owner holds a session now, as far as this process knows.
func (b *sessionBook) holdsAny(owner string, now int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range b.notes {
		if n.owner == owner && n.lockedUntil > now {
			return true
		}
	}
	return false
}

// sessionLook is what one look at the worker queue learned of sessions, so
// it asks about each session once.
type sessionLook struct {
	claimed map[string]bool // by this owner, in this look
	missed  map[string]bool // held by another owner
}

func newSessionLook() sessionLook {
	return sessionLook{claimed: map[string]bool{}, missed: map[string]bool{}}
}

// sessionReady claims the session for cfg's owner unless this look already
// did, or found it held elsewhere; false means another owner holds it.
func (p *CosmosProvider) sessionReady(ctx context.Context, look sessionLook, session string, cfg *SessionFetchConfig) (bool, error) {
	switch {
	case look.claimed[session]:
		return true, nil
	case look.missed[session]:
		return false, nil
	}
	ok, err := p.claimSession(ctx, session, cfg)
	if err != nil {
		return false, err
	}
	if ok {
		look.claimed[session] = true
	} else {
		look.missed[session] = true
	}
	return ok, nil
}

// maxClaimTries bounds the create/patch exchanges of one session claim.
const maxClaimTries = 4

// claimSession makes cfg's owner the session's owner for cfg.LockTimeout,
// if the session is free, expired or already its own: a conditional PATCH of
// the session document, or its creation. It reports false when another
// owner holds the session, and remembers that owner until its lock ends.
func (p *CosmosProvider) claimSession(ctx context.Context, session string, cfg *SessionFetchConfig) (bool, error) {
	pk := NewPartitionKeyString(sessionPartitionKey(session))
	create := !p.sessions.known(session) // a session seen before most likely has a document
	for range maxClaimTries {
		now, until := p.expiredByMs(), p.lockUntil(cfg.LockTimeout)
		var err error
		if create {
			err = p.createSession(ctx, pk, session, cfg.OwnerID, now, until)
		} else {
			err = p.patchSession(ctx, pk, session, cfg.OwnerID, now, until)
		}
		switch {
		case err == nil:
			p.sessions.owned(session, cfg.OwnerID, true, until, now)
			p.sessions.touched(session, now)
			return true, nil
		case create && IsConflict(err), IsOutcomeUnknown(err):
			// The document exists, or our own write may have landed: the
			// conditional patch decides (it accepts our own claim).
			create = false
		case !create && IsNotFound(err):
			create = true
		case !create && IsPreconditionFailed(err):
			held, err := p.readSessionOwner(ctx, pk, session, cfg.OwnerID)
			if err != nil || held {
				return false, err
			}
			// It expired or went away since: claim it again.
		default:
			return false, err
		}
	}
	return false, nil
}

func (p *CosmosProvider) createSession(ctx context.Context, pk PartitionKey, session, owner string, now, until int64) error {
	body, err := json.Marshal(sessionDoc{ID: sessionDocID, PK: sessionPartitionKey(session), Type: docSession,
		Session: session, Owner: owner, LockedUntil: until, LastActivity: now})
	if err != nil {
		return err
	}
	_, err = p.container.CreateItem(ctx, pk, body, nil)
	return err
}

func (p *CosmosProvider) patchSession(ctx context.Context, pk PartitionKey, session, owner string, now, until int64) error {
	var ops PatchOperations
	ops.SetCondition("from c where c.owner = " + sqlString(owner) + " or c.lockedUntil <= " + strconv.FormatInt(now, 10))
	ops.AppendSet("/owner", owner)
	ops.AppendSet("/lockedUntil", until)
	ops.AppendSet("/lastActivity", now)
	_, err := p.container.PatchItem(ctx, pk, sessionDocID, ops, nil)
	return err
}

// readSessionOwner reads a session whose claim was refused and notes its
// owner; held reports that another owner than owner holds it now.
func (p *CosmosProvider) readSessionOwner(ctx context.Context, pk PartitionKey, session, owner string) (held bool, err error) {
	resp, err := p.container.ReadItem(ctx, pk, sessionDocID, nil)
	if IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var s sessionDoc
	if err := json.Unmarshal(resp.Value, &s); err != nil {
		return false, fmt.Errorf("decode session %q: %w", session, err)
	}
	now := p.nowMs()
	p.sessions.owned(session, s.Owner, s.Owner == owner, s.LockedUntil, now)
	return s.Owner != owner && s.LockedUntil > now, nil
}

// noteSessionActivity records an ack or renewal of a session-bound item; the
// owner's next RenewSessionLock counts it (in duroxide, both bump the
// session's last activity).
func (p *CosmosProvider) noteSessionActivity(lock *workLock) {
	if lock.doc.Session != nil {
		p.sessions.touched(*lock.doc.Session, p.nowMs())
	}
}

// RenewSessionLock extends the sessions of these owners that are still
// locked and not idle, and returns how many it extended. A session's last
// activity is the later of its document's (its claim, or the last renewal)
// and this process's latest ack or renewal of one of its items. Idle
// sessions are left to expire.
func (p *CosmosProvider) RenewSessionLock(ctx context.Context, ownerIDs []string, extendFor, idleTimeout time.Duration) (int, error) {
	const op = "RenewSessionLock"
	if len(ownerIDs) == 0 {
		return 0, nil
	}
	now := p.nowMs()
	idleCutoff := now - idleTimeout.Milliseconds()
	sessions, err := p.querySessions(ctx, "ARRAY_CONTAINS(@owners, c.owner) AND c.lockedUntil > @now",
		[]QueryParameter{{Name: "@owners", Value: ownerIDs}, {Name: "@now", Value: now}})
	if err != nil {
		return 0, asOperation(op, err)
	}
	renewed := 0
	for _, s := range sessions {
		last := max(s.LastActivity, p.sessions.lastActivity(s.Session))
		if last <= idleCutoff {
			continue
		}
		until := p.lockUntil(extendFor)
		var ops PatchOperations
		ops.SetCondition(fmt.Sprintf("from c where c.owner = %s and c.lockedUntil > %d", sqlString(s.Owner), now))
		ops.AppendSet("/lockedUntil", until)
		ops.AppendSet("/lastActivity", last)
		_, err := p.container.PatchItem(ctx, NewPartitionKeyString(s.PK), s.ID, ops, nil)
		switch {
		case err == nil:
			renewed++
			p.sessions.owned(s.Session, s.Owner, true, until, now)
		case IsPreconditionFailed(err) || IsNotFound(err):
			// It was these owners' and locked when queried: it expired, or
			// another owner took it, meanwhile.
			p.tel.lockLost(ctx, lockKindSession)
		default:
			return renewed, asOperation(op, err)
		}
	}
	return renewed, nil
}

// CleanupOrphanedSessions deletes expired sessions that no work item of any
// instance names, and returns how many it deleted.
func (p *CosmosProvider) CleanupOrphanedSessions(ctx context.Context, idleTimeout time.Duration) (int, error) {
	const op = "CleanupOrphanedSessions"
	now := p.expiredByMs()
	sessions, err := p.querySessions(ctx, "c.lockedUntil <= @now", []QueryParameter{{Name: "@now", Value: now}})
	if err != nil {
		return 0, asOperation(op, err)
	}
	deleted := 0
	for _, s := range sessions {
		n, err := p.countPerRange(ctx, "c.type = @work AND c.session = @session",
			[]QueryParameter{{Name: "@work", Value: docWork}, {Name: "@session", Value: s.Session}})
		if err != nil {
			return deleted, asOperation(op, err)
		}
		if n > 0 {
			continue
		}
		// A claim since the query changed the ETag: the session stays.
		etag := s.ETag
		_, err = p.container.DeleteItem(ctx, NewPartitionKeyString(s.PK), s.ID, &ItemOptions{IfMatch: &etag})
		switch {
		case err == nil:
			deleted++
			p.sessions.forget(s.Session)
		case IsPreconditionFailed(err) || IsNotFound(err):
		default:
			return deleted, asOperation(op, err)
		}
	}
	return deleted, nil
}

// querySessions runs a cross-partition filter query over session documents.
func (p *CosmosProvider) querySessions(ctx context.Context, where string, params []QueryParameter) ([]sessionDoc, error) {
	res, err := p.container.QueryItems(ctx, "SELECT * FROM c WHERE c.type = @type AND "+where,
		append([]QueryParameter{{Name: "@type", Value: docSession}}, params...), nil)
	if err != nil {
		return nil, err
	}
	out := make([]sessionDoc, 0, len(res.Items))
	for _, raw := range res.Items {
		var s sessionDoc
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("decode session: %w", err)
		}
		out = append(out, s)
	}
	return out, nil
}
