package cdb

import (
	"context"
	"testing"
	"time"

	"github.com/duroxide-go/cdb/internal/hostspeed"
)

// A gauge sample costs five queries per partition key range (two for the
// queues, one for the outbox, two for the held messages), whatever is
// queued; the RU each costs on the in-memory account is logged, as
// ARCHITECTURE.md (Telemetry) states it.
func TestGaugeSampleCostsFiveQueriesPerPartitionKeyRange(t *testing.T) {
	for _, ranges := range []int{1, 4} {
		ctx, cancel := context.WithTimeout(context.Background(), hostspeed.Scale(time.Minute))
		defer cancel()
		acct := NewFakeAccount(FakeAccountOptions{PartitionKeyRanges: ranges})
		p, err := NewProvider(ctx, Config{Client: acct.Client(), ShortPolling: true, GaugeInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		for _, instance := range []string{"a", "b", "c"} {
			if err := p.EnqueueForOrchestrator(ctx, StartOrchestrationMessage{Instance: instance, Orchestration: "O", Input: "{}", ExecutionID: InitialExecutionID}, 0); err != nil {
				t.Fatal(err)
			}
			if err := p.EnqueueForWorker(ctx, ActivityExecuteMessage{Instance: instance, ExecutionID: 1, ID: 2, Name: "A", Input: "{}"}); err != nil {
				t.Fatal(err)
			}
		}
		queries := map[string]int{"queues": 2, "outbox": 1, "held messages": 2} // per range
		var requests int64
		for _, part := range p.queueSampleParts() {
			before := p.client.Stats()
			if err := part.fill(ctx, &QueueSample{Time: p.now()}, nil); err != nil {
				t.Fatalf("%s: %v", part.what, err)
			}
			after := p.client.Stats()
			sent := after.Requests - before.Requests
			requests += sent
			if want := int64(queries[part.what] * ranges); sent != want {
				t.Errorf("%d ranges: the %s sample sent %d requests, want %d", ranges, part.what, sent, want)
			}
			t.Logf("%d ranges: %s: %d requests, %.2f RU (%.2f RU a query)", ranges, part.what, sent,
				after.RequestCharge-before.RequestCharge, (after.RequestCharge-before.RequestCharge)/float64(sent))
		}
		before := p.client.Stats()
		p.sampleLeaseSlots(ctx)
		if sent := p.client.Stats().Requests - before.Requests; sent != 0 {
			t.Errorf("the lease slots cost %d requests, want none", sent)
		}
		if want := int64(5 * ranges); requests != want {
			t.Errorf("%d ranges: a sample sent %d requests, want %d", ranges, requests, want)
		}
	}
}
