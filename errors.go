package cdb

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Cosmos DB substatus codes (x-ms-substatus) the client acts on.
const (
	SubStatusWriteForbidden                 = 3
	SubStatusPartitionKeyMismatch           = 1001
	SubStatusReadSessionNotAvailable        = 1002 // with 404
	SubStatusOwnerResourceNotFound          = 1003 // with 404: the container, not the item (transient just after it is created)
	SubStatusPartitionKeyRangeGone          = 1002 // with 410
	SubStatusCrossPartitionQueryNotServable = 1004
	SubStatusCompletingSplit                = 1007
	// SubStatusContainerRecreated, with 404 (or 400): the container the
	// request named by its cached resource id ("collection rid mismatch")
	// was deleted and created again under the same name.
	SubStatusContainerRecreated           = 1024
	SubStatusCompletingPartitionMigration = 1008 // with 410
	SubStatusDatabaseAccountNotFound      = 1008 // with 403
	SubStatusPartitionFull                = 1014 // with 403: the logical partition reached its storage limit
	SubStatusAADMetadataForbidden         = 5300 // with 403: Entra ID data-plane roles cannot write metadata
)

// CosmosError is a failed exchange with Cosmos DB: an error status from the
// service, or a transport failure (StatusCode 0) that left no status.
type CosmosError struct {
	Operation     string // client operation, e.g. "ReplaceItem"
	StatusCode    int    // HTTP status; 0 when no response arrived
	SubStatusCode int    // x-ms-substatus
	Code          string // "code" of the error body, e.g. "Conflict"
	Message       string // "message" of the error body, or the transport failure
	ActivityID    string
	RequestCharge float64
	RetryAfter    time.Duration // the service's advice on 429 and friends
	// OutcomeUnknown is set on a write whose request may have reached the
	// service but whose response was lost (a dropped connection, 408, a
	// gateway timeout, a cancelled context). The write may or may not have
	// been applied; the caller resolves it, e.g. by re-reading or by relying
	// on deterministic ids that turn a repeat into 409.
	OutcomeUnknown bool

	// err is the error behind the failure, if any: the transport or
	// context error behind a StatusCode 0, or the check that made the
	// client answer a status itself (a partition key range list with a gap).
	err error
}

// Error describes the failure.
func (e *CosmosError) Error() string {
	var b strings.Builder
	b.WriteString("cdb: ")
	b.WriteString(e.Operation)
	if e.StatusCode == 0 {
		b.WriteString(": no response")
	} else {
		fmt.Fprintf(&b, ": status %d", e.StatusCode)
		if text := http.StatusText(e.StatusCode); text != "" {
			fmt.Fprintf(&b, " %s", text)
		}
		fmt.Fprintf(&b, " (substatus %d", e.SubStatusCode)
		if meaning := substatusMeaning(e.StatusCode, e.SubStatusCode); meaning != "" {
			fmt.Fprintf(&b, ": %s", meaning)
		}
		b.WriteString(")")
	}
	if e.Code != "" {
		fmt.Fprintf(&b, " %s", e.Code)
	}
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	if e.OutcomeUnknown {
		b.WriteString(" [outcome unknown: the write may have been applied]")
	}
	if e.ActivityID != "" {
		fmt.Fprintf(&b, " (activity id %s)", e.ActivityID)
	}
	return b.String()
}

// Unwrap returns the error behind the failure: for one without a status,
// the transport or context error, so errors.Is(err,
// context.DeadlineExceeded) keeps working.
func (e *CosmosError) Unwrap() error { return e.err }

// Sentinels for input the client refuses before sending anything. They are
// reached through a *ValidationError with errors.Is.
var (
	ErrInvalidID                  = errors.New("invalid id")
	ErrInvalidName                = errors.New("invalid database or container name")
	ErrInvalidDocument            = errors.New("invalid document")
	ErrDocumentTooLarge           = errors.New("document too large")
	ErrPartitionKeyTooLarge       = errors.New("partition key value too large")
	ErrInvalidPartitionKey        = errors.New("invalid partition key")
	ErrInvalidQueryParameter      = errors.New("invalid query parameter")
	ErrInvalidQueryOptions        = errors.New("invalid query options")
	ErrInvalidPatch               = errors.New("invalid patch operations")
	ErrTooManyPatchOperations     = errors.New("too many patch operations")
	ErrBatchEmpty                 = errors.New("transactional batch has no operations")
	ErrBatchTooManyOperations     = errors.New("transactional batch has too many operations")
	ErrBatchTooLarge              = errors.New("transactional batch too large")
	ErrPartitionKeyPathMismatch   = errors.New("container partition key path mismatch")
	ErrInvalidContainerProperties = errors.New("invalid container properties")
	ErrInsecureEndpoint           = errors.New("insecure endpoint")
	// ErrInvalidClientConfig: NewClient cannot build a client from its
	// endpoint and ClientOptions (a malformed endpoint, a missing or
	// malformed key, TLS settings that contradict each other or the host).
	ErrInvalidClientConfig = errors.New("invalid client configuration")
)

// ValidationError is input the client refused before sending any request:
// retrying it cannot help. Err is one of the Err* sentinels above.
type ValidationError struct {
	Operation string // client operation, e.g. "CreateItem"
	Field     string // what was wrong, e.g. "id", "partition key", "batch"
	Problem   string // how, with the limit and the actual value where useful
	Err       error
	// Cause is the error that showed the problem when another error did
	// (the endpoint's URL parse error, the CA file's read error); nil
	// otherwise.
	Cause error
}

// Error describes the failure.
func (e *ValidationError) Error() string {
	return fmt.Sprintf("cdb: %s: %s: %s", e.Operation, e.Field, e.Problem)
}

// Unwrap returns the sentinel and the cause, if any, so errors.Is and
// errors.As reach both.
func (e *ValidationError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Cause}
}

func invalid(op, field string, sentinel error, format string, args ...any) *ValidationError {
	return &ValidationError{Operation: op, Field: field, Problem: fmt.Sprintf(format, args...), Err: sentinel}
}

// HasStatus reports whether err is a *CosmosError with this HTTP status.
func HasStatus(err error, status int) bool {
	var ce *CosmosError
	return errors.As(err, &ce) && ce.StatusCode == status
}

// IsNotFound reports a 404 from Cosmos DB: the resource does not exist. A
// 404 with substatus 1002 (no replica has this session's writes yet), 1003
// (the container is not found, as a real account answers for a while after
// creating it) or 1024 (the container was created again: IsContainerRecreated)
// says nothing about the item and is not one.
func IsNotFound(err error) bool {
	var ce *CosmosError
	return errors.As(err, &ce) && ce.StatusCode == http.StatusNotFound && !transientNotFound(ce) && !containerRecreated(ce)
}

// IsContainerRecreated reports a 404 or 400 with substatus 1024: the
// container was deleted and created again under the same name while this
// client kept its routing. The client drops what it kept of the container
// and retries once; this error is what remains when the retry met it too.
// It says nothing about the item.
func IsContainerRecreated(err error) bool {
	var ce *CosmosError
	return errors.As(err, &ce) && containerRecreated(ce)
}

func containerRecreated(ce *CosmosError) bool {
	return (ce.StatusCode == http.StatusNotFound || ce.StatusCode == http.StatusBadRequest) &&
		ce.SubStatusCode == SubStatusContainerRecreated
}

// transientNotFound reports the 404 substatuses that are retried: 1002 and
// 1003.
func transientNotFound(ce *CosmosError) bool {
	return ce.SubStatusCode == SubStatusReadSessionNotAvailable || ce.SubStatusCode == SubStatusOwnerResourceNotFound
}

// isOwnerNotFound reports a 404/1003: the container, not the item, was
// not found.
func isOwnerNotFound(err error) bool {
	var ce *CosmosError
	return errors.As(err, &ce) && ce.StatusCode == http.StatusNotFound && ce.SubStatusCode == SubStatusOwnerResourceNotFound
}

// isForbidden reports a 403 from Cosmos DB: the credential may not do this.
func isForbidden(err error) bool { return HasStatus(err, http.StatusForbidden) }

// isReadSessionNotAvailable reports a 404/1002: the service could not serve
// the session token's position (yet).
func isReadSessionNotAvailable(err error) bool {
	var ce *CosmosError
	return errors.As(err, &ce) && ce.StatusCode == http.StatusNotFound && ce.SubStatusCode == SubStatusReadSessionNotAvailable
}

// StoreStatus returns the HTTP status and substatus of the store's answer
// behind err, for logs and reports; ok is false when err carries none.
func StoreStatus(err error) (status, substatus int, ok bool) {
	var ce *CosmosError
	if !errors.As(err, &ce) || ce.StatusCode == 0 {
		return 0, 0, false
	}
	return ce.StatusCode, ce.SubStatusCode, true
}

// IsConflict reports a 409 from Cosmos DB (the id exists in the partition).
func IsConflict(err error) bool { return HasStatus(err, http.StatusConflict) }

// IsRequestEntityTooLarge reports a 413 from Cosmos DB: a document or a
// batch over the service's size limit, as the service counts it.
func IsRequestEntityTooLarge(err error) bool { return HasStatus(err, http.StatusRequestEntityTooLarge) }

// IsPreconditionFailed reports a 412 from Cosmos DB (a stale ETag or a false
// patch condition).
func IsPreconditionFailed(err error) bool { return HasStatus(err, http.StatusPreconditionFailed) }

// isPatchRefused reports a 400 to a PATCH: one of its operations met a
// path the document does not have (a remove of an entry already gone).
func isPatchRefused(err error) bool { return HasStatus(err, http.StatusBadRequest) }

// missingOrChanged reports that a write conditioned on a document's ETag
// (or on a patch condition) met no document (404) or another version of it
// (412): either way the version it was meant for is gone.
func missingOrChanged(err error) bool { return IsNotFound(err) || IsPreconditionFailed(err) }

// IsOutcomeUnknown reports a write that may or may not have been applied.
func IsOutcomeUnknown(err error) bool {
	var ce *CosmosError
	return errors.As(err, &ce) && ce.OutcomeUnknown
}

// ToProviderError turns a client error into the contract's *ProviderError for
// operation op. Retryable is set for what may succeed on retry (throttling,
// timeouts, unavailability, lost connections, a write whose outcome is
// unknown) and clear for what describes the request itself (other 4xx
// statuses, validation and certificate failures). Only input the client
// validated before sending is a refusal (ErrRefused); a status from the
// store never is, whatever it says. Context errors stay reachable through
// errors.Is. A nil err gives nil; a *ProviderError is returned as is.
func ToProviderError(op string, err error) error {
	if err == nil {
		return nil
	}
	var pe *ProviderError
	if errors.As(err, &pe) {
		return pe
	}
	var ve *ValidationError
	return &ProviderError{Op: op, Message: err.Error(), Retryable: retryableError(err), Err: err, Refusal: errors.As(err, &ve)}
}

// substatusMeaning says what a substatus means where the status alone
// would mislead (a 403 that is not about the credential), "" otherwise.
func substatusMeaning(status, sub int) string {
	switch {
	case status == http.StatusForbidden && sub == SubStatusPartitionFull:
		return "the logical partition is full: one instance's documents reached Cosmos DB's per-partition-key storage limit; prune its old executions or delete it"
	case status == http.StatusForbidden && sub == SubStatusWriteForbidden:
		return "a write reached a read-only region"
	case status == http.StatusForbidden && sub == SubStatusAADMetadataForbidden:
		return "an Entra ID data-plane role cannot create databases or containers; create them beforehand and set SkipBootstrap"
	case status == http.StatusNotFound && sub == SubStatusOwnerResourceNotFound:
		return "the container is not ready yet, or does not exist"
	case (status == http.StatusNotFound || status == http.StatusBadRequest) && sub == SubStatusContainerRecreated:
		return "the container was deleted and created again under the same name; the client dropped what it kept of the old one, and a retry met this too"
	}
	return ""
}

// IsPartitionFull reports a 403/1014: the logical partition (one
// instance's documents) reached its storage limit. No retry helps until
// documents are deleted from it.
func IsPartitionFull(err error) bool {
	var ce *CosmosError
	return errors.As(err, &ce) && ce.StatusCode == http.StatusForbidden && ce.SubStatusCode == SubStatusPartitionFull
}

// retryableError decides whether trying again may succeed.
func retryableError(err error) bool {
	switch {
	case errors.Is(err, context.Canceled):
		// The caller asked to stop; trying again is its decision, not ours.
		return false
	case errors.Is(err, context.DeadlineExceeded):
		return true
	}
	var ve *ValidationError
	if errors.As(err, &ve) {
		return false
	}
	if isCertificateError(err) {
		return false
	}
	var ce *CosmosError
	if errors.As(err, &ce) {
		return retryableStatus(ce)
	}
	// Anything else (a plain transport error) counts as retryable, as
	// IsRetryable does.
	return true
}

// retryableStatus says which answers a retry may change: throttling,
// timeouts, moved ranges, the service's own trouble, and the substatuses
// of a replica or region that is not ready yet.
func retryableStatus(ce *CosmosError) bool {
	if ce.StatusCode == 0 || ce.OutcomeUnknown {
		return true // connection failures and writes to be resolved
	}
	switch ce.StatusCode {
	case http.StatusRequestTimeout, http.StatusGone, http.StatusTooManyRequests, 449,
		http.StatusLocked, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	case http.StatusNotFound:
		return transientNotFound(ce)
	case http.StatusForbidden:
		return ce.SubStatusCode == SubStatusWriteForbidden || ce.SubStatusCode == SubStatusDatabaseAccountNotFound
	}
	if ce.StatusCode < 400 {
		return true // a success we could not read; the request may be sent again
	}
	// Other 4xx (400, 401, 403, 404, 409, 412, 413, 424, ...) describe the
	// request itself; an unknown 5xx is the service's trouble.
	return ce.StatusCode >= 500
}

// isCertificateError reports a TLS verification failure: a configuration
// problem that no retry fixes.
func isCertificateError(err error) bool {
	var (
		verr *tls.CertificateVerificationError
		uerr x509.UnknownAuthorityError
		herr x509.HostnameError
		cerr x509.CertificateInvalidError
	)
	return errors.As(err, &verr) || errors.As(err, &uerr) || errors.As(err, &herr) || errors.As(err, &cerr)
}
