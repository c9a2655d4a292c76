package memprovider

import (
	"context"
	"fmt"
	"time"

	"github.com/duroxide-go/cdb"
)

// EnqueueForWorker queues an ActivityExecuteMessage, unlocked and visible now, with
// its identity, session and tag.
func (p *Provider) EnqueueForWorker(ctx context.Context, item cdb.WorkItem) error {
	const op = "EnqueueForWorker"
	e, err := encodeWorkItem(item)
	if err != nil {
		return refuse(op, err.Error(), err)
	}
	if err := p.begin(ctx, op); err != nil {
		return err
	}
	defer p.mu.Unlock()
	p.insertWork(e, p.nowMs())
	p.notify()
	return nil
}

// FetchWorkItem peek-locks the first worker item (in enqueue order) that is
// visible, not validly locked, passes the session rule and the tag filter.
func (p *Provider) FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration,
	session *cdb.SessionFetchConfig, tags cdb.TagFilter) (cdb.WorkItem, string, uint32, error) {
	const op = "FetchWorkItem"
	if tags.Mode() == cdb.TagFilterNone {
		return nil, "", 0, nil // this worker takes no activities; storage is not touched
	}
	var (
		item    cdb.WorkItem
		token   string
		attempt uint32
	)
	err := p.waitFor(ctx, op, pollTimeout, func(now int64) (bool, error) {
		var err error
		item, token, attempt, err = p.fetchWorkLocked(op, now, lockTimeout, session, tags)
		return item != nil, err
	}, p.nextWorkerChange)
	if err != nil || item == nil {
		return nil, "", 0, err
	}
	return item, token, attempt, nil
}

// nextWorkerChange is the earliest store time after now at which a worker
// item becomes visible, a worker lock expires or a session lock expires.
func (p *Provider) nextWorkerChange(now int64) int64 {
	var next int64
	consider := func(t int64) {
		if t > now && (next == 0 || t < next) {
			next = t
		}
	}
	for _, r := range p.workQueue {
		consider(r.visibleAt)
		if r.lockToken != "" {
			consider(r.lockedUntil)
		}
	}
	for _, s := range p.sessions {
		consider(s.lockedUntil)
	}
	return next
}

// sessionEligible is the session rule: without a session config only
// session-less items; with one, also items whose session is owned by this
// owner with a valid lock, or has no valid lock at all.
func (p *Provider) sessionEligible(r *workRow, session *cdb.SessionFetchConfig, now int64) bool {
	if r.sessionID == nil {
		return true
	}
	if session == nil {
		return false
	}
	s := p.sessions[*r.sessionID]
	return s == nil || s.lockedUntil <= now || s.owner == session.OwnerID
}

func (p *Provider) fetchWorkLocked(op string, now int64, lockTimeout time.Duration,
	session *cdb.SessionFetchConfig, tags cdb.TagFilter) (cdb.WorkItem, string, uint32, error) {
	for _, r := range p.workQueue {
		if r.visibleAt > now || (r.lockToken != "" && r.lockedUntil > now) {
			continue
		}
		if !p.sessionEligible(r, session, now) || !tags.Matches(r.tag) {
			continue
		}
		item, err := cdb.UnmarshalWorkItem(r.item)
		if err != nil { // the store wrote these bytes; unreachable
			return nil, "", 0, refuse(op, fmt.Sprintf("Deserialization error: %v", err), err)
		}
		if r.sessionID != nil && session != nil {
			// Claim or refresh the session in the same step.
			p.sessions[*r.sessionID] = &sessionRow{
				owner:        session.OwnerID,
				lockedUntil:  after(now, session.LockTimeout),
				lastActivity: now,
			}
		}
		r.lockToken = p.newToken("wlock")
		r.lockedUntil = after(now, lockTimeout)
		r.attempts++
		item = cdb.WithVisibleAt(cdb.WithTraceContext(item, r.trace), time.UnixMilli(r.visibleAt))
		return item, r.lockToken, r.attempts, nil
	}
	return nil, "", 0, nil
}

// workByToken finds the worker row carrying token, valid or not.
func (p *Provider) workByToken(token string) *workRow {
	if token == "" {
		return nil
	}
	for _, r := range p.workQueue {
		if r.lockToken == token {
			return r
		}
	}
	return nil
}

// touchSession bumps last_activity_at of a session still locked by someone,
// so a session taken over after its lock expired is not refreshed by the
// old owner's work.
func (p *Provider) touchSession(sessionID *string, now int64) {
	if sessionID == nil {
		return
	}
	if s := p.sessions[*sessionID]; s != nil && s.lockedUntil > now {
		s.lastActivity = now
	}
}

// AckWorkItem deletes the locked item, only while its lock is valid, and
// enqueues the completion (nil: delete only) in the same step.
func (p *Provider) AckWorkItem(ctx context.Context, lockToken string, completion cdb.WorkItem) error {
	const op = "AckWorkItem"
	var enc *encodedOrchItem
	if completion != nil {
		e, err := encodeOrchItem(completion)
		if err != nil {
			return refuse(op, err.Error(), err)
		}
		if e.kind != "ActivityCompleted" && e.kind != "ActivityFailed" {
			return refuse(op, "Invalid completion type for worker ack", cdb.ErrInvalidInput)
		}
		enc = &e
	}
	if err := p.begin(ctx, op); err != nil {
		return err
	}
	defer p.mu.Unlock()
	now := p.nowMs()
	r := p.workByToken(lockToken)
	if r == nil || r.lockedUntil <= now {
		return refuse(op, "Activity was cancelled or lock expired (worker queue row not found or lock invalid)", cdb.ErrInvalidLockToken)
	}
	p.removeWork(func(w *workRow) bool { return w == r })
	p.touchSession(r.sessionID, now)
	if enc != nil {
		p.insertOrch(*enc, now)
	}
	p.notify()
	return nil
}

// RenewWorkItemLock extends a still-valid worker lock; failure is the
// worker's cancellation signal.
func (p *Provider) RenewWorkItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	const op = "RenewWorkItemLock"
	if err := p.begin(ctx, op); err != nil {
		return err
	}
	defer p.mu.Unlock()
	now := p.nowMs()
	r := p.workByToken(lockToken)
	if r == nil || r.lockedUntil <= now {
		return refuse(op, "Lock renewal failed - activity was cancelled or lock expired", cdb.ErrInvalidLockToken)
	}
	r.lockedUntil = after(now, extendFor)
	p.touchSession(r.sessionID, now)
	return nil
}

// WorkItemLockRemaining is how long the worker lock token has left by the
// store's clock (cdb.LockRemainingReporter): zero once it has expired, and
// false when no item carries the token (acked, or fetched again since).
func (p *Provider) WorkItemLockRemaining(token string) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.workByToken(token)
	if r == nil {
		return 0, false
	}
	return p.remaining(r.lockedUntil), true
}

// AbandonWorkItem unlocks the item, visible again after delay. The token
// must still be on the row (it may have expired, as long as nobody has
// fetched the item since).
func (p *Provider) AbandonWorkItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	const op = "AbandonWorkItem"
	if err := p.begin(ctx, op); err != nil {
		return err
	}
	defer p.mu.Unlock()
	now := p.nowMs()
	r := p.workByToken(lockToken)
	if r == nil {
		return refuse(op, "Invalid lock token or already acked", cdb.ErrInvalidLockToken)
	}
	r.lockToken = ""
	r.lockedUntil = 0
	r.visibleAt = after(now, delay)
	if ignoreAttempt && r.attempts > 0 {
		r.attempts--
	}
	p.notify()
	return nil
}

// RenewSessionLock extends the sessions of these owners that are still
// locked and not idle, and returns how many it renewed.
func (p *Provider) RenewSessionLock(ctx context.Context, ownerIDs []string, extendFor, idleTimeout time.Duration) (int, error) {
	const op = "RenewSessionLock"
	if err := p.begin(ctx, op); err != nil {
		return 0, err
	}
	defer p.mu.Unlock()
	if len(ownerIDs) == 0 {
		return 0, nil
	}
	now := p.nowMs()
	owners := map[string]bool{}
	for _, o := range ownerIDs {
		owners[o] = true
	}
	idleCutoff := now - idleTimeout.Milliseconds()
	n := 0
	for _, s := range p.sessions {
		if owners[s.owner] && s.lockedUntil > now && s.lastActivity > idleCutoff {
			s.lockedUntil = after(now, extendFor)
			n++
		}
	}
	return n, nil
}

// CleanupOrphanedSessions deletes sessions whose lock has expired and that no
// worker item references. idleTimeout is unused, as in SQLite.
func (p *Provider) CleanupOrphanedSessions(ctx context.Context, idleTimeout time.Duration) (int, error) {
	const op = "CleanupOrphanedSessions"
	if err := p.begin(ctx, op); err != nil {
		return 0, err
	}
	defer p.mu.Unlock()
	now := p.nowMs()
	referenced := map[string]bool{}
	for _, r := range p.workQueue {
		if r.sessionID != nil {
			referenced[*r.sessionID] = true
		}
	}
	n := 0
	for id, s := range p.sessions {
		if s.lockedUntil < now && !referenced[id] {
			delete(p.sessions, id)
			n++
		}
	}
	if n > 0 {
		p.notify()
	}
	return n, nil
}
