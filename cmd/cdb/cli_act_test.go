package main

// start, raise and cancel through the built binary: what they enqueue, the
// exit codes and messages of their refusals, and their JSON.

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// queued returns the instance and the messages of the next orchestration
// item in the fixture's container (nil when there is none), and consumes
// them with an empty turn, so the next call sees only what came later.
func (fx fixture) queued(t *testing.T) (string, []cdb.WorkItem) {
	t.Helper()
	ctx := context.Background()
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: fx.account.Client(), SkipBootstrap: true, ShortPolling: true})
	require.NoError(t, err)
	defer p.Close()
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	if item == nil {
		return "", nil
	}
	require.NoError(t, p.AckOrchestrationItem(ctx, token, item.ExecutionID, nil, nil, nil, cdb.ExecutionMetadata{}, nil))
	return item.Instance, item.Messages
}

func TestBinaryStartEnqueuesTheStartAndPrintsTheInstanceID(t *testing.T) {
	fx, key := operatorFixture(t)
	conn := []string{"-endpoint", fx.endpoint, "-key", key}

	code, stdout, stderr := cli(append([]string{"start", "ProcessOrder", "-id", "order-7", "-input", `{"total":12}`, "-version", "1.2.0"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "order-7\n", stdout, "only the id, for id=$(cdb start ...)")
	assert.Empty(t, stderr)
	instance, messages := fx.queued(t)
	assert.Equal(t, "order-7", instance)
	version := "1.2.0"
	assert.Equal(t, []cdb.WorkItem{cdb.StartOrchestrationMessage{Instance: "order-7", Orchestration: "ProcessOrder", Input: `{"total":12}`,
		Version: &version, ExecutionID: cdb.InitialExecutionID}}, messages)

	code, stdout, stderr = cli(append([]string{"start", "ProcessOrder"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\n$`, stdout, "without -id, a new UUID")
	instance, messages = fx.queued(t)
	assert.Equal(t, strings.TrimSpace(stdout), instance)
	require.Len(t, messages, 1)
	assert.Nil(t, messages[0].(cdb.StartOrchestrationMessage).Version, "no -version: the runtime's registry decides")

	b := cli(append([]string{"start", "ProcessOrder", "-id", "from-stdin", "-input-file", "-", "-o", "json"}, conn...)...)
	cmd := b.command(t)
	cmd.Stdin = strings.NewReader(`{"items":3}`)
	out, err := cmd.Output()
	require.NoError(t, err)
	var started map[string]any
	require.NoError(t, json.Unmarshal(out, &started), string(out))
	assert.Equal(t, map[string]any{"instance_id": "from-stdin", "orchestration_name": "ProcessOrder",
		"orchestration_version": nil, "enqueued": true, "existing_status": nil}, started)
	_, messages = fx.queued(t)
	require.Len(t, messages, 1)
	assert.Equal(t, `{"items":3}`, messages[0].(cdb.StartOrchestrationMessage).Input)
}

func TestBinaryStartRefusesAnExistingInstanceWithExitCode3(t *testing.T) {
	fx, key := operatorFixture(t)
	conn := []string{"-endpoint", fx.endpoint, "-key", key}

	code, stdout, stderr := cli(append([]string{"start", "TestOrch", "-id", "done"}, conn...)...).run(t)
	assert.Equal(t, 3, code)
	assert.Empty(t, stdout)
	assert.Equal(t, `cdb start: instance "done" already exists (Completed): nothing started; pass another -id, or -if-exists ignore to accept the existing one`+"\n", stderr)
	_, messages := fx.queued(t)
	assert.Empty(t, messages, "nothing was enqueued")

	code, stdout, stderr = cli(append([]string{"start", "TestOrch", "-id", "busy", "-if-exists", "ignore", "-o", "json"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, `instance "busy" already exists (Running); nothing started`)
	var started map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &started), stdout)
	assert.Equal(t, map[string]any{"instance_id": "busy", "orchestration_name": "TestOrch",
		"orchestration_version": nil, "enqueued": false, "existing_status": "Running"}, started)
	_, messages = fx.queued(t)
	assert.Empty(t, messages, "ignore enqueues nothing either")

	code, _, stderr = cli(append([]string{"start", "TestOrch", "-id", "queued"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	code, _, stderr = cli(append([]string{"start", "TestOrch", "-id", "queued"}, conn...)...).run(t)
	assert.Equal(t, 3, code, "a queued start takes its id")
	assert.Equal(t, `cdb start: instance "queued" is taken: a start of it is queued: nothing started; pass another -id, or -if-exists ignore to accept the existing one`+"\n", stderr)
	code, stdout, stderr = cli(append([]string{"start", "TestOrch", "-id", "queued", "-if-exists", "ignore", "-o", "json"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(stdout), &started), stdout)
	assert.Equal(t, "Queued", started["existing_status"])
	_, messages = fx.queued(t)
	assert.Len(t, messages, 1, "one start queued")
}

func TestBinaryStartRefusesBadArgumentsAsUsageErrors(t *testing.T) {
	fx, key := operatorFixture(t)
	conn := []string{"-endpoint", fx.endpoint, "-key", key}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-version", "1.x"}, `invalid value "1.x" for flag -version: cdb: invalid semantic version "1.x"`},
		{[]string{"-input", "{}", "-input-file", "in.json"}, "give the input once: -input or -input-file"},
		{[]string{"-if-exists", "replace"}, `"replace" is not one of fail, ignore`},
		{[]string{"-id", "a::sub::1"}, `reserved sub-orchestration marker`},
	} {
		code, stdout, stderr := cli(append(append([]string{"start", "TestOrch"}, c.args...), conn...)...).run(t)
		assert.Equal(t, 2, code, "cdb start %v", c.args)
		assert.Empty(t, stdout, "cdb start %v", c.args)
		assert.Contains(t, stderr, c.want, "cdb start %v", c.args)
		assert.Contains(t, stderr, "usage: cdb start [flags] NAME", "cdb start %v", c.args)
	}
	_, messages := fx.queued(t)
	assert.Empty(t, messages)
}

// An operator's typo in a payload (start's input, an event's data) is
// refused before anything is sent, naming where it went wrong, with exit
// code 2; -raw sends text that is not JSON as is.
func TestBinaryStartAndRaiseRefuseAPayloadThatIsNotJSON(t *testing.T) {
	fx, key := operatorFixture(t)
	conn := []string{"-endpoint", fx.endpoint, "-key", key}
	file := filepath.Join(t.TempDir(), "order.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"items": [1, 2}`), 0o600))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"start", "Order", "-input", "{items: }"},
			`cdb start: -input is not JSON (invalid character 'i' looking for beginning of object key string, at byte 2); nothing was sent (-raw sends text that is not JSON as is)`},
		{[]string{"start", "Order", "-input-file", file},
			`cdb start: -input-file ` + file + ` is not JSON (invalid character '}' after array element, at byte 16); nothing was sent (-raw sends text that is not JSON as is)`},
		{[]string{"raise", "busy", "approval", `{"by":`},
			`cdb raise: DATA is not JSON (unexpected end of JSON input, at byte 6); nothing was sent (-raw sends text that is not JSON as is)`},
		{[]string{"raise", "-queue", "busy", "approval", `yes`},
			`cdb raise: DATA is not JSON (invalid character 'y' looking for beginning of value, at byte 1); nothing was sent (-raw sends text that is not JSON as is)`},
	} {
		code, stdout, stderr := cli(append(c.args, conn...)...).run(t)
		assert.Equal(t, 2, code, "cdb %v", c.args)
		assert.Empty(t, stdout, "cdb %v", c.args)
		assert.Equal(t, c.want, strings.SplitN(stderr, "\n", 2)[0], "cdb %v", c.args)
	}
	_, messages := fx.queued(t)
	assert.Empty(t, messages, "nothing was sent")

	code, _, stderr := cli(append([]string{"start", "Order", "-id", "plain", "-raw", "-input", "{items: }"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	_, messages = fx.queued(t)
	assert.Equal(t, []cdb.WorkItem{cdb.StartOrchestrationMessage{Instance: "plain", Orchestration: "Order", Input: "{items: }",
		ExecutionID: cdb.InitialExecutionID}}, messages)
	code, _, stderr = cli(append([]string{"raise", "-raw", "busy", "approval", "yes"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	_, messages = fx.queued(t)
	assert.Equal(t, []cdb.WorkItem{cdb.ExternalRaisedMessage{Instance: "busy", Name: "approval", Data: "yes"}}, messages)
}

func TestBinaryRaiseSendsAnEventOrAQueueMessage(t *testing.T) {
	fx, key := operatorFixture(t)
	conn := []string{"-endpoint", fx.endpoint, "-key", key}

	code, stdout, stderr := cli(append([]string{"raise", "busy", "approve", `{"by":"ann"}`}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, `raised event "approve" on instance busy (Running)`+"\n", stdout)
	instance, messages := fx.queued(t)
	assert.Equal(t, "busy", instance)
	assert.Equal(t, []cdb.WorkItem{cdb.ExternalRaisedMessage{Instance: "busy", Name: "approve", Data: `{"by":"ann"}`}}, messages)

	code, stdout, stderr = cli(append([]string{"raise", "-queue", "-o", "json", "busy", "shipped"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	var raised map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &raised), stdout)
	assert.Equal(t, map[string]any{"instance_id": "busy", "event": "shipped", "data": "", "queue": true, "instance_status": "Running"}, raised)
	_, messages = fx.queued(t)
	assert.Equal(t, []cdb.WorkItem{cdb.QueueEventMessage{Instance: "busy", Name: "shipped", Data: ""}}, messages)
}

func TestBinaryCancelRequestsTheCancellation(t *testing.T) {
	fx, key := operatorFixture(t)
	conn := []string{"-endpoint", fx.endpoint, "-key", key}

	code, stdout, stderr := cli(append([]string{"cancel", "busy", "-reason", "customer called"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "cancellation of instance busy requested (Running): customer called\n", stdout)
	_, messages := fx.queued(t)
	assert.Equal(t, []cdb.WorkItem{cdb.CancelInstanceMessage{Instance: "busy", Reason: "customer called"}}, messages)

	code, stdout, stderr = cli(append([]string{"cancel", "busy", "-o", "json"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	var canceled map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &canceled), stdout)
	assert.Equal(t, map[string]any{"instance_id": "busy", "reason": "canceled with cdb cancel", "instance_status": "Running"}, canceled)
}

// raise and cancel look the instance up first: a typo or a finished
// instance would take the message and do nothing with it. "Not found" is
// said only when the provider says so.
func TestBinaryRaiseAndCancelRefuseAnUnknownOrFinishedInstance(t *testing.T) {
	fx, key := operatorFixture(t)
	conn := []string{"-endpoint", fx.endpoint, "-key", key}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"raise", "nobdy", "approve"}, `cdb raise: instance "nobdy" not found: nothing raised`},
		{[]string{"raise", "-queue", "nobdy", "approve"}, `cdb raise: instance "nobdy" not found: nothing raised`},
		{[]string{"cancel", "nobdy"}, `cdb cancel: instance "nobdy" not found: nothing canceled`},
		{[]string{"raise", "done", "approve"}, `cdb raise: instance "done" has finished (Completed): nothing raised`},
		{[]string{"cancel", "done"}, `cdb cancel: instance "done" has finished (Completed): nothing canceled`},
	} {
		code, stdout, stderr := cli(append(c.args, conn...)...).run(t)
		assert.Equal(t, 1, code, "cdb %v", c.args)
		assert.Empty(t, stdout, "cdb %v", c.args)
		assert.Contains(t, stderr, c.want, "cdb %v", c.args)
	}
	_, messages := fx.queued(t)
	assert.Empty(t, messages, "nothing was enqueued")

	onBusy := func(r cdb.FakeRequest) bool { return strings.Contains(r.PartitionKey, `"busy"`) }
	fx.account.InjectFault(cdb.FakeFault{Match: onBusy, Status: http.StatusTooManyRequests, RetryAfter: time.Millisecond})
	for _, args := range [][]string{{"raise", "busy", "approve"}, {"cancel", "busy"}, {"start", "TestOrch", "-id", "busy"}} {
		code, _, stderr := cli(append(args, conn...)...).run(t)
		assert.Equal(t, 1, code, "cdb %v", args)
		assert.NotContains(t, stderr, "not found", "cdb %v while throttled", args)
		assert.Contains(t, stderr, "throttled (429)", "cdb %v", args)
	}
}

func TestBinaryRaiseWantsAnInstanceAndAnEvent(t *testing.T) {
	code, stdout, stderr := cli("raise", "busy").run(t)
	assert.Equal(t, 2, code)
	assert.Empty(t, stdout)
	assert.Regexp(t, regexp.MustCompile(`^cdb raise: want 2 to 3 arguments, got 1\nusage: cdb raise \[flags\] INSTANCE EVENT \[DATA\]\n`), stderr)
}

// A start no runtime has taken yet is Queued to every command: show says
// so with the orchestration it names, raise and cancel send to it, and a
// second start is refused as queued.
func TestBinaryCommandsTellAQueuedStartAlike(t *testing.T) {
	fx, key := operatorFixture(t)
	conn := []string{"-endpoint", fx.endpoint, "-key", key}
	code, _, stderr := cli(append([]string{"start", "ProcessOrder", "-id", "waiting", "-input", `{"total":12}`}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)

	code, stdout, stderr := cli(append([]string{"show", "waiting", "-o", "json"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	var shown map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &shown), stdout)
	assert.Equal(t, "Queued", shown["status"])
	assert.Equal(t, "ProcessOrder", shown["orchestration_name"])
	assert.Equal(t, []any{}, shown["history"])

	code, stdout, stderr = cli(append([]string{"raise", "waiting", "approve", `{"by":"ann"}`}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, `raised event "approve" on instance waiting (Queued)`+"\n", stdout)
	code, stdout, stderr = cli(append([]string{"cancel", "waiting", "-reason", "customer called"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "cancellation of instance waiting requested (Queued): customer called\n", stdout)
	code, _, stderr = cli(append([]string{"start", "ProcessOrder", "-id", "waiting"}, conn...)...).run(t)
	assert.Equal(t, 3, code)
	assert.Contains(t, stderr, `instance "waiting" is taken: a start of it is queued`)

	instance, messages := fx.queued(t)
	assert.Equal(t, "waiting", instance)
	assert.Len(t, messages, 3, "the start, the event and the cancellation, in one batch")
}
