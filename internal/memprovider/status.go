package memprovider

import (
	"context"

	"github.com/duroxide-go/cdb"
)

// GetCustomStatus reports the custom status only when its version is newer
// than lastSeenVersion; an unknown instance reports no change.
func (p *Provider) GetCustomStatus(ctx context.Context, instance string, lastSeenVersion uint64) (*string, uint64, bool, error) {
	const op = "GetCustomStatus"
	if err := p.begin(ctx, op); err != nil {
		return nil, 0, false, err
	}
	defer p.mu.Unlock()
	inst := p.instances[instance]
	if inst == nil || inst.customStatusVersion <= lastSeenVersion {
		return nil, 0, false, nil
	}
	return cloneString(inst.customStatus), inst.customStatusVersion, true, nil
}

// mergedKV is the client's view of an instance's KV: kv_store overlaid with
// the current execution's kv_delta, tombstones hiding keys.
func (p *Provider) mergedKV(instance string) map[string]string {
	out := map[string]string{}
	for k, e := range p.kvStore[instance] {
		out[k] = e.value
	}
	for k, d := range p.kvDelta[instance] {
		if d.value == nil {
			delete(out, k)
		} else {
			out[k] = *d.value
		}
	}
	return out
}

// GetKVValue reads one key of the merged view.
func (p *Provider) GetKVValue(ctx context.Context, instance, key string) (string, bool, error) {
	const op = "GetKVValue"
	if err := p.begin(ctx, op); err != nil {
		return "", false, err
	}
	defer p.mu.Unlock()
	if d, ok := p.kvDelta[instance][key]; ok {
		if d.value == nil {
			return "", false, nil // tombstone
		}
		return *d.value, true, nil
	}
	if e, ok := p.kvStore[instance][key]; ok {
		return e.value, true, nil
	}
	return "", false, nil
}

// GetKVAllValues returns the whole merged view.
func (p *Provider) GetKVAllValues(ctx context.Context, instance string) (map[string]string, error) {
	const op = "GetKVAllValues"
	if err := p.begin(ctx, op); err != nil {
		return nil, err
	}
	defer p.mu.Unlock()
	return p.mergedKV(instance), nil
}

// GetInstanceStats reports the current execution's history count and stored
// bytes, the merged KV view's key count and value bytes, and the number of
// carry-forward events on the current execution's OrchestrationStarted
// (event 1). Nil means no instance row.
func (p *Provider) GetInstanceStats(ctx context.Context, instance string) (*cdb.SystemStats, error) {
	const op = "GetInstanceStats"
	if err := p.begin(ctx, op); err != nil {
		return nil, err
	}
	defer p.mu.Unlock()
	inst := p.instances[instance]
	if inst == nil {
		return nil, nil
	}
	stats := &cdb.SystemStats{}
	events := p.history[instance][inst.currentExecution]
	for _, data := range events {
		stats.HistoryEventCount++
		stats.HistorySizeBytes += uint64(len(data))
	}
	if data, ok := events[cdb.InitialEventID]; ok {
		// An undecodable event 1 carries no countable events.
		if ev, err := cdb.UnmarshalEvent(data); err == nil {
			if started, ok := ev.Kind.(cdb.OrchestrationStarted); ok {
				stats.QueuePendingCount = uint64(len(started.CarryForwardEvents))
			}
		}
	}
	for _, v := range p.mergedKV(instance) {
		stats.KVUserKeyCount++
		stats.KVTotalValueBytes += uint64(len(v))
	}
	return stats, nil
}
