package bench

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/durable"
)

type tl struct {
	cdb.Provider
	mu sync.Mutex
	ev map[string][]string
	t0 time.Time
}

func (p *tl) log(inst, what string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ev[inst] = append(p.ev[inst], fmt.Sprintf("%6dms %s", time.Since(p.t0).Milliseconds(), what))
}

func (p *tl) FetchOrchestrationItem(ctx context.Context, a, b time.Duration, f *cdb.DispatcherCapabilityFilter) (*cdb.OrchestrationItem, string, uint32, error) {
	it, tok, at, err := p.Provider.FetchOrchestrationItem(ctx, a, b, f)
	if it != nil {
		p.log(it.Instance, fmt.Sprintf("orch fetch msgs=%d tok=%.12s", len(it.Messages), tok))
	}
	return it, tok, at, err
}
func (p *tl) AckOrchestrationItem(ctx context.Context, lockToken string, executionID uint64, historyDelta []cdb.Event, workerItems, orchestratorItems []cdb.WorkItem, metadata cdb.ExecutionMetadata, cancelled []cdb.ScheduledActivityIdentifier) error {
	inst := ""
	if len(historyDelta) > 0 {
		inst = historyDelta[0].InstanceID
	}
	err := p.Provider.AckOrchestrationItem(ctx, lockToken, executionID, historyDelta, workerItems, orchestratorItems, metadata, cancelled)
	p.log(inst, fmt.Sprintf("orch ack work=%d err=%v", len(workerItems), err))
	return err
}
func (p *tl) FetchWorkItem(ctx context.Context, a, b time.Duration, s *cdb.SessionFetchConfig, t cdb.TagFilter) (cdb.WorkItem, string, uint32, error) {
	it, tok, at, err := p.Provider.FetchWorkItem(ctx, a, b, s, t)
	if it != nil {
		act := it.(cdb.ActivityExecuteMessage)
		p.log(act.Instance, fmt.Sprintf("work fetch %d tok=%.6s", act.ID, tok))
	}
	return it, tok, at, err
}
func (p *tl) AckWorkItem(ctx context.Context, tok string, c cdb.WorkItem) error {
	err := p.Provider.AckWorkItem(ctx, tok, c)
	if c != nil {
		p.log(c.InstanceID(), fmt.Sprintf("work ack err=%v", err))
	}
	return err
}

func TestTimelineTmp(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Latency: 70 * time.Millisecond})
	prov, _ := cdb.NewProvider(context.Background(), cdb.Config{Client: acct.Client()})
	p := &tl{Provider: prov, ev: map[string][]string{}, t0: time.Now()}
	reg, _ := newRegistry(10 * time.Millisecond)
	rt, err := durable.Start(context.Background(), p, reg, durable.Options{OrchestrationConcurrency: 16, WorkerConcurrency: 16, MinPollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Shutdown(context.Background())
	var wg sync.WaitGroup
	type res struct {
		id string
		d  time.Duration
	}
	var mu sync.Mutex
	var out []res
	sem := make(chan struct{}, 20)
	for i := 0; i < 200; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			defer func() { <-sem }()
			st := time.Now()
			p.log(id, "START")
			_ = rt.Client().StartOrchestration(context.Background(), id, fanOutName, `{"task_count":5}`, durable.WithIfExists(durable.IfExistsEnqueue))
			_, _ = rt.Client().WaitForCompletion(context.Background(), id, time.Minute)
			p.log(id, "DONE")
			mu.Lock()
			out = append(out, res{id, time.Since(st)})
			mu.Unlock()
		}(fmt.Sprintf("o%d", i))
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].d > out[j].d })
	out = out[40:]; sort.Slice(out, func(i, j int) bool { return out[i].d > out[j].d }); fmt.Println("p50", out[len(out)/2].d, "p10", out[len(out)*9/10].d, "p90", out[len(out)/10].d); for _, r := range out[len(out)/2-2 : len(out)/2+1] {
		fmt.Println("==", r.id, r.d)
		for _, e := range p.ev[r.id] {
			fmt.Println(e)
		}
	}
}
