package handoff

import "sync"

// LockTable maps this process's lock tokens to their state. The lock
// itself lives in the store; the table keeps what a later ack, renewal or
// release needs to write it back conditionally. The zero value is not
// ready: use NewLockTable.
type LockTable[T any] struct {
	mu *sync.Mutex
	m  map[string]T
}

// NewLockTable is an empty table.
func NewLockTable[T any]() LockTable[T] {
	return LockTable[T]{mu: &sync.Mutex{}, m: map[string]T{}}
}

// Get is token's entry.
func (t LockTable[T]) Get(token string) (T, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.m[token]
	return v, ok
}

// Put records token's entry.
func (t LockTable[T]) Put(token string, v T) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[token] = v
}

// Remove forgets token.
func (t LockTable[T]) Remove(token string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, token)
}

// Any says whether some entry satisfies match, which runs under the
// table's mutex.
func (t LockTable[T]) Any(match func(T) bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, v := range t.m {
		if match(v) {
			return true
		}
	}
	return false
}

// Values are the current entries.
func (t LockTable[T]) Values() []T {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]T, 0, len(t.m))
	for _, v := range t.m {
		out = append(out, v)
	}
	return out
}
