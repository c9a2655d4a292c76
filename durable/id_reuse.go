package durable

import (
	"context"
	"errors"
	"fmt"

	"github.com/duroxide-go/cdb"
)

// ErrInstanceExists is matched (errors.Is) by the error of a start whose
// instance id is already taken (see IfExists).
var ErrInstanceExists = errors.New("durable: instance already exists")

// InstanceExistsError is Client.StartOrchestration's refusal of an id that
// is taken; it matches ErrInstanceExists.
type InstanceExistsError struct {
	Instance string // the id asked for
	// Status is the existing instance's status, read after the refusal.
	// State Queued says a start of the id is queued and its first turn has
	// not run (NotFound on a provider that cannot read a queued start,
	// where only its start's own write, cdb.ExclusiveStarter, counts it).
	Status Status
}

// Error names the instance and its state.
func (e *InstanceExistsError) Error() string {
	if e.Status.State == StateNotFound || e.Status.State == StateQueued {
		return fmt.Sprintf("durable: start orchestration %q: a start of the instance is already queued", e.Instance)
	}
	return fmt.Sprintf("durable: start orchestration %q: the instance already exists (%s)", e.Instance, e.Status.State)
}

// Is matches ErrInstanceExists.
func (e *InstanceExistsError) Is(target error) bool { return target == ErrInstanceExists }

// IfExists is what Client.StartOrchestration does when the instance id is
// taken: by an instance running, finished, or continued as new. A deleted
// instance's id is free again.
//
// On a provider that refuses a taken id in the start's own write
// (cdb.ExclusiveStarter, as the Cosmos DB provider does),
// the store decides, in the one request that enqueues the start: a start
// still queued takes the id too, and of two starts of a new id at the same
// moment exactly one is enqueued. On another provider the client reads
// the instance's status before it enqueues the start, so it sees an
// instance once its first turn has run: a start still queued is not seen,
// and two starts of a new id at the same moment both succeed; the runtime
// then runs the first and drops the second, as it drops every start of an
// id that is taken.
type IfExists int

const (
	// IfExistsFail refuses the start with an *InstanceExistsError (the
	// default).
	IfExistsFail IfExists = iota
	// IfExistsIgnore starts nothing and succeeds: the start is idempotent.
	IfExistsIgnore
	// IfExistsEnqueue reads nothing and enqueues the start, as duroxide's
	// client does; the runtime drops it if the id is taken.
	IfExistsEnqueue
)

// WithIfExists sets what Client.StartOrchestration does when the instance
// id is taken. Starts from orchestration code ignore it.
func WithIfExists(policy IfExists) StartOption { return policy }

func (p IfExists) applyStart(o *startOptions) { o.ifExists = p }

// startIfAbsent enqueues start through the provider's own refusal of a
// taken id (cdb.ExclusiveStarter), which policy turns into an
// *InstanceExistsError, reading the instance's status only then, or
// ignores.
func (c *Client) startIfAbsent(ctx context.Context, starter cdb.ExclusiveStarter, start cdb.StartOrchestrationMessage, policy IfExists) error {
	err := starter.EnqueueStartIfAbsent(ctx, start)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, cdb.ErrInstanceExists):
		return fmt.Errorf("durable: start orchestration %q: %w", start.Instance, err)
	case policy == IfExistsIgnore:
		return nil
	}
	exists := &InstanceExistsError{Instance: start.Instance}
	st, err := c.GetStatus(ctx, start.Instance)
	if err != nil {
		return fmt.Errorf("%w; reading its status failed: %w", exists, err)
	}
	exists.Status = st
	return exists
}

// checkInstanceFree applies policy to instance's id: an error when the id
// is taken and the policy refuses it, done when it is taken and the policy
// ignores it.
func (c *Client) checkInstanceFree(ctx context.Context, instance string, policy IfExists) (done bool, err error) {
	if policy == IfExistsEnqueue {
		return false, nil
	}
	st, err := c.GetStatus(ctx, instance)
	switch {
	case err != nil:
		return false, fmt.Errorf("durable: start orchestration %q: %w", instance, err)
	case st.State == StateNotFound:
		return false, nil
	case policy == IfExistsIgnore:
		return true, nil
	}
	return false, &InstanceExistsError{Instance: instance, Status: st}
}
