package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/durable"
	"github.com/duroxide-go/cdb/internal/bench"
)

// The steps of `cdb doctor` (doctor.go) that run orchestrations on the
// throw-away container: one through the durable runtime that waits on
// each kind of thing, and a short bench that measures the RU an
// orchestration costs on this account.

const (
	doctorInstance   = "doctor-orchestration"
	doctorEvent      = "doctor-go"
	doctorWaiting    = "waiting for " + doctorEvent
	doctorTimer      = 500 * time.Millisecond
	doctorWait       = time.Minute // per instance; the run's -timeout bounds it too
	doctorShutdown   = 10 * time.Second
	benchDoctorRuns  = 3
	benchDoctorTasks = 5 // fan-out 5, the shape docs/real-account.md sizes by
)

// doctorOrchestration runs an activity, a durable timer and an external
// event, so that the provider's worker queue, its timers and its
// orchestrator queue all carry one message.
func doctorOrchestration(ctx *durable.OrchestrationContext, input string) (string, error) {
	echoed, err := ctx.ScheduleActivity("DoctorEcho", input).Await()
	if err != nil {
		return "", err
	}
	if _, err := ctx.ScheduleTimer(doctorTimer).Await(); err != nil {
		return "", err
	}
	waiting := doctorWaiting
	ctx.SetCustomStatus(&waiting) // committed with the subscription: the event may be raised now
	event, err := ctx.WaitForEvent(doctorEvent).Await()
	if err != nil {
		return "", err
	}
	return echoed + "+" + event, nil
}

// provider runs doctorOrchestration through the durable runtime on a
// provider opened on the throw-away container, and checks its history.
func (d *doctor) provider(ctx context.Context) stepOutcome {
	p, err := cdb.NewProvider(ctx, d.providerConfig(true))
	if err != nil {
		return failed(err, "NewProvider", "", "")
	}
	defer p.Close()
	registry := durable.NewRegistry()
	err = errors.Join(
		registry.RegisterActivity("DoctorEcho", func(_ durable.ActivityContext, in string) (string, error) { return "echo:" + in, nil }),
		registry.RegisterOrchestration("DoctorCheck", doctorOrchestration))
	if err != nil {
		return failed(err, "register the orchestration", "", "")
	}
	rt, err := durable.Start(ctx, p, registry, durable.Options{MinPollInterval: 50 * time.Millisecond})
	if err != nil {
		return failed(err, "start the runtime", "", "")
	}
	defer func() {
		stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), doctorShutdown)
		defer cancel()
		_ = rt.Shutdown(stop)
	}()
	const meaning = "the provider cannot run an orchestration on this account"
	c := rt.Client()
	if err := c.StartOrchestration(ctx, doctorInstance, "DoctorCheck", "ping"); err != nil {
		return failed(err, "start the orchestration", meaning, "")
	}
	status, err := c.WaitForStatusChange(ctx, doctorInstance, 0, doctorWait)
	if err != nil {
		return failed(err, "wait for the activity and the timer", meaning, "")
	}
	if status.CustomStatus == nil || *status.CustomStatus != doctorWaiting {
		return failed(nil, fmt.Sprintf("the orchestration is %s before its event, not waiting for it", status.State), meaning, "report it with this line")
	}
	if err := c.RaiseEvent(ctx, doctorInstance, doctorEvent, "pong"); err != nil {
		return failed(err, "raise the event", meaning, "")
	}
	status, err = c.WaitForCompletion(ctx, doctorInstance, doctorWait)
	if err != nil {
		return failed(err, "wait for the orchestration to complete", meaning, "")
	}
	if status.State != durable.StateCompleted || status.Output != "echo:ping+pong" {
		return failed(nil, fmt.Sprintf("the orchestration ended %s with %q %s", status.State, status.Output, status.Error.DisplayMessage()), meaning, "report it with this line")
	}
	history, err := c.ReadHistory(ctx, doctorInstance)
	if err != nil {
		return failed(err, "read the history", meaning, "")
	}
	var kinds []string
	for _, e := range history {
		kinds = append(kinds, e.Kind.Type())
	}
	for _, want := range []string{"ActivityCompleted", "TimerFired", "ExternalEvent", "OrchestrationCompleted"} {
		if !slices.Contains(kinds, want) {
			return failed(nil, fmt.Sprintf("the history %v has no %s", kinds, want), meaning, "report it with this line")
		}
	}
	return passed("an orchestration ran an activity, a %s durable timer and an external event through the durable runtime and completed (%d history events)",
		doctorTimer, len(history))
}

// bench runs a few fan-out-5 orchestrations of duroxide's stress protocol
// (as `cdb bench` does), one at a time, twice: with the provider's
// defaults, where a start and a turn's activities are handed to this
// process's waiting fetches (the eager path), and with eager dispatch off,
// where every item waits in its queue for a fetch to find and lock it. It
// reports the RU and requests one orchestration costs on each path, from
// the provider's client statistics (Client.Stats); the harness's status
// polls run on a client of their own and are not counted.
func (d *doctor) bench(ctx context.Context) stepOutcome {
	eager, err := d.benchPath(ctx, false)
	if err != nil {
		return d.benchFailed(err, "on the eager path")
	}
	queue, err := d.benchPath(ctx, true)
	if err != nil {
		return d.benchFailed(err, "through the queue")
	}
	d.benchCost = &benchCost{eager: eager.path, queue: queue.path}
	return passed("%d fan-out-%d orchestrations each way, per orchestration (the provider's client): eager path %.1f RU, "+
		"%.1f requests, p50 %s; through the queue %.1f RU, %.1f requests, p50 %s",
		benchDoctorRuns, benchDoctorTasks, eager.path.ru, eager.path.requests, eager.p50.Round(time.Millisecond),
		queue.path.ru, queue.path.requests, queue.p50.Round(time.Millisecond))
}

// benchRun is one path's run.
type benchRun struct {
	path benchPath
	p50  time.Duration
}

// benchIncomplete is a run in which not every orchestration completed.
type benchIncomplete struct{ completed, failed int }

func (e benchIncomplete) Error() string {
	return fmt.Sprintf("%d of %d orchestrations completed, %d failed", e.completed, benchDoctorRuns, e.failed)
}

func (d *doctor) benchFailed(err error, path string) stepOutcome {
	const meaning = "orchestrations do not complete on this account"
	if incomplete, ok := err.(benchIncomplete); ok {
		return failed(nil, incomplete.Error()+" "+path, meaning, "run cdb bench -duration 30s for more detail, and report it with this line")
	}
	return failed(err, "the stress protocol "+path, meaning, "")
}

// benchPath runs the orchestrations through a provider with long polling,
// as an application's, with eager dispatch on or off.
func (d *doctor) benchPath(ctx context.Context, disableEager bool) (run benchRun, err error) {
	cfg := d.providerConfig(true)
	cfg.ShortPolling, cfg.DisableEagerDispatch = false, disableEager
	p, err := cdb.NewProvider(ctx, cfg)
	if err != nil {
		return run, fmt.Errorf("NewProvider: %w", err)
	}
	defer p.Close()
	harnessClient, err := client(d.cfg)
	if err != nil {
		return run, fmt.Errorf("the harness's client: %w", err)
	}
	harnessCfg := d.providerConfig(true)
	harnessCfg.Client = harnessClient
	harness, err := cdb.NewProvider(ctx, harnessCfg)
	if err != nil {
		return run, fmt.Errorf("the harness's provider: %w", err)
	}
	defer harness.Close()
	res, err := bench.Run(ctx, bench.Config{
		Orchestrations: benchDoctorRuns, MaxInFlight: 1, TasksPerInstance: benchDoctorTasks, WaitTimeout: doctorWait,
	}, bench.Target{Provider: p, Harness: harness})
	if err != nil {
		return run, err
	}
	if res.Completed != benchDoctorRuns {
		return run, benchIncomplete{completed: res.Completed, failed: res.Failed}
	}
	return benchRun{path: benchPath{ru: res.RUPerOrchestration, requests: res.RequestsPerOrchestration}, p50: res.P50}, nil
}
