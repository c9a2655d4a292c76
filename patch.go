package cdb

// Partial document update: the operations of a PATCH and their wire form.

import (
	"encoding/json"
	"fmt"
	"strings"
)

// PatchOperations is a list of partial-update operations, at most 10, with
// an optional condition. Paths are JSON Pointers ("/a/b"; escape ~ as ~0 and
// / as ~1).
type PatchOperations struct {
	condition  *string
	operations []patchOperation
}

type patchOperation struct {
	op       string
	path     string
	from     string
	value    any
	hasValue bool
}

func (p *PatchOperations) append(op, path string, value any, hasValue bool) {
	p.operations = append(p.operations, patchOperation{op: op, path: path, value: value, hasValue: hasValue})
}

// AppendAdd adds or replaces a property; in an array it inserts ("/-" appends).
func (p *PatchOperations) AppendAdd(path string, value any) { p.append("add", path, value, true) }

// AppendSet sets a property; in an array it replaces the element.
func (p *PatchOperations) AppendSet(path string, value any) { p.append("set", path, value, true) }

// AppendReplace replaces a property that must exist.
func (p *PatchOperations) AppendReplace(path string, value any) {
	p.append("replace", path, value, true)
}

// AppendRemove removes a property that must exist.
func (p *PatchOperations) AppendRemove(path string) { p.append("remove", path, nil, false) }

// AppendIncrement adds by to a number, creating it when absent.
func (p *PatchOperations) AppendIncrement(path string, by int64) { p.append("incr", path, by, true) }

// AppendMove moves the value at from to path.
func (p *PatchOperations) AppendMove(from, path string) {
	p.operations = append(p.operations, patchOperation{op: "move", path: path, from: from})
}

// SetCondition makes the patch conditional on a "FROM c WHERE ..." predicate:
// 412 when it is false.
func (p *PatchOperations) SetCondition(cond string) { p.condition = &cond }

// Len is the number of operations.
func (p PatchOperations) Len() int { return len(p.operations) }

// MarshalJSON renders the PATCH body: {"condition":..,"operations":[..]}.
func (p PatchOperations) MarshalJSON() ([]byte, error) { return p.encode("PatchOperations") }

type patchOperationWire struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	From  string          `json:"from,omitempty"`
	Value json.RawMessage `json:"value,omitempty"` // "null" is kept: a set to null is a value
}

type patchBodyWire struct {
	Condition  *string              `json:"condition,omitempty"`
	Operations []patchOperationWire `json:"operations"`
}

// encode validates and renders the operations. The condition is JSON-encoded
// like any string (the Go SDK's sprintf would break on a quote).
func (p PatchOperations) encode(op string) ([]byte, error) {
	if err := p.validate(op); err != nil {
		return nil, err
	}
	wire := patchBodyWire{Condition: p.condition, Operations: make([]patchOperationWire, len(p.operations))}
	for i, o := range p.operations {
		w := patchOperationWire{Op: o.op, Path: o.path, From: o.from}
		if o.hasValue {
			v, err := json.Marshal(o.value)
			if err != nil {
				return nil, invalid(op, "patch", ErrInvalidPatch, "operation %d (%s %s): value: %v", i, o.op, o.path, err)
			}
			w.Value = v
		}
		wire.Operations[i] = w
	}
	b, err := json.Marshal(wire)
	if err != nil {
		return nil, fmt.Errorf("cdb: %s: encoding patch: %w", op, err)
	}
	return b, nil
}

func (p PatchOperations) validate(op string) error {
	n := len(p.operations)
	if n == 0 {
		return invalid(op, "patch", ErrInvalidPatch, "no operations")
	}
	if n > MaxPatchOperations {
		return invalid(op, "patch", ErrTooManyPatchOperations, "%d operations, %d allowed (%d over)", n, MaxPatchOperations, n-MaxPatchOperations)
	}
	for i, o := range p.operations {
		if !strings.HasPrefix(o.path, "/") {
			return invalid(op, "patch", ErrInvalidPatch, "operation %d (%s): path %q is not a JSON Pointer", i, o.op, o.path)
		}
		if o.op == "move" && !strings.HasPrefix(o.from, "/") {
			return invalid(op, "patch", ErrInvalidPatch, "operation %d (move): from %q is not a JSON Pointer", i, o.from)
		}
	}
	return nil
}
