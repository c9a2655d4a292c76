package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/duroxide-go/cdb"
)

// The contract step of `cdb doctor` (doctor.go): a short subset of the
// provider validation suite (providertest), run on the throw-away
// container through the Provider interface alone. Each check is one a real
// account could break where the in-memory fake does not: the queues'
// ORDER BY and TOP on the account's index, the lock batch's conditions, a
// delay's visibility on the account's clock, attempt counting.

const (
	contractInstance = "doctor-contract"
	contractLock     = 30 * time.Second
	contractDelay    = time.Second
)

// contractCheck is one check of the subset; it returns what went wrong,
// "" when it held.
type contractCheck struct {
	name string
	run  func(ctx context.Context, p cdb.Provider) (string, error)
}

func contractChecks() []contractCheck {
	return []contractCheck{
		{"a start is fetched once, with attempt 1, and held by its lock", checkFetchHoldsTheLock},
		{"an abandoned batch comes back with attempt 2", checkAbandonCountsAnAttempt},
		{"a turn's history and activity are committed together", checkAckCommitsTheTurn},
		{"an activity is fetched, its lock renewed, its completion delivered", checkActivityRoundTrip},
		{"events arrive in the order they were enqueued", checkEventOrder},
		{"a delayed message is invisible until its delay passes", checkDelayedVisibility},
	}
}

// contract runs the subset in order on a provider opened on the
// throw-away container; the checks build on each other, so the first that
// fails ends the step.
func (d *doctor) contract(ctx context.Context) stepOutcome {
	p, err := cdb.NewProvider(ctx, d.providerConfig(true))
	if err != nil {
		return failed(err, "NewProvider", "", "")
	}
	defer p.Close()
	const meaning = "the provider's queue contract does not hold on this account"
	for _, c := range contractChecks() {
		problem, err := c.run(ctx, p)
		if err != nil {
			return failed(err, c.name, meaning, "")
		}
		if problem != "" {
			return failed(nil, c.name+": "+problem, meaning, "report it with this line")
		}
	}
	return passed("%d checks of the provider validation suite held: fetch and lock, attempts, ack, worker round trip, order, delayed visibility", len(contractChecks()))
}

func contractStart() cdb.WorkItem {
	version := "1.0.0"
	return cdb.StartOrchestrationMessage{Instance: contractInstance, Orchestration: "DoctorContract", Input: "{}", Version: &version, ExecutionID: cdb.InitialExecutionID}
}

func checkFetchHoldsTheLock(ctx context.Context, p cdb.Provider) (string, error) {
	if err := p.EnqueueForOrchestrator(ctx, contractStart(), 0); err != nil {
		return "", err
	}
	token, problem, err := fetchWithAttempt(ctx, p, 1, "the start enqueued was not fetched")
	if problem != "" || err != nil {
		return problem, err
	}
	again, _, _, err := p.FetchOrchestrationItem(ctx, contractLock, 0, nil)
	if err != nil {
		return "", err
	}
	if again != nil {
		return "a second fetch took the locked instance", nil
	}
	return "", p.AbandonOrchestrationItem(ctx, token, 0, false)
}

func checkAbandonCountsAnAttempt(ctx context.Context, p cdb.Provider) (string, error) {
	token, problem, err := fetchWithAttempt(ctx, p, 2, "the abandoned start did not come back")
	if problem != "" || err != nil {
		return problem, err
	}
	return "", p.AbandonOrchestrationItem(ctx, token, 0, true)
}

// fetchWithAttempt fetches the contract instance's batch and checks its
// attempt count; missing is the problem when there is none.
func fetchWithAttempt(ctx context.Context, p cdb.Provider, want uint32, missing string) (token, problem string, err error) {
	item, token, attempt, err := p.FetchOrchestrationItem(ctx, contractLock, 0, nil)
	switch {
	case err != nil:
		return "", "", err
	case item == nil:
		return "", missing, nil
	case attempt != want:
		return token, fmt.Sprintf("attempt %d, want %d", attempt, want), nil
	}
	return token, "", nil
}

// checkAckCommitsTheTurn acks the start with its OrchestrationStarted and
// one scheduled activity, and reads both back.
func checkAckCommitsTheTurn(ctx context.Context, p cdb.Provider) (string, error) {
	item, token, _, err := p.FetchOrchestrationItem(ctx, contractLock, 0, nil)
	if err != nil {
		return "", err
	}
	if item == nil {
		return "the start did not come back after an abandon", nil
	}
	name, version := "DoctorContract", "1.0.0"
	history := []cdb.Event{
		contractEvent(1, cdb.OrchestrationStarted{Name: name, Version: version, Input: "{}"}),
		contractEvent(2, cdb.ActivityScheduled{Name: "DoctorEcho", Input: "ping"}),
	}
	work := []cdb.WorkItem{cdb.ActivityExecuteMessage{Instance: contractInstance, ExecutionID: cdb.InitialExecutionID, ID: 2, Name: "DoctorEcho", Input: "ping"}}
	md := cdb.ExecutionMetadata{OrchestrationName: &name, OrchestrationVersion: &version}
	if err := p.AckOrchestrationItem(ctx, token, cdb.InitialExecutionID, history, work, nil, md, nil); err != nil {
		return "", err
	}
	read, err := p.Read(ctx, contractInstance)
	if err != nil {
		return "", err
	}
	if kinds := eventKinds(read); !slices.Equal(kinds, []string{"OrchestrationStarted", "ActivityScheduled"}) {
		return fmt.Sprintf("the history reads %v", kinds), nil
	}
	return "", nil
}

func contractEvent(id uint64, kind cdb.EventKind) cdb.Event {
	return cdb.Event{EventID: id, InstanceID: contractInstance, ExecutionID: cdb.InitialExecutionID,
		TimestampMs: uint64(time.Now().UnixMilli()), DuroxideVersion: "0.1.29", Kind: kind}
}

func eventKinds(events []cdb.Event) []string {
	kinds := make([]string, 0, len(events))
	for _, e := range events {
		kinds = append(kinds, e.Kind.Type())
	}
	return kinds
}

// checkActivityRoundTrip takes the scheduled activity, renews its lock and
// acks its completion, which the orchestrator queue then holds.
func checkActivityRoundTrip(ctx context.Context, p cdb.Provider) (string, error) {
	work, token, attempt, err := p.FetchWorkItem(ctx, contractLock, 0, nil, cdb.DefaultOnlyFilter())
	switch {
	case err != nil:
		return "", err
	case work == nil:
		return "the activity the turn scheduled was not fetched", nil
	case attempt != 1:
		return fmt.Sprintf("the activity's attempt is %d, want 1", attempt), nil
	}
	if err := p.RenewWorkItemLock(ctx, token, contractLock); err != nil {
		return "", err
	}
	done := cdb.ActivityCompletedMessage{Instance: contractInstance, ExecutionID: cdb.InitialExecutionID, ID: 2, Result: "echo:ping"}
	if err := p.AckWorkItem(ctx, token, done); err != nil {
		return "", err
	}
	return expectMessages(ctx, p, []string{"ActivityCompleted"})
}

// checkEventOrder enqueues three events and expects them in one batch, in
// order.
func checkEventOrder(ctx context.Context, p cdb.Provider) (string, error) {
	for _, data := range []string{"1", "2", "3"} {
		if err := p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: contractInstance, Name: "doctor", Data: data}, 0); err != nil {
			return "", err
		}
	}
	return expectMessages(ctx, p, []string{"ExternalRaised:1", "ExternalRaised:2", "ExternalRaised:3"})
}

// checkDelayedVisibility enqueues an event with a delay: a fetch before
// the delay passes finds nothing, one after finds it.
func checkDelayedVisibility(ctx context.Context, p cdb.Provider) (string, error) {
	if err := p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: contractInstance, Name: "doctor", Data: "late"}, contractDelay); err != nil {
		return "", err
	}
	early, token, _, err := p.FetchOrchestrationItem(ctx, contractLock, 0, nil)
	if err != nil {
		return "", err
	}
	if early != nil {
		_ = p.AbandonOrchestrationItem(ctx, token, 0, true)
		return "the delayed message was fetched before its delay passed", nil
	}
	if err := sleepOrDone(ctx, contractDelay+contractDelay/2); err != nil {
		return "", err
	}
	return expectMessages(ctx, p, []string{"ExternalRaised:late"})
}

// expectMessages fetches the contract instance's next batch, compares its
// messages (kind, and an event's data) with want, and acks it empty.
func expectMessages(ctx context.Context, p cdb.Provider, want []string) (string, error) {
	item, token, _, err := p.FetchOrchestrationItem(ctx, contractLock, 0, nil)
	if err != nil {
		return "", err
	}
	if item == nil {
		return fmt.Sprintf("no batch, want %v", want), nil
	}
	var got []string
	for _, m := range item.Messages {
		label := m.Kind()
		if e, ok := m.(cdb.ExternalRaisedMessage); ok {
			label += ":" + e.Data
		}
		got = append(got, label)
	}
	if err := p.AckOrchestrationItem(ctx, token, item.ExecutionID, nil, nil, nil, cdb.ExecutionMetadata{}, nil); err != nil {
		return "", err
	}
	if !slices.Equal(got, want) {
		return fmt.Sprintf("the batch is %v, want %v", got, want), nil
	}
	return "", nil
}
