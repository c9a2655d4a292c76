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
	benchDoctorRuns  = 4
	benchDoctorTasks = 2
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

// bench runs a few orchestrations of duroxide's stress protocol (as
// `cdb bench` does) and reports the RU one costs, from the provider's
// client statistics (Client.Stats); the harness's status polls run on a
// client of their own and are not counted.
func (d *doctor) bench(ctx context.Context) stepOutcome {
	p, err := cdb.NewProvider(ctx, d.providerConfig(true))
	if err != nil {
		return failed(err, "NewProvider", "", "")
	}
	defer p.Close()
	harnessClient, err := client(d.cfg)
	if err != nil {
		return failed(err, "the harness's client", "", "")
	}
	harnessCfg := d.providerConfig(true)
	harnessCfg.Client = harnessClient
	harness, err := cdb.NewProvider(ctx, harnessCfg)
	if err != nil {
		return failed(err, "the harness's provider", "", "")
	}
	defer harness.Close()
	res, err := bench.Run(ctx, bench.Config{
		Orchestrations: benchDoctorRuns, MaxInFlight: benchDoctorRuns, TasksPerInstance: benchDoctorTasks, WaitTimeout: doctorWait,
	}, bench.Target{Provider: p, Harness: harness})
	const meaning = "orchestrations do not complete on this account"
	if err != nil {
		return failed(err, "the stress protocol", meaning, "")
	}
	if res.Completed != benchDoctorRuns {
		return failed(nil, fmt.Sprintf("%d of %d orchestrations completed, %d failed", res.Completed, benchDoctorRuns, res.Failed), meaning,
			"run cdb bench -duration 30s for more detail, and report it with this line")
	}
	ru := res.RUPerOrchestration
	d.ruPerOrchestration = &ru
	return passed("%d orchestrations of %d activities: %.1f RU and %.1f requests per orchestration (the provider's client), p50 %s",
		res.Completed, benchDoctorTasks, res.RUPerOrchestration, res.RequestsPerOrchestration, res.P50.Round(time.Millisecond))
}
