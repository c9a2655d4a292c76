package durable

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// cardDeclined is a user's own error type, as a payment activity returns it.
type cardDeclined struct {
	Reason string
}

func (e *cardDeclined) Error() string      { return "card declined: " + e.Reason }
func (e *cardDeclined) ErrorCode() string  { return e.Reason }
func (e *cardDeclined) NonRetryable() bool { return true }

// TestTypedErrorsReachTheOrchestration: an activity's registered error
// type and an ApplicationError reach the orchestration, where errors.As
// finds the type, code and marker; a plain error carries none; and an
// orchestration that passes the error on fails with it, so the client
// finds the type too.
func TestTypedErrorsReachTheOrchestration(t *testing.T) {
	eachProvider(t, func(t *testing.T, h *harness) {
		require.NoError(t, RegisterError[*cardDeclined](h.registry))
		h.activity("Charge", func(_ ActivityContext, in string) (string, error) {
			return "", fmt.Errorf("charging %s: %w", in, &cardDeclined{Reason: "insufficient_funds"})
		})
		h.activity("Reserve", func(ActivityContext, string) (string, error) {
			return "", NewApplicationError("OutOfStock", "sku-42", "out of stock", false)
		})
		h.activity("Plain", func(ActivityContext, string) (string, error) { return "", errors.New("flaky") })
		h.orchestration("Order", func(ctx *OrchestrationContext, _ string) (string, error) {
			_, charge := ctx.ScheduleActivity("Charge", "order-1").Await()
			var declined *cardDeclined
			if !errors.As(charge, &declined) {
				return "", fmt.Errorf("no *cardDeclined in %v", charge)
			}
			var app *ApplicationError
			if !errors.As(charge, &app) {
				return "", fmt.Errorf("no *ApplicationError in %v", charge)
			}
			_, reserve := ctx.ScheduleActivity("Reserve", "").Await()
			_, plain := ctx.ScheduleActivity("Plain", "").Await()
			var plainApp *ApplicationError
			return fmt.Sprintf("%s|%s/%s/%t/%t|%t|%t/%t|%t/%t", declined.Reason, app.Type, app.Code, app.NonRetryable,
				IsNonRetryable(charge), errors.Is(reserve, &ApplicationError{Type: "OutOfStock", Code: "sku-42"}),
				IsNonRetryable(reserve), errors.Is(reserve, &ApplicationError{Type: "OutOfStock", Code: "other"}),
				errors.As(plain, &plainApp), IsNonRetryable(plain)), nil
		})
		h.orchestration("PassesOn", func(ctx *OrchestrationContext, _ string) (string, error) {
			_, err := ctx.ScheduleActivity("Charge", "order-2").Await()
			return "", fmt.Errorf("order-2: %w", err)
		})
		h.orchestration("Declines", func(*OrchestrationContext, string) (string, error) {
			return "", &cardDeclined{Reason: "fraud"}
		})
		h.run()
		h.start("typed-errors", "Order", "")
		assert.Equal(t, "insufficient_funds|cardDeclined/insufficient_funds/true/true|true|false/false|false/false",
			h.completed("typed-errors"))

		h.start("passes-on", "PassesOn", "")
		_, err := WaitForCompletionAs[string](h.ctx, h.client, "passes-on", time.Minute)
		var declined *cardDeclined
		require.ErrorAs(t, err, &declined)
		assert.Equal(t, &cardDeclined{Reason: "insufficient_funds"}, declined)
		assert.True(t, IsNonRetryable(err))

		h.start("declines", "Declines", "")
		_, err = WaitForCompletionAs[string](h.ctx, h.client, "declines", time.Minute)
		require.ErrorAs(t, err, &declined, "an orchestration's own registered error reaches its client")
		assert.Equal(t, &cardDeclined{Reason: "fraud"}, declined)
	})
}

// TestApplicationErrorWireForm pins the failure an activity's typed error
// becomes: duroxide's Application variant, the text followed by the
// trailer, the retryable flag the marker's opposite. A plain error is
// written as before, as duroxide writes it.
func TestApplicationErrorWireForm(t *testing.T) {
	reg := NewRegistry()
	require.NoError(t, RegisterError[*cardDeclined](reg))
	cases := []struct {
		err  error
		want string
	}{
		{NewApplicationError("CardDeclined", "insufficient_funds", "card declined", true),
			`{"Application":{"kind":"ActivityFailed","message":"card declined [ApplicationError {\"type\":\"CardDeclined\",\"code\":\"insufficient_funds\",\"non_retryable\":true}]","retryable":false}}`},
		{NewApplicationError("OutOfStock", "", "out of stock", false),
			`{"Application":{"kind":"ActivityFailed","message":"out of stock [ApplicationError {\"type\":\"OutOfStock\"}]","retryable":true}}`},
		{fmt.Errorf("charge: %w", &cardDeclined{Reason: "expired"}),
			`{"Application":{"kind":"ActivityFailed","message":"charge: card declined: expired [ApplicationError {\"type\":\"cardDeclined\",\"code\":\"expired\",\"non_retryable\":true,\"details\":{\"Reason\":\"expired\"}}]","retryable":false}}`},
		{errors.New("boom"), `{"Application":{"kind":"ActivityFailed","message":"boom","retryable":false}}`},
	}
	for _, tc := range cases {
		got, err := cdb.MarshalErrorDetails(applicationFailure(cdb.AppActivityFailed{}, tc.err, reg))
		require.NoError(t, err)
		assert.Equal(t, tc.want, string(got))
		back, err := cdb.UnmarshalErrorDetails(got)
		require.NoError(t, err, "duroxide's decoder reads it")
		assert.Equal(t, applicationFailure(cdb.AppActivityFailed{}, tc.err, reg), back)
	}
}

// TestApplicationErrorTrailerParsing: only a well-formed trailer at the
// very end of a message is read, and its last occurrence wins, whatever
// the message before it holds.
func TestApplicationErrorTrailerParsing(t *testing.T) {
	e, ok := parseApplicationError(`a [ApplicationError {"type":"X"}] b [ApplicationError {"type":"Y","code":"c [ApplicationError {\"type\":\"Z\"}]"}]`)
	require.True(t, ok)
	assert.Equal(t, "Y", e.Type)
	assert.Equal(t, `c [ApplicationError {"type":"Z"}]`, e.Code)
	assert.Equal(t, `a [ApplicationError {"type":"X"}] b`, e.Message)

	for _, message := range []string{
		"plain",
		`x [ApplicationError {"type":"X"}] trailing`,
		`x [ApplicationError {"type":""}]`,
		`x [ApplicationError {"type":"X"]`,
	} {
		_, ok := parseApplicationError(message)
		assert.False(t, ok, message)
	}
}

// TestRegisterErrorRefusesWhatCannotTravel: a name is registered once,
// and an interface type, which has no fields to carry, not at all.
func TestRegisterErrorRefusesWhatCannotTravel(t *testing.T) {
	reg := NewRegistry()
	require.NoError(t, RegisterError[*cardDeclined](reg))
	assert.EqualError(t, RegisterError[*cardDeclined](reg),
		`durable: register error *durable.cardDeclined: the name "cardDeclined" is taken by *durable.cardDeclined`)
	assert.EqualError(t, RegisterError[error](reg), "durable: register error error: an interface type cannot be rebuilt")
}
