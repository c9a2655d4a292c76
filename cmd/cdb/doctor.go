package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"time"

	"github.com/duroxide-go/cdb"
)

// `cdb doctor` proves the provider on the user's own account: it checks,
// read-only, the container the application will use (-container or
// COSMOS_CONTAINER) as NewProvider does, and runs the checks of a
// real-account smoke run that must write in a container of its own that it
// creates and removes; it says for each what the account answered and,
// when it is not what the provider relies on, what that means and what
// to do. Exit code 0 means every step passed (or was skipped because the
// target cannot do it, with the reason).
//
// Every step goes through the library's public API: what passes here is
// what the provider does.

// doctorCleanupTimeout bounds removing the throw-away container, which runs
// after an interrupt too.
const doctorCleanupTimeout = time.Minute

// doctorOptions are the flags of `cdb doctor`.
type doctorOptions struct {
	conn    connection
	format  outputFormat
	timeout time.Duration
}

func parseDoctorFlags(args []string, stderr io.Writer) (doctorOptions, error) {
	o := doctorOptions{conn: *operatorConnection()}
	fs := newFlagSet("doctor", stderr)
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "bound on the whole run; the throw-away container is removed even when it runs out")
	registerOutput(fs, &o.format)
	o.conn.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	if o.timeout <= 0 {
		return o, usageError{msg: fmt.Sprintf("-timeout must be positive, got %s", o.timeout)}
	}
	return o, nil
}

// runDoctor is `cdb doctor`.
func runDoctor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseDoctorFlags(args, stderr)
	if err != nil {
		return err
	}
	cfg, err := o.conn.config()
	if err != nil {
		return err
	}
	d, err := newDoctor(cfg)
	if err != nil {
		return err
	}
	d.firstAnswer = func(ctx context.Context, call func(context.Context) error) error {
		return o.conn.awaitFirstAnswer(ctx, stderr, cfg.Endpoint, call)
	}
	out := stdout
	if o.format == formatJSON {
		out = io.Discard
	}
	report := d.run(ctx, o.timeout, out)
	if o.format == formatJSON {
		if err := writeJSON(stdout, report); err != nil {
			return err
		}
	}
	if cause := context.Cause(ctx); cause != nil {
		return cause // interrupted: main reports it and exits 128+n
	}
	if report.Failed > 0 {
		return fmt.Errorf("%d of %d steps failed", report.Failed, len(report.Steps))
	}
	return nil
}

// doctor holds what the steps share: the account's client, the record of
// its requests, the application's container and the throw-away container.
type doctor struct {
	cfg      cdb.Config // Container is the throw-away container
	client   *cdb.Client
	attempts *attemptLog
	wire     *wireLog
	// app is the application's container, which the doctor only reads;
	// appProps is what it read of it, throughput its offer.
	app        *cdb.ContainerClient
	appProps   *cdb.ContainerProperties
	throughput *throughputJSON
	// account is what the connect step read.
	account *cdb.AccountProperties
	// container is the throw-away container's client; mayExist is set as
	// soon as a step may have created it, so that cleanup removes it.
	container *cdb.ContainerClient
	mayExist  bool
	createdDB bool
	// metadataRefused says the credential may not create the throw-away
	// container (a 403): the steps that write in it are skipped.
	metadataRefused bool
	databaseMissing bool // and may not be created
	// containerProps is the container as the service returned it (the
	// container step), queueDocs the documents the query steps wrote.
	containerProps *cdb.ContainerProperties
	queueDocs      []queueDoc
	// throughputUnknown says why the throughput step read none; benchCost is
	// what the bench step measured (nil: it did not run to the end).
	throughputUnknown string
	benchCost         *benchCost
	// firstAnswer bounds the connect step's request by -connect-timeout
	// and notes a slow answer on stderr (connection.awaitFirstAnswer).
	firstAnswer func(ctx context.Context, call func(context.Context) error) error
}

// newDoctor is a doctor of cfg's container, with a throw-away container
// of its own beside it in cfg's database.
func newDoctor(cfg cdb.Config) (*doctor, error) {
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		return nil, fmt.Errorf("name the throw-away container: %w", err)
	}
	appContainer := cfg.Container
	cfg.Container = "cdb-doctor-" + hex.EncodeToString(suffix)
	attempts := &attemptLog{}
	cfg.ClientOptions.Logger = slog.New(attempts)
	cl, err := client(cfg)
	if err != nil {
		return nil, err
	}
	cfg.Client = cl
	container, err := cl.NewContainer(cfg.Database, cfg.Container)
	if err != nil {
		return nil, err
	}
	app, err := cl.NewContainer(cfg.Database, appContainer)
	if err != nil {
		return nil, err
	}
	unbounded := func(ctx context.Context, call func(context.Context) error) error { return call(ctx) }
	return &doctor{cfg: cfg, client: cl, attempts: attempts, wire: &wireLog{}, app: app, container: container, firstAnswer: unbounded}, nil
}

// doctorStep is one check of the run. A step that must pass for the rest
// to mean anything is required: after it fails, the rest are not run. A
// step that writes in the throw-away container is not run where the
// credential may not create it.
type doctorStep struct {
	name      string
	required  bool
	throwaway bool
	run       func(ctx context.Context) stepOutcome
}

// steps is the checklist, in the order of a real-account smoke run.
func (d *doctor) steps() []doctorStep {
	return []doctorStep{
		{name: "connect", required: true, run: d.connect},
		{name: "bootstrap", required: true, run: d.bootstrap},
		{name: "app-container", run: d.checkAppContainer},
		{name: "throughput", run: d.checkThroughput},
		{name: "container", required: true, throwaway: true, run: d.checkContainer},
		{name: "range-queries", throwaway: true, run: d.rangeQueries},
		{name: "range-aggregates", throwaway: true, run: d.rangeAggregates},
		{name: "cross-partition-control", throwaway: true, run: d.crossPartitionControl},
		{name: "batch-operations", throwaway: true, run: d.batchOperations},
		{name: "batch-atomicity", throwaway: true, run: d.batchAtomicity},
		{name: "batch-100", throwaway: true, run: d.batch100},
		{name: "batch-101", throwaway: true, run: d.batch101},
		{name: "batch-2mb", throwaway: true, run: d.batchNear2MB},
		{name: "largest-item", throwaway: true, run: d.largestItem},
		{name: "patch", throwaway: true, run: d.patch},
		{name: "session-token", throwaway: true, run: d.sessionToken},
		{name: "ttl", throwaway: true, run: d.timeToLive},
		{name: "contract", throwaway: true, run: d.contract},
		{name: "provider", throwaway: true, run: d.provider},
		{name: "bench", throwaway: true, run: d.bench},
	}
}

// stepOutcome is what a step found.
type stepOutcome struct {
	result  string // stepPass, stepFail or stepSkip
	detail  string // what the account answered, or why the step was skipped
	meaning string // on failure: what it means for the provider
	action  string // on failure: what to do
	err     error  // on failure: the cause, whose status the line shows
}

const (
	stepPass = "pass"
	stepFail = "fail"
	stepSkip = "skip"
)

func passed(format string, args ...any) stepOutcome {
	return stepOutcome{result: stepPass, detail: fmt.Sprintf(format, args...)}
}

func skipped(format string, args ...any) stepOutcome {
	return stepOutcome{result: stepSkip, detail: fmt.Sprintf(format, args...)}
}

// failed reports a failure. A failure whose cause is the credential, the
// network, throttling or an interrupt says so, whatever the step; the
// step's meaning and action explain any other answer (an empty one is
// filled in).
func failed(err error, detail, meaning, action string) stepOutcome {
	if m, a, known := explainFailure(err); known {
		meaning, action = m, a
	} else {
		meaning, action = firstOf(meaning, m), firstOf(action, a)
	}
	switch {
	case err != nil && detail == "":
		detail = stepError(err)
	case err != nil:
		detail += ": " + stepError(err)
	}
	return stepOutcome{result: stepFail, detail: detail, meaning: meaning, action: action, err: err}
}

// stepError is err as a step's line shows it: a 401 with the server's
// first sentence only, as the other commands print it (refusedKey); the
// rest of its message echoes the payload the server signed.
func stepError(err error) string {
	var ce *cdb.CosmosError
	if errors.As(err, &ce) && ce.StatusCode == http.StatusUnauthorized {
		return fmt.Sprintf("%s: 401 Unauthorized: %q", ce.Operation, firstSentence(ce.Message))
	}
	return err.Error()
}

// explainFailure says what a failed request means and what to do when its
// cause is not the step's business: the credential, permissions, the
// network, throttling, an interrupt. known is false for any other cause.
func explainFailure(err error) (meaning, action string, known bool) {
	var ce *cdb.CosmosError
	isCosmos := errors.As(err, &ce)
	problem := credentialProblem(err)
	switch {
	case problem != nil:
		return "the client has no Entra ID token to sign with", problem.Error(), true
	case keysDisabled(err):
		return "the account disables key authentication (disableLocalAuth): it takes Entra ID tokens only", signWithEntraID, true
	case lacksDataPlaneRole(err):
		return "the account refused the Entra ID identity: it has no data-plane role that allows this request", assignDataPlaneRole, true
	case isCosmos && ce.StatusCode == http.StatusUnauthorized:
		return "the account refused the request's signature",
			"set " + cdb.EnvKey + " (or -key) to this account's primary or secondary key, copied whole; check this machine's clock", true
	case isCosmos && ce.StatusCode == http.StatusForbidden:
		return "the account refused the operation: the credential's permissions, a firewall rule, or a clock more than 15 minutes off",
			"allow this machine's address in the account's networking, use a key with write access, and check the clock", true
	case isCosmos && ce.StatusCode == http.StatusTooManyRequests:
		return "the throughput (RU/s) is used up", "run it again later, or raise the account's throughput", true
	case isCosmos && (ce.StatusCode == 0 || ce.StatusCode == http.StatusRequestTimeout || ce.StatusCode >= 500):
		return "the service or the network failed the request", "run it again; if it persists, check the network and the service's health", true
	case errors.As(err, new(noAnswer)):
		return "the endpoint did not answer within -connect-timeout",
			"check the endpoint and the network to it (a firewall that drops packets looks like this), or raise -connect-timeout", true
	case errors.Is(err, context.Canceled):
		return "the run was interrupted", "run it again", true
	case errors.Is(err, context.DeadlineExceeded):
		return "the step ran out of time", "check the network to the endpoint, then run it again (or raise -timeout)", true
	case isUntrustedCertificate(err):
		return "this machine does not trust the endpoint's TLS certificate",
			"for the local emulator pass -insecure-skip-verify or " + cdb.EnvCAFile + "; for an account, check the endpoint", true
	default:
		return "the service answered differently from what the provider relies on",
			"report it with this line (status, substatus and activity id) at github.com/duroxide-go/cdb/issues", false
	}
}

// run runs the steps in order, prints a line per step to out as it ends,
// removes the throw-away container, and prints the summary.
func (d *doctor) run(ctx context.Context, timeout time.Duration, out io.Writer) doctorJSON {
	report := doctorJSON{
		Endpoint: d.cfg.Endpoint, Database: d.cfg.Database, Container: d.cfg.Container,
		Auth: authMethod(d.cfg), Steps: []doctorStepJSON{},
	}
	printWrapped(out, fmt.Sprintf("cdb doctor on %s, database %q, your container %q, throw-away container %q (%s)",
		d.cfg.Endpoint, d.cfg.Database, d.app.ID(), d.cfg.Container, report.Auth), terminalWidth(out), 2)
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stopped := ""
	for _, s := range d.steps() {
		var line doctorStepJSON
		switch {
		case stopped != "":
			line = doctorStepJSON{Name: s.name, Result: stepSkip, Detail: "not run: " + stopped}
		case runCtx.Err() != nil:
			line = doctorStepJSON{Name: s.name, Result: stepSkip, Detail: "not run: " + stoppedBy(ctx)}
		case s.throwaway && d.metadataRefused:
			line = doctorStepJSON{Name: s.name, Result: stepSkip, Detail: "not run: " + metadataRefusedSkip}
		default:
			line = d.runStep(runCtx, s.name, s.run)
			if line.Result == stepFail && s.required {
				stopped = s.name + " failed"
			}
		}
		report.add(line)
		printStep(out, line)
	}
	line := d.runStep(ctx, "cleanup", d.cleanup)
	report.add(line)
	printStep(out, line)
	if d.benchCost != nil {
		report.RUPerOrchestration = ptrTo(round2(d.benchCost.eager.ru))
	}
	report.RequestCharge = d.attempts.charge()
	report.OK = report.Failed == 0
	d.addFacts(&report)
	printFacts(out, report)
	printWrapped(out, report.summary(), terminalWidth(out), 8)
	return report
}

// metadataRefusedSkip is why a step that writes in the throw-away
// container did not run.
const metadataRefusedSkip = "this credential may not create the throw-away container (see bootstrap)"

// stoppedBy says why the run stopped early: an interrupt ends parent, the
// run's -timeout only the run's context.
func stoppedBy(parent context.Context) string {
	if parent.Err() != nil {
		return "interrupted"
	}
	return "the run's -timeout ran out"
}

// runStep runs one step and turns its outcome into its report line: the
// step's requests, their charge, and the status of its failure or, when it
// passed, of its last request.
func (d *doctor) runStep(ctx context.Context, name string, run func(context.Context) stepOutcome) doctorStepJSON {
	mark := d.attempts.mark()
	start := time.Now()
	o := run(httptrace.WithClientTrace(ctx, d.wire.trace()))
	seen := d.attempts.since(mark)
	line := doctorStepJSON{
		Name: name, Result: o.result, Detail: oneLine(o.detail), Meaning: o.meaning, Action: o.action,
		Requests: len(seen), DurationMs: milliseconds(time.Since(start)),
	}
	for _, a := range seen {
		line.RequestCharge += a.charge
	}
	if last, ok := lastAnswered(seen); ok {
		line.Status, line.Substatus, line.ActivityID = last.status, last.substatus, last.activityID
	}
	var ce *cdb.CosmosError
	if errors.As(o.err, &ce) && ce.StatusCode != 0 {
		line.Status, line.Substatus, line.ActivityID = ce.StatusCode, ce.SubStatusCode, ce.ActivityID
	}
	return line
}

// oneLine keeps a step on its line: the service's messages hold line
// breaks.
func oneLine(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == '\r' || r == '\n' }), " ")
}

func lastAnswered(seen []attempt) (attempt, bool) {
	for i := len(seen) - 1; i >= 0; i-- {
		if seen[i].status != 0 {
			return seen[i], true
		}
	}
	return attempt{}, false
}

// printStep prints a step: its result, name and charge, and what it saw,
// going on in lines indented past the result. A failure adds its answer
// (status/substatus and activity id, to report it) and what it means and
// what to do, a line each. A pass shows no status: its last request's
// (a 404 that proves a batch applied nothing) would read as a failure;
// the words say what passed, and -o json keeps the status.
func printStep(out io.Writer, s doctorStepJSON) {
	width := terminalWidth(out)
	printWrapped(out, fmt.Sprintf("%-4s  %-23s %8.2f RU  %s", s.Result, s.Name, s.RequestCharge, s.Detail), width, stepIndent)
	if s.Result != stepFail {
		return
	}
	answer := "no answer"
	if s.Status != 0 {
		answer = fmt.Sprintf("answered %d/%d, activity %s", s.Status, s.Substatus, firstOf(s.ActivityID, "-"))
	}
	printWrapped(out, strings.Repeat(" ", stepIndent)+answer, width, stepIndent)
	printWrapped(out, strings.Repeat(" ", stepIndent)+"means: "+s.Meaning, width, stepIndent+len("means: "))
	printWrapped(out, strings.Repeat(" ", stepIndent)+"do: "+s.Action, width, stepIndent+len("do: "))
}

// stepIndent is where a step's continuation lines start: past the result,
// which stays alone in its column.
const stepIndent = 6

// authMethod names how the client signs its requests.
func authMethod(cfg cdb.Config) string {
	if cfg.ClientOptions.Credential != nil {
		return "Entra ID"
	}
	return "master key"
}

// doctorJSON is `doctor -o json`: the run's steps in order. Like the other
// commands' JSON, its field names are the CLI's own.
type doctorJSON struct {
	Endpoint  string `json:"endpoint"`
	Database  string `json:"database"`
	Container string `json:"container"` // the throw-away container
	Auth      string `json:"auth"`      // "master key" or "Entra ID"
	doctorFacts
	OK      bool `json:"ok"` // no step failed: the exit code is 0
	Passed  int  `json:"passed"`
	Failed  int  `json:"failed"`
	Skipped int  `json:"skipped"`
	// RequestCharge is the RU the whole run cost; RUPerOrchestration the
	// bench step's on the eager path, ru_per_orchestration_eager (null
	// when it did not run).
	RequestCharge      float64          `json:"request_charge"`
	RUPerOrchestration *float64         `json:"ru_per_orchestration"`
	Steps              []doctorStepJSON `json:"steps"`
}

// doctorStepJSON is one step. Status, substatus and activity id are those
// of the failure, or of the step's last answered request.
type doctorStepJSON struct {
	Name          string  `json:"name"`
	Result        string  `json:"result"` // pass, fail or skip
	Status        int     `json:"status"` // 0: no answer
	Substatus     int     `json:"substatus"`
	ActivityID    string  `json:"activity_id"`
	RequestCharge float64 `json:"request_charge"`
	Requests      int     `json:"requests"`
	DurationMs    float64 `json:"duration_ms"`
	Detail        string  `json:"detail"`            // what was seen, or why it was skipped
	Meaning       string  `json:"meaning,omitempty"` // on failure: what it means
	Action        string  `json:"action,omitempty"`  // on failure: what to do
}

func (r *doctorJSON) add(s doctorStepJSON) {
	r.Steps = append(r.Steps, s)
	switch s.Result {
	case stepPass:
		r.Passed++
	case stepFail:
		r.Failed++
	default:
		r.Skipped++
	}
}

func (r *doctorJSON) summary() string {
	verdict := "the provider can run on this account"
	if r.Failed > 0 {
		verdict = "fix the failed steps (each line says what to do) and run cdb doctor again"
	}
	return fmt.Sprintf("doctor: %d passed, %d failed, %d skipped, %.2f RU in all: %s",
		r.Passed, r.Failed, r.Skipped, r.RequestCharge, verdict)
}

// attemptLog records every HTTP attempt of the doctor's clients, from the
// debug record the client writes per attempt (ClientOptions.Logger), so a
// step can show the status, substatus, activity id and charge of what it
// sent. The records carry no headers, so no secret.
type attemptLog struct {
	mu       sync.Mutex
	attempts []attempt
}

type attempt struct {
	operation         string
	resourceType      string
	status, substatus int
	charge            float64
	activityID        string
	duration          time.Duration
}

func (l *attemptLog) Enabled(context.Context, slog.Level) bool { return true }

func (l *attemptLog) Handle(_ context.Context, r slog.Record) error {
	var a attempt
	r.Attrs(func(at slog.Attr) bool {
		switch at.Key {
		case "operation":
			a.operation = at.Value.String()
		case "resource_type":
			a.resourceType = at.Value.String()
		case "duration":
			a.duration = at.Value.Duration()
		case "status":
			a.status = int(at.Value.Int64())
		case "substatus":
			a.substatus = int(at.Value.Int64())
		case "charge":
			a.charge = at.Value.Float64()
		case "activity_id":
			a.activityID = at.Value.String()
		}
		return true
	})
	l.mu.Lock()
	l.attempts = append(l.attempts, a)
	l.mu.Unlock()
	return nil
}

func (l *attemptLog) WithAttrs([]slog.Attr) slog.Handler { return l }

func (l *attemptLog) WithGroup(string) slog.Handler { return l }

// mark is where the next attempt will be recorded.
func (l *attemptLog) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.attempts)
}

// since returns the attempts recorded from mark on.
func (l *attemptLog) since(mark int) []attempt {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]attempt(nil), l.attempts[mark:]...)
}

// charge is the RU of every attempt recorded.
func (l *attemptLog) charge() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	total := 0.0
	for _, a := range l.attempts {
		total += a.charge
	}
	return total
}
