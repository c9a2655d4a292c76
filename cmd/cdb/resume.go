package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/duroxide-go/cdb"
)

// `cdb resume INSTANCE` retries a parked instance's turn now: a runtime
// parks an instance whose code no longer matches its history and retries
// it with backoff; after the deploy that fixes the code, the operator need
// not wait for the park's retry time. It is cdb.CosmosProvider's
// ResumeParked, as the UI's resume button is.

const resumeDetails = "A runtime parks an instance whose code no longer matches its history (durable.ParkOnNondeterminism)\n" +
	"and retries its turn with backoff until code that matches runs it. After deploying that code, resume\n" +
	"makes the parked turn's messages due now instead of at the park's retry time; the next runtime to\n" +
	"poll takes it, and the park ends when its turn commits (or the count grows if it diverges again).\n" +
	"An instance that is not parked, or whose lock a runtime holds (it is running the turn now), is\n" +
	"refused with exit code 1 and nothing changes."

// resumeJSON is what cdb resume -o json prints.
type resumeJSON struct {
	InstanceID string    `json:"instance_id"`
	Messages   int       `json:"messages"` // brought forward; 0 when they were due already
	Reason     string    `json:"reason"`   // the park's
	Count      uint32    `json:"count"`    // parks in a row
	RetryAt    time.Time `json:"retry_at"` // when the park would have retried
}

func runResume(ctx context.Context, argv []string, stdout, stderr io.Writer) error {
	var format outputFormat
	return operatorCommand("resume", func(fs *flag.FlagSet) {
		registerOutput(fs, &format)
	}, 1, func(ctx context.Context, p *cdb.CosmosProvider, endpoint string, args []string, out io.Writer) error {
		r, err := resumeParked(ctx, p, endpoint, args[0])
		if err != nil {
			return err
		}
		if format == formatJSON {
			return writeJSON(out, r)
		}
		fmt.Fprintln(out, r.message())
		return nil
	})(ctx, argv, stdout, stderr)
}

// message says what a resume did, as cdb resume and the UI print it.
func (r resumeJSON) message() string {
	return fmt.Sprintf("resumed parked instance %s: %d message(s) due now instead of at %s (parked %d time(s): %s)",
		r.InstanceID, r.Messages, r.RetryAt.Format(time.RFC3339), r.Count, r.Reason)
}

// resumeParked makes a parked instance's turn due now: cdb resume, and the
// UI's resume. It reads the park first, to say what it was.
func resumeParked(ctx context.Context, p *cdb.CosmosProvider, endpoint, id string) (resumeJSON, error) {
	info, err := p.GetInstanceInfo(ctx, id)
	if err != nil {
		return resumeJSON{}, notResumed(endpoint, id, err)
	}
	if info.Parked == nil {
		return resumeJSON{}, notResumed(endpoint, id, cdb.ErrNotParked)
	}
	n, err := p.ResumeParked(ctx, id)
	if err != nil {
		return resumeJSON{}, notResumed(endpoint, id, err)
	}
	return resumeJSON{InstanceID: id, Messages: n, Reason: info.Parked.Reason, Count: info.Parked.Count, RetryAt: info.Parked.RetryAt.UTC()}, nil
}

// notResumed says why nothing was resumed: the refusals in the CLI's
// words (each still matching its sentinel, for the UI's status codes), any
// other failure as the other commands say it.
func notResumed(endpoint, id string, err error) error {
	switch {
	case errors.Is(err, cdb.ErrInstanceNotFound):
		return notFoundError{fmt.Sprintf("instance %q not found: nothing resumed", id)}
	case errors.Is(err, cdb.ErrNotParked):
		return refusal{fmt.Sprintf("instance %q is not parked: nothing resumed", id), cdb.ErrNotParked}
	case errors.Is(err, cdb.ErrInstanceLocked):
		return refusal{fmt.Sprintf("instance %q is locked by a runtime, which is running its turn now: nothing resumed", id), cdb.ErrInstanceLocked}
	}
	return instanceError(endpoint, id, err)
}

// refusal is a store's refusal said in the CLI's words; it matches its
// sentinel.
type refusal struct {
	message  string
	sentinel error
}

func (e refusal) Error() string { return e.message }

func (e refusal) Is(target error) bool { return target == e.sentinel }
