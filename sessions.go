package cdb

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Sessions pin an instance's session-bound activities to one worker
// (reference §2.6). duroxide keys a session by its id alone; here a session
// is keyed by (instance, session id) and its document lives in the
// instance's partition, next to the work items that name it. That is what
// lets a fetch claim the session in the same transactional batch that locks
// the item, and bump it in the same batch that acks the item. The runtime
// derives session ids per orchestration, so two instances sharing a session
// id is not something it does; if they did, each would get its own owner.

const docSession = "session"

// sessionDoc is a session's owner and lease.
type sessionDoc struct {
	ID           string `json:"id"`
	PK           string `json:"pk"`
	Type         string `json:"type"`
	Instance     string `json:"instance"`
	Session      string `json:"session"`
	Owner        string `json:"owner"`
	LockedUntil  int64  `json:"lockedUntil"`
	LastActivity int64  `json:"lastActivity"`
	ETag         ETag   `json:"_etag,omitempty"`
}

func sessionDocID(session string) string { return "s|" + session }

func sessionKey(instance string, session *string) string {
	if session == nil {
		return ""
	}
	return instancePartitionKey(instance) + "|" + *session
}

// sqlString is a Cosmos DB SQL string literal; conditions take no
// parameters, so strings are quoted with JSON's escaping.
func sqlString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// claimSessionWork locks a session-bound item and claims its session in one
// batch: the session must be free, expired or already ours.
func (p *CosmosProvider) claimSessionWork(ctx context.Context, c queueDoc, lockTimeout time.Duration, cfg *SessionFetchConfig, token string) (TransactionalBatchResponse, error) {
	now := p.nowMs()
	for _, create := range []bool{false, true} {
		b := p.container.NewTransactionalBatch(NewPartitionKeyString(c.PK))
		if create {
			body, err := json.Marshal(sessionDoc{ID: sessionDocID(*c.Session), PK: c.PK, Type: docSession, Instance: c.Instance,
				Session: *c.Session, Owner: cfg.OwnerID, LockedUntil: now + cfg.LockTimeout.Milliseconds(), LastActivity: now})
			if err != nil {
				return TransactionalBatchResponse{}, err
			}
			b.CreateItem(body, nil)
		} else {
			var ops PatchOperations
			ops.SetCondition("from c where c.owner = " + sqlString(cfg.OwnerID) + " or c.lockedUntil <= " + strconv.FormatInt(now, 10))
			ops.AppendSet("/owner", cfg.OwnerID)
			ops.AppendSet("/lockedUntil", now+cfg.LockTimeout.Milliseconds())
			ops.AppendSet("/lastActivity", now)
			b.PatchItem(sessionDocID(*c.Session), ops, nil)
		}
		b.PatchItem(c.ID, claimOps(token, now+lockTimeout.Milliseconds()), &TransactionalBatchItemOptions{IfMatch: &c.ETag})
		resp, err := p.container.ExecuteTransactionalBatch(ctx, b, &TransactionalBatchOptions{EnableContentResponseOnWrite: true})
		if err != nil {
			return resp, err
		}
		if resp.Success {
			return resp, nil
		}
		idx, ce, _ := resp.FailedOperation()
		switch {
		case idx == 0 && !create && ce != nil && ce.StatusCode == http.StatusNotFound:
			continue // no session document yet
		case idx == 0 && ce != nil && ce.StatusCode == http.StatusPreconditionFailed:
			p.contended.note("session:"+cfg.OwnerID, c.SessionKey, p.now())
			return resp, errContended
		case ce != nil && (ce.StatusCode == http.StatusPreconditionFailed || ce.StatusCode == http.StatusNotFound || ce.StatusCode == http.StatusConflict):
			return resp, errContended
		default:
			return resp, batchFailure("fetch_work_item", resp)
		}
	}
	return TransactionalBatchResponse{}, errContended
}

// claimOps lock a work item.
func claimOps(token string, until int64) PatchOperations {
	var ops PatchOperations
	ops.AppendSet("/lockToken", token)
	ops.AppendSet("/lockedUntil", until)
	ops.AppendIncrement("/attempts", 1)
	return ops
}

// touchSession is the batch operation that records activity on a session,
// taken with an ack or a renew of one of its items.
func touchSession(b *TransactionalBatch, session string, now int64) {
	var ops PatchOperations
	ops.AppendSet("/lastActivity", now)
	b.PatchItem(sessionDocID(session), ops, nil)
}

// RenewSessionLock extends the sessions of these owners that are still
// locked and not idle, and returns how many it extended. Idle sessions are
// left to expire.
func (p *CosmosProvider) RenewSessionLock(ctx context.Context, ownerIDs []string, extendFor, idleTimeout time.Duration) (int, error) {
	const op = "renew_session_lock"
	if len(ownerIDs) == 0 {
		return 0, nil
	}
	now := p.nowMs()
	idleCutoff := now - idleTimeout.Milliseconds()
	sessions, err := p.querySessions(ctx, "ARRAY_CONTAINS(@owners, c.owner) AND c.lockedUntil > @now AND c.lastActivity > @idle",
		[]QueryParameter{{Name: "@owners", Value: ownerIDs}, {Name: "@now", Value: now}, {Name: "@idle", Value: idleCutoff}})
	if err != nil {
		return 0, wrap(op, err)
	}
	renewed := 0
	for _, s := range sessions {
		var ops PatchOperations
		ops.SetCondition(fmt.Sprintf("from c where c.owner = %s and c.lockedUntil > %d and c.lastActivity > %d", sqlString(s.Owner), now, idleCutoff))
		ops.AppendSet("/lockedUntil", now+extendFor.Milliseconds())
		_, err := p.container.PatchItem(ctx, NewPartitionKeyString(s.PK), s.ID, ops, nil)
		switch {
		case err == nil:
			renewed++
		case IsPreconditionFailed(err) || IsNotFound(err):
		default:
			return renewed, wrap(op, err)
		}
	}
	return renewed, nil
}

// CleanupOrphanedSessions deletes expired sessions that no work item names,
// and returns how many it deleted.
func (p *CosmosProvider) CleanupOrphanedSessions(ctx context.Context, idleTimeout time.Duration) (int, error) {
	const op = "cleanup_orphaned_sessions"
	now := p.nowMs()
	sessions, err := p.querySessions(ctx, "c.lockedUntil <= @now", []QueryParameter{{Name: "@now", Value: now}})
	if err != nil {
		return 0, wrap(op, err)
	}
	deleted := 0
	for _, s := range sessions {
		key := NewPartitionKeyString(s.PK)
		res, err := p.container.QueryItems(ctx, "SELECT VALUE COUNT(1) FROM c WHERE c.pk = @pk AND c.type = @work AND c.session = @session",
			[]QueryParameter{{Name: "@pk", Value: s.PK}, {Name: "@work", Value: docWork}, {Name: "@session", Value: s.Session}},
			&QueryOptions{PartitionKey: &key})
		if err != nil {
			return deleted, wrap(op, err)
		}
		var n int
		if len(res.Items) == 1 {
			_ = json.Unmarshal(res.Items[0], &n)
		}
		if n > 0 {
			continue
		}
		etag := s.ETag
		_, err = p.container.DeleteItem(ctx, key, s.ID, &ItemOptions{IfMatch: &etag})
		switch {
		case err == nil:
			deleted++
		case IsPreconditionFailed(err) || IsNotFound(err):
		default:
			return deleted, wrap(op, err)
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
