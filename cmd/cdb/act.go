package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/google/uuid"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/durable"
)

// The commands that act on instances: start, raise and cancel. They go
// through the runtime's public client (durable.Client), as an application
// does, and only enqueue: the application's runtime, wherever it runs,
// takes the message on its next poll.

// existsPolicy is start's -if-exists flag: what to do when the instance id
// is taken.
type existsPolicy string

const (
	existsFail   existsPolicy = "fail"   // refuse, exit code 3
	existsIgnore existsPolicy = "ignore" // start nothing, succeed with the existing id
)

func (e *existsPolicy) String() string { return string(*e) }

func (e *existsPolicy) Set(s string) error {
	switch existsPolicy(s) {
	case existsFail, existsIgnore:
		*e = existsPolicy(s)
		return nil
	}
	return fmt.Errorf("%q is not one of fail, ignore", s)
}

// startRequest is what `cdb start` was asked for.
type startRequest struct {
	id       string
	version  semanticVersion
	input    inputSource
	raw      bool // send the input as is, JSON or not
	ifExists existsPolicy
}

// semanticVersion is start's -version flag, checked as it is parsed.
type semanticVersion string

func (v *semanticVersion) String() string { return string(*v) }

func (v *semanticVersion) Set(s string) error {
	if _, err := cdb.ParseSemanticVersion(s); err != nil {
		return err
	}
	*v = semanticVersion(s)
	return nil
}

// inputSource is where start's input comes from: -input or -input-file,
// not both.
type inputSource struct {
	text, file string
	set        bool
}

// flag is the flag.Value of -input (file false) or -input-file.
func (in *inputSource) flag(file bool) flag.Value { return inputFlag{source: in, file: file} }

type inputFlag struct {
	source *inputSource
	file   bool
}

func (f inputFlag) String() string { return "" }

func (f inputFlag) Set(s string) error {
	if f.source.set {
		return errors.New("give the input once: -input or -input-file")
	}
	f.source.set = true
	if f.file {
		f.source.file = s
	} else {
		f.source.text = s
	}
	return nil
}

// name is the flag the input came from, as a mistake in it is named.
func (in inputSource) name() string {
	if in.file != "" {
		return "-input-file " + in.file
	}
	return "-input"
}

// read is the input: the text, or the file's content (stdin for "-").
func (in inputSource) read(stdin io.Reader) (string, error) {
	if in.file == "" {
		return in.text, nil
	}
	var data []byte
	var err error
	if in.file == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(in.file)
	}
	if err != nil {
		return "", fmt.Errorf("-input-file: %w", err)
	}
	return string(data), nil
}

func (r startRequest) options() []durable.StartOption {
	if r.version == "" {
		return nil
	}
	return []durable.StartOption{durable.WithVersion(string(r.version))}
}

func runStart(ctx context.Context, argv []string, stdout, stderr io.Writer) error {
	req := startRequest{ifExists: existsFail}
	var format outputFormat
	var input string
	return operatorCommandChecked("start", func(fs *flag.FlagSet) {
		fs.StringVar(&req.id, "id", "", "the instance `id` (default a new random UUID)")
		fs.Var(req.input.flag(false), "input", "the orchestration's `input`: JSON, unless -raw")
		fs.Var(req.input.flag(true), "input-file", "read the input from `file` (- for stdin): JSON, unless -raw")
		fs.BoolVar(&req.raw, "raw", false, rawUsage("the input"))
		fs.Var(&req.version, "version", "run exactly this orchestration `version` (semantic, e.g. 1.2.0; default: the runtime's registry decides)")
		fs.Var(&req.ifExists, "if-exists", "when the id is taken: fail (exit code 3) or ignore (start nothing, print the id, exit 0)")
		registerOutput(fs, &format)
	}, 1, 1, func([]string) error {
		var err error
		if input, err = req.input.read(os.Stdin); err != nil {
			return err
		}
		return checkPayload(req.input.name(), input, req.raw)
	}, func(ctx context.Context, p *cdb.CosmosProvider, endpoint string, args []string, out io.Writer) error {
		if req.id == "" {
			req.id = uuid.NewString()
		}
		result, err := req.start(ctx, durable.NewClient(p), args[0], input, stderr)
		if err != nil {
			return instanceError(endpoint, req.id, err)
		}
		if format == formatJSON {
			return writeJSON(out, result)
		}
		fmt.Fprintln(out, req.id)
		return nil
	})(ctx, argv, stdout, stderr)
}

// start enqueues the start of instance r.id of the orchestration name,
// unless the id is taken, by an instance or a queued start (the client
// refuses it with durable.ErrInstanceExists): then it refuses
// (instanceExists) or, with -if-exists ignore, says so on stderr and
// starts nothing.
func (r startRequest) start(ctx context.Context, client *durable.Client, name, input string, stderr io.Writer) (startJSON, error) {
	result := startJSON{InstanceID: r.id, OrchestrationName: name, Enqueued: true}
	if r.version != "" {
		v := string(r.version)
		result.OrchestrationVersion = &v
	}
	err := client.StartOrchestration(ctx, r.id, name, input, r.options()...)
	var exists *durable.InstanceExistsError
	switch {
	case errors.As(err, &exists) && r.ifExists == existsFail:
		return startJSON{}, instanceExists{id: r.id, status: existingStatus(exists)}
	case errors.As(err, &exists):
		status := existingStatus(exists)
		result.Enqueued, result.ExistingStatus = false, &status
		fmt.Fprintf(stderr, "cdb start: %s; nothing started\n", takenBy(r.id, status))
		return result, nil
	case errors.Is(err, durable.ErrInvalidInput):
		return startJSON{}, usageError{msg: err.Error(), cause: err}
	case err != nil:
		return startJSON{}, err
	}
	return result, nil
}

// queuedStatus is the status of an id taken by a start whose first turn
// has not run (cdb.StatusQueued).
const queuedStatus = string(cdb.StatusQueued)

// existingStatus is the status of what holds a taken id: a start the store
// refused in its own write may read NotFound to a client that cannot read
// a queued start, and is queued all the same.
func existingStatus(exists *durable.InstanceExistsError) string {
	if exists.Status.State == durable.StateNotFound {
		return queuedStatus
	}
	return string(exists.Status.State)
}

// takenBy says what holds id.
func takenBy(id, status string) string {
	if status == queuedStatus {
		return fmt.Sprintf("instance %q is taken: a start of it is queued", id)
	}
	return fmt.Sprintf("instance %q already exists (%s)", id, status)
}

// findInstance reads an instance's info; found is false only when the
// provider says there is no such instance.
func findInstance(ctx context.Context, client *durable.Client, id string) (info cdb.InstanceInfo, found bool, err error) {
	info, err = client.GetInstanceInfo(ctx, id)
	if errors.Is(err, cdb.ErrInstanceNotFound) {
		return cdb.InstanceInfo{}, false, nil
	}
	return info, err == nil, err
}

// liveInstance reads an instance that a message is about to be sent to: a
// typo, or an instance that has finished, would take the message and do
// nothing with it, so both are refused.
func liveInstance(ctx context.Context, client *durable.Client, endpoint, id, what string) (cdb.InstanceInfo, error) {
	info, found, err := findInstance(ctx, client, id)
	switch {
	case err != nil:
		return cdb.InstanceInfo{}, instanceError(endpoint, id, err)
	case !found:
		return cdb.InstanceInfo{}, notFoundError{fmt.Sprintf("instance %q not found: nothing %s (no start of it was accepted, or it was deleted)", id, what)}
	case hasFinished(info.Status):
		return cdb.InstanceInfo{}, instanceFinished{id: id, status: info.Status, what: what}
	}
	return info, nil
}

// instanceFinished refuses a message to an instance that takes no more:
// the instance's state, not the store, is why, so the UI answers 409.
type instanceFinished struct {
	id, what string
	status   cdb.InstanceStatus
}

func (e instanceFinished) Error() string {
	return fmt.Sprintf("instance %q has finished (%s): nothing %s", e.id, e.status, e.what)
}

// hasFinished reports whether an instance takes no more messages. Unlike
// IsTerminal it leaves out ContinuedAsNew: that instance's next execution
// takes them.
func hasFinished(s cdb.InstanceStatus) bool {
	return s == cdb.StatusCompleted || s == cdb.StatusFailed
}

func runRaise(ctx context.Context, argv []string, stdout, stderr io.Writer) error {
	var queue, raw bool
	var format outputFormat
	return operatorCommandChecked("raise", func(fs *flag.FlagSet) {
		fs.BoolVar(&queue, "queue", false, "put DATA on the instance's persistent queue EVENT (read with DequeueEvent) instead of raising the event (WaitForEvent)")
		fs.BoolVar(&raw, "raw", false, rawUsage("DATA"))
		registerOutput(fs, &format)
	}, 2, 3, func(args []string) error {
		if len(args) < 3 {
			return nil
		}
		return checkPayload("DATA", args[2], raw)
	}, func(ctx context.Context, p *cdb.CosmosProvider, endpoint string, args []string, out io.Writer) error {
		id, event, data := args[0], args[1], ""
		if len(args) == 3 {
			data = args[2]
		}
		info, err := raiseOn(ctx, durable.NewClient(p), endpoint, id, event, data, queue)
		if err != nil {
			return err
		}
		verb := "raised event"
		if queue {
			verb = "queued message"
		}
		if format == formatJSON {
			return writeJSON(out, raiseJSON{InstanceID: id, Event: event, Data: data, Queue: queue, InstanceStatus: string(info.Status)})
		}
		fmt.Fprintf(out, "%s %q on instance %s (%s)\n", verb, event, id, info.Status)
		return nil
	})(ctx, argv, stdout, stderr)
}

func runCancel(ctx context.Context, argv []string, stdout, stderr io.Writer) error {
	reason := "canceled with cdb cancel"
	var format outputFormat
	return operatorCommand("cancel", func(fs *flag.FlagSet) {
		fs.StringVar(&reason, "reason", reason, "why: the instance fails with \"canceled: `reason`\"")
		registerOutput(fs, &format)
	}, 1, func(ctx context.Context, p *cdb.CosmosProvider, endpoint string, args []string, out io.Writer) error {
		id := args[0]
		info, err := requestCancel(ctx, durable.NewClient(p), endpoint, id, reason)
		if err != nil {
			return err
		}
		if format == formatJSON {
			return writeJSON(out, cancelJSON{InstanceID: id, Reason: reason, InstanceStatus: string(info.Status)})
		}
		fmt.Fprintf(out, "cancellation of instance %s requested (%s): %s\n", id, info.Status, reason)
		return nil
	})(ctx, argv, stdout, stderr)
}

// raiseOn raises event on a live instance or, with queue, puts it on the
// instance's persistent queue: cdb raise, and the UI's raise. It returns
// the instance as it was when the event was sent.
func raiseOn(ctx context.Context, client *durable.Client, endpoint, id, event, data string, queue bool) (cdb.InstanceInfo, error) {
	info, err := liveInstance(ctx, client, endpoint, id, "raised")
	if err != nil {
		return cdb.InstanceInfo{}, err
	}
	send := client.RaiseEvent
	if queue {
		send = client.EnqueueEvent
	}
	if err := send(ctx, id, event, data); err != nil {
		return cdb.InstanceInfo{}, instanceError(endpoint, id, err)
	}
	return info, nil
}

// requestCancel requests a live instance's cancellation: cdb cancel, and
// the UI's cancel. It returns the instance as it was when asked.
func requestCancel(ctx context.Context, client *durable.Client, endpoint, id, reason string) (cdb.InstanceInfo, error) {
	info, err := liveInstance(ctx, client, endpoint, id, "canceled")
	if err != nil {
		return cdb.InstanceInfo{}, err
	}
	if err := client.CancelInstance(ctx, id, reason); err != nil {
		return cdb.InstanceInfo{}, instanceError(endpoint, id, err)
	}
	return info, nil
}
