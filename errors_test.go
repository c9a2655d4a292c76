package cdb

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCosmosErrorMessageNamesEverything(t *testing.T) {
	err := &CosmosError{Operation: "ReplaceItem", StatusCode: 412, SubStatusCode: 0, Code: "PreconditionFailed",
		Message: "one of the specified pre-condition is not met", ActivityID: "act-9"}
	msg := err.Error()
	for _, want := range []string{"ReplaceItem", "412", "Precondition Failed", "substatus 0", "PreconditionFailed", "pre-condition", "act-9"} {
		assert.Contains(t, msg, want)
	}
	unknown := (&CosmosError{Operation: "CreateItem", Message: "EOF", OutcomeUnknown: true}).Error()
	assert.Contains(t, unknown, "no response")
	assert.Contains(t, unknown, "outcome unknown")
}

func TestStatusPredicatesSeeThroughWrapping(t *testing.T) {
	wrap := func(status int) error {
		return fmt.Errorf("outer: %w", &CosmosError{Operation: "x", StatusCode: status})
	}
	assert.True(t, IsNotFound(wrap(404)))
	for _, sub := range []int{SubStatusReadSessionNotAvailable, SubStatusOwnerResourceNotFound, SubStatusContainerRecreated} {
		assert.False(t, IsNotFound(&CosmosError{Operation: "x", StatusCode: 404, SubStatusCode: sub}),
			"404/%d says nothing about the item", sub)
	}
	assert.False(t, IsNotFound(wrap(409)))
	assert.True(t, IsConflict(wrap(409)))
	assert.True(t, IsPreconditionFailed(wrap(412)))
	assert.True(t, HasStatus(wrap(429), 429))
	assert.False(t, HasStatus(errors.New("plain"), 404))
	assert.False(t, IsNotFound(nil))
}

func TestErrorResponseIsParsed(t *testing.T) {
	cc, _ := newScriptedContainer(t, replyAlways(409, `{"code":"Conflict","message":"Resource with specified id already exists."}`,
		"x-ms-activity-id", "a-1", "x-ms-request-charge", "1.24", "x-ms-substatus", "0"))
	_, err := cc.CreateItem(testCtx(t), NewPartitionKeyString("p"), []byte(`{"id":"a"}`), nil)
	var ce *CosmosError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "CreateItem", ce.Operation)
	assert.Equal(t, 409, ce.StatusCode)
	assert.Equal(t, "Conflict", ce.Code)
	assert.Equal(t, "Resource with specified id already exists.", ce.Message)
	assert.Equal(t, "a-1", ce.ActivityID)
	assert.Equal(t, 1.24, ce.RequestCharge)
	assert.True(t, IsConflict(err))

	// A body that is not JSON is kept as the message.
	cc, _ = newScriptedContainer(t, replyAlways(400, "bad things"))
	_, err = cc.ReadItem(testCtx(t), NewPartitionKeyString("p"), "a", nil)
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "bad things", ce.Message)
}

func TestToProviderErrorMapping(t *testing.T) {
	ce := func(status, sub int) error {
		return &CosmosError{Operation: "op", StatusCode: status, SubStatusCode: sub}
	}
	retryable := []error{
		ce(408, 0), ce(410, 0), ce(410, 1002), ce(429, 3200), ce(449, 0), ce(500, 0), ce(502, 0), ce(503, 0), ce(504, 0),
		ce(404, 1002), ce(404, 1003), ce(403, 3), ce(403, 1008),
		&CosmosError{Operation: "op", Message: "connection reset"},                    // no response
		&CosmosError{Operation: "op", StatusCode: 409, OutcomeUnknown: true},          // outcome unknown
		fmt.Errorf("wrapped: %w", io.ErrUnexpectedEOF),                                // a plain transport error
		fmt.Errorf("cdb: x: %w", context.DeadlineExceeded),                            // a timeout
		&CosmosError{Operation: "op", Message: "x", err: context.DeadlineExceeded},    // a timeout on the wire
		fmt.Errorf("q: %w", &CosmosError{Operation: "op", StatusCode: 429}),           // wrapped
		&CosmosError{Operation: "op", StatusCode: 200, Message: "unreadable success"}, // protocol surprise
	}
	permanent := []error{
		ce(400, 0), ce(400, 1004), ce(401, 0), ce(403, 0), ce(404, 0), ce(409, 0), ce(412, 0), ce(413, 0), ce(424, 0),
		invalid("CreateItem", "id", ErrInvalidID, "empty"),
		fmt.Errorf("x: %w", invalid("ExecuteTransactionalBatch", "batch", ErrBatchTooLarge, "big")),
		fmt.Errorf("x: %w", context.Canceled),
		&CosmosError{Operation: "op", err: x509.UnknownAuthorityError{}},
	}
	for _, err := range retryable {
		pe := ToProviderError("FetchWorkItem", err)
		var p *ProviderError
		require.ErrorAs(t, pe, &p)
		assert.True(t, p.Retryable, "%v", err)
		assert.Equal(t, "FetchWorkItem", p.Op)
		assert.Equal(t, err.Error(), p.Message)
		assert.ErrorIs(t, pe, err, "the cause stays reachable")
	}
	for _, err := range permanent {
		assert.False(t, IsRetryable(ToProviderError("FetchWorkItem", err)), "%v", err)
	}
	assert.Nil(t, ToProviderError("x", nil))
	orig := Permanent("ack", "bad token")
	assert.Same(t, orig, ToProviderError("other", fmt.Errorf("w: %w", orig)))
}

func TestContextErrorsPassThroughToProviderError(t *testing.T) {
	for _, cause := range []error{context.Canceled, context.DeadlineExceeded} {
		pe := ToProviderError("fetch", fmt.Errorf("cdb: ReadItem: %w", cause))
		assert.ErrorIs(t, pe, cause)
		pe = ToProviderError("ack", &CosmosError{Operation: "CreateItem", OutcomeUnknown: true, err: cause})
		assert.ErrorIs(t, pe, cause)
	}
}

func TestValidationErrorNamesTheProblem(t *testing.T) {
	err := invalid("CreateItem", "id", ErrInvalidID, "%d characters, %d allowed", 300, 255)
	assert.Equal(t, "cdb: CreateItem: id: 300 characters, 255 allowed", err.Error())
	assert.ErrorIs(t, err, ErrInvalidID)
	var ve *ValidationError
	require.ErrorAs(t, fmt.Errorf("w: %w", err), &ve)
	assert.Equal(t, "id", ve.Field)
}

func TestCosmosErrorKeepsRetryAfter(t *testing.T) {
	cc, _ := newScriptedContainer(t, replyAlways(429, `{}`, "x-ms-retry-after-ms", "1500"), func(o *ClientOptions) { o.Retry.MaxAttempts = 1 })
	_, err := cc.ReadItem(testCtx(t), NewPartitionKeyString("p"), "a", nil)
	var ce *CosmosError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, 1500*time.Millisecond, ce.RetryAfter)
}

// A 403 whose substatus is not about the credential says what it is: a
// full logical partition is the instance's, and no retry helps.
func TestAFullLogicalPartitionSaysSo(t *testing.T) {
	err := fmt.Errorf("ack: %w", &CosmosError{Operation: "ExecuteTransactionalBatch", StatusCode: 403, SubStatusCode: SubStatusPartitionFull})
	assert.True(t, IsPartitionFull(err))
	assert.Contains(t, err.Error(), "status 403 Forbidden (substatus 1014: the logical partition is full")
	assert.False(t, IsRetryable(ToProviderError("AckOrchestrationItem", err)))
	assert.False(t, IsPartitionFull(&CosmosError{Operation: "x", StatusCode: 403}))
	assert.Equal(t, "cdb: x: status 403 Forbidden (substatus 0)", (&CosmosError{Operation: "x", StatusCode: 403}).Error())
}
