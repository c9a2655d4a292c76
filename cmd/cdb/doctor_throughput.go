package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/duroxide-go/cdb"
)

// The throughput step of `cdb doctor` (doctor.go) and what the report
// makes of it with the bench step's RU per orchestration
// (doctor_runtime.go): how many orchestrations per second the container's
// RU/s sustains, and what they cost at Microsoft's US list prices
// (docs/real-account.md, Sizing).

// List prices (US regions, one write region), from Microsoft's "Understand
// your bill": serverless RU, provisioned RU/s per hour, autoscale's factor
// on it, and the hours of a month the bill counts.
const (
	dollarsPerMillionRU       = 0.25
	dollarsPer100RUsPerHour   = 0.008
	autoscalePriceFactor      = 1.5
	hoursPerMonth             = 730
	autoscaleFloorFraction    = 0.1 // autoscale never scales below a tenth of its maximum
	throughputOfApp           = "your container"
	throughputOfThrowaway     = "the throw-away container, created as NewProvider will create yours"
	throughputUnknownSentence = "throughput unknown"
)

// throughputTarget is the container whose throughput the step reads:
// the application's, or, when it is missing, the throw-away container,
// which NewProvider created as it will create the application's.
func (d *doctor) throughputTarget() (*cdb.ContainerClient, string, bool) {
	switch {
	case d.appProps != nil:
		return d.app, throughputOfApp, true
	case d.mayExist:
		return d.container, throughputOfThrowaway, true
	}
	return nil, "", false
}

// checkThroughput reads the container's throughput: the mode (manual,
// autoscale, serverless) and its RU/s, its own or its database's. A local
// server without offers leaves it unknown, with the reason; an Azure
// account always has an answer.
func (d *doctor) checkThroughput(ctx context.Context) stepOutcome {
	target, whose, ok := d.throughputTarget()
	if !ok {
		d.throughputUnknown = "no container to read it of (yours is missing and this credential may not create one)"
		return skipped("%s: %s", throughputUnknownSentence, d.throughputUnknown)
	}
	t, err := target.ReadThroughput(ctx)
	if err != nil {
		d.throughputUnknown = "reading the offers feed failed: " + stepError(err)
		if !isAzureAccount(d.cfg.Endpoint) {
			return skipped("%s: this server answered the offers feed (how Cosmos DB tells a container's throughput) with %s",
				throughputUnknownSentence, stepError(err))
		}
		return failed(err, "read the throughput of "+whose+" (the offers feed)",
			"the throughput is unknown: the doctor cannot say how many orchestrations per second it sustains",
			"check the credential may read the account's metadata (an Entra ID role needs readMetadata), then run it again")
	}
	d.throughput = &throughputJSON{Mode: string(t.Mode), RUPerSecond: t.RUPerSecond, Shared: t.Shared, Container: target.ID()}
	return passed("%s: %s", whose, describeThroughput(*d.throughput))
}

// describeThroughput says what a container may spend, in words.
func describeThroughput(t throughputJSON) string {
	whose := "its own"
	if t.Shared {
		whose = "the database's, shared by its containers"
	}
	switch cdb.ThroughputMode(t.Mode) {
	case cdb.ThroughputServerless:
		return fmt.Sprintf("serverless: billed per RU, up to %s RU/s per container", thousands(t.RUPerSecond))
	case cdb.ThroughputAutoscale:
		return fmt.Sprintf("autoscale up to %s RU/s (%s)", thousands(t.RUPerSecond), whose)
	}
	return fmt.Sprintf("%s %s RU/s (%s)", t.Mode, thousands(t.RUPerSecond), whose)
}

// thousands writes n with commas between its thousands, as the portal
// shows RU/s.
func thousands(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// costJSON is what the report makes of the bench's RU per orchestration
// and the container's throughput, in -o json beside the steps.
type costJSON struct {
	// RUPerOrchestrationEager is one fan-out-5 orchestration's RU with the
	// provider's defaults (work handed to this process's waiting fetches
	// without a query); RUPerOrchestrationQueue with eager dispatch off,
	// every item found and locked through its queue. The requests are the
	// provider client's, per orchestration.
	RUPerOrchestrationEager       *float64 `json:"ru_per_orchestration_eager"`
	RUPerOrchestrationQueue       *float64 `json:"ru_per_orchestration_queue"`
	RequestsPerOrchestrationEager *float64 `json:"requests_per_orchestration_eager"`
	RequestsPerOrchestrationQueue *float64 `json:"requests_per_orchestration_queue"`
	// OrchestrationsPerSecond is the throughput's RU/s over the eager RU
	// per orchestration: an upper bound, since idle polling and other work
	// spend some of the RU/s. Null when either is unknown.
	OrchestrationsPerSecond *float64 `json:"orchestrations_per_second"`
	// DollarsPerMillionServerless is a million orchestrations at the eager
	// RU on a serverless account, $0.25 per million RU (US list price),
	// whatever this account is; DollarsPerMonth is the provisioned RU/s
	// for a month (730 hours at $0.008 per 100 RU/s per hour, autoscale
	// 1.5 times that at its maximum), null on serverless or unknown.
	DollarsPerMillionServerless *float64 `json:"dollars_per_million_serverless"`
	DollarsPerMonth             *float64 `json:"dollars_per_month"`
}

// benchCost is what the bench step measured, one run per path.
type benchCost struct {
	eager, queue benchPath
}

// benchPath is one bench run's cost per orchestration.
type benchPath struct {
	ru, requests float64
}

// cost works out the costJSON from the bench's runs (nil: not run) and
// the throughput (nil: unknown).
func cost(b *benchCost, t *throughputJSON) costJSON {
	var c costJSON
	if b == nil {
		return c
	}
	c.RUPerOrchestrationEager, c.RequestsPerOrchestrationEager = ptrTo(round2(b.eager.ru)), ptrTo(round2(b.eager.requests))
	c.RUPerOrchestrationQueue, c.RequestsPerOrchestrationQueue = ptrTo(round2(b.queue.ru)), ptrTo(round2(b.queue.requests))
	if b.eager.ru > 0 {
		c.DollarsPerMillionServerless = ptrTo(round2(b.eager.ru * dollarsPerMillionRU))
	}
	if t == nil {
		return c
	}
	if b.eager.ru > 0 {
		c.OrchestrationsPerSecond = ptrTo(round2(float64(t.RUPerSecond) / b.eager.ru))
	}
	if t.Mode != string(cdb.ThroughputServerless) {
		c.DollarsPerMonth = ptrTo(round2(monthlyDollars(*t)))
	}
	return c
}

// monthlyDollars is a month of the provisioned RU/s at list price;
// autoscale at its maximum all month.
func monthlyDollars(t throughputJSON) float64 {
	dollars := float64(t.RUPerSecond) / 100 * dollarsPer100RUsPerHour * hoursPerMonth
	if t.Mode == string(cdb.ThroughputAutoscale) {
		dollars *= autoscalePriceFactor
	}
	return dollars
}

func ptrTo[T any](v T) *T { return &v }

func round2(v float64) float64 { return math.Round(v*100) / 100 }

// throughputFacts are the report's lines on throughput and cost.
func throughputFacts(r doctorJSON) (throughput, costLine string) {
	t := r.Throughput
	switch {
	case t == nil && r.ThroughputUnknown != "":
		throughput = "unknown: " + r.ThroughputUnknown
	case t == nil:
		throughput = "unknown: the throughput step did not run"
	default:
		throughput = fmt.Sprintf("%q: %s", t.Container, describeThroughput(*t))
		if t.Container == r.Container { // the throw-away container: the application's is missing
			throughput = "a container NewProvider creates: " + describeThroughput(*t)
		}
		if r.DollarsPerMonth != nil {
			throughput += fmt.Sprintf(": $%.2f a month", *r.DollarsPerMonth)
			if t.Mode == string(cdb.ThroughputAutoscale) {
				floor := *r.DollarsPerMonth * autoscaleFloorFraction
				throughput += fmt.Sprintf(" at the top, $%.2f at its floor of %s RU/s", floor,
					thousands(int(float64(t.RUPerSecond)*autoscaleFloorFraction)))
			}
			throughput += " (US list price, one write region)"
		}
	}
	if r.RUPerOrchestrationEager == nil {
		return throughput, ""
	}
	parts := []string{fmt.Sprintf("a fan-out-5 orchestration costs %.1f RU (%.1f requests) on the eager path, %.1f RU (%.1f requests) through the queue",
		*r.RUPerOrchestrationEager, *r.RequestsPerOrchestrationEager, *r.RUPerOrchestrationQueue, *r.RequestsPerOrchestrationQueue)}
	if r.OrchestrationsPerSecond != nil {
		budget := thousands(t.RUPerSecond) + " RU/s"
		if t.Mode == string(cdb.ThroughputServerless) {
			budget = "the container's " + budget
		}
		parts = append(parts, fmt.Sprintf("%s sustains about %.1f orchestrations a second at most (idle polling and other work spend some of it)",
			budget, *r.OrchestrationsPerSecond))
	}
	if r.DollarsPerMillionServerless != nil && t != nil && t.Mode == string(cdb.ThroughputServerless) {
		parts = append(parts, fmt.Sprintf("$%.2f per million orchestrations on serverless at $%.2f per million RU (US list price)",
			*r.DollarsPerMillionServerless, dollarsPerMillionRU))
	}
	return throughput, strings.Join(parts, "; ")
}
