package durable

import (
	"fmt"

	"github.com/duroxide-go/cdb"
)

// limitViolation checks the limits the runtime enforces (duroxide's limit
// constants and its validate_limits) on a turn: the custom status it sets,
// the tags of the activities it schedules, the KV values it writes and the
// number of KV keys the execution ends up with. It returns "" when the turn
// is within them.
func limitViolation(delta, execution []cdb.Event, kvSnapshot map[string]cdb.KVEntry) string {
	if s := lastCustomStatus(delta); s != nil && len(*s) > cdb.MaxCustomStatusBytes {
		return fmt.Sprintf("Custom status size (%d bytes) exceeds limit (%d bytes)", len(*s), cdb.MaxCustomStatusBytes)
	}
	for _, ev := range delta {
		switch k := ev.Kind.(type) {
		case cdb.ActivityScheduled:
			if k.Tag != nil && len(*k.Tag) > cdb.MaxTagNameBytes {
				return fmt.Sprintf("Activity '%s' tag size (%d bytes) exceeds limit (%d bytes)", k.Name, len(*k.Tag), cdb.MaxTagNameBytes)
			}
		case cdb.KeyValueSet:
			if len(k.Value) > cdb.MaxKVValueBytes {
				return fmt.Sprintf("KV value for key '%s' (%d bytes) exceeds limit (%d bytes)", k.Key, len(k.Value), cdb.MaxKVValueBytes)
			}
		}
	}
	if n := kvKeyCount(execution, kvSnapshot); n > cdb.MaxKVKeys {
		return fmt.Sprintf("KV key count (%d) exceeds limit (%d)", n, cdb.MaxKVKeys)
	}
	return ""
}

// lastCustomStatus is the last status a delta sets (nil if it sets none or
// clears it).
func lastCustomStatus(delta []cdb.Event) *string {
	var last *string
	for _, ev := range delta {
		if k, ok := ev.Kind.(cdb.CustomStatusUpdated); ok {
			last = k.Status
		}
	}
	return last
}

// kvKeyCount is the number of keys after the execution's KV events are
// applied to the snapshot of earlier executions.
func kvKeyCount(execution []cdb.Event, snapshot map[string]cdb.KVEntry) int {
	keys := map[string]bool{}
	for k := range snapshot {
		keys[k] = true
	}
	for _, ev := range execution {
		switch k := ev.Kind.(type) {
		case cdb.KeyValueSet:
			keys[k.Key] = true
		case cdb.KeyValueCleared:
			delete(keys, k.Key)
		case cdb.KeyValuesCleared:
			clear(keys)
		}
	}
	return len(keys)
}
