package durable_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/durable"
)

// A session pins activities to one worker: every activity scheduled
// WithSession of the same id runs on the worker slot that claimed the
// session, one at a time, for as long as the session stays busy (and
// across continue-as-new), so it may keep state in memory between them,
// such as a model it loaded or a connection it opened. Here four activities
// of one session run on one of four worker slots.
func ExampleWithSession() {
	ctx := context.Background()
	provider, err := cdb.NewProvider(ctx, cdb.Config{Client: cdb.NewFakeAccount(cdb.FakeAccountOptions{}).Client()})
	if err != nil {
		log.Fatal(err)
	}
	defer provider.Close()

	var mu sync.Mutex
	workers := map[string]bool{} // the worker slots the session's activities ran on
	registry := durable.NewRegistry()
	err = errors.Join(
		registry.RegisterActivity("Transcribe", func(ctx durable.ActivityContext, chunk string) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			workers[ctx.WorkerID()] = true
			return chunk + " in " + ctx.SessionID(), nil
		}),
		registry.RegisterOrchestration("TranscribeCall", func(ctx *durable.OrchestrationContext, call string) (string, error) {
			var chunks []*durable.Future
			for _, chunk := range []string{"a", "b", "c", "d"} {
				chunks = append(chunks, ctx.ScheduleActivity("Transcribe", chunk, durable.WithSession(call)))
			}
			for _, r := range ctx.Join(chunks...) {
				if r.Err != nil {
					return "", r.Err
				}
			}
			return fmt.Sprintf("%d chunks transcribed", len(chunks)), nil
		}),
	)
	if err != nil {
		log.Fatal(err)
	}
	rt, err := durable.Start(ctx, provider, registry, durable.Options{WorkerConcurrency: 4})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Shutdown(ctx)

	client := rt.Client()
	if err := client.StartOrchestration(ctx, "call-1", "TranscribeCall", "call-1"); err != nil {
		log.Fatal(err)
	}
	status, err := client.WaitForCompletion(ctx, "call-1", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Println(status.Output, "on", len(workers), "worker")
	// Output: 4 chunks transcribed on 1 worker
}
