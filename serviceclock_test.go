package cdb_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// signedRequest is what a request said its time was, and how the account
// answered.
type signedRequest struct {
	date   string // x-ms-date
	status int
}

// dateLog records the x-ms-date and the status of every request that
// goes through it to the account.
type dateLog struct {
	next http.RoundTripper
	mu   sync.Mutex
	reqs []signedRequest
}

func (l *dateLog) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := l.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reqs = append(l.reqs, signedRequest{date: req.Header.Get("x-ms-date"), status: res.StatusCode})
	return res, nil
}

// take returns the requests recorded since the last take.
func (l *dateLog) take() []signedRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.reqs
	l.reqs = nil
	return out
}

// skewedClient is a client of acct (the strict fake, on clock) on a
// machine whose clock is skew off clock, and the log of what it signs.
func skewedClient(t *testing.T, acct *cdb.FakeAccount, clock *testClock, skew time.Duration) (*cdb.Client, *dateLog) {
	t.Helper()
	log := &dateLog{next: acct.Transport()}
	c, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(), Transport: log,
		Now: func() time.Time { return clock.Now().Add(skew) }})
	require.NoError(t, err)
	return c, log
}

func httpDate(t time.Time) string { return t.UTC().Format(http.TimeFormat) }

// A machine whose clock is off, but by less than the account tolerates
// (15 minutes), is answered; the answer's Date tells it the service's
// time, and it signs its next request with that, not with its own clock.
func TestAClientSignsItsNextRequestWithTheServicesTime(t *testing.T) {
	for _, skew := range []time.Duration{10 * time.Minute, -10 * time.Minute} {
		t.Run(skew.String(), func(t *testing.T) {
			ctx := rulesContext(t)
			clock := newTestClock()
			acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
			c, log := skewedClient(t, acct, clock, skew)

			_, err := c.ReadAccount(ctx)
			require.NoError(t, err)
			_, err = c.ReadAccount(ctx)
			require.NoError(t, err)
			assert.Equal(t, []signedRequest{
				{date: httpDate(clock.Now().Add(skew)), status: http.StatusOK},
				{date: httpDate(clock.Now()), status: http.StatusOK},
			}, log.take(), "the first request signed by the machine's clock, the second by the service's")
			assert.InDelta(t, float64(-skew), float64(c.ClockOffset()), float64(time.Second), "ClockOffset")
			assert.Equal(t, httpDate(clock.Now()), httpDate(c.ServiceTime()), "ServiceTime")
		})
	}
}

// A machine an hour off is refused (403: the date is outside the account's
// tolerance); the refusal's Date shows the service's time, so the request
// is signed again with it and goes through, and so does every later one
// at the first attempt.
func TestARequestRefusedForItsDateIsSignedAgainWithTheServicesTime(t *testing.T) {
	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		t.Run(skew.String(), func(t *testing.T) {
			ctx := rulesContext(t)
			clock := newTestClock()
			acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
			c, log := skewedClient(t, acct, clock, skew)

			_, err := c.CreateDatabase(ctx, "clocks")
			require.NoError(t, err, "a write, refused for its date, is sent again")
			assert.Equal(t, []signedRequest{
				{date: httpDate(clock.Now().Add(skew)), status: http.StatusForbidden},
				{date: httpDate(clock.Now()), status: http.StatusCreated},
			}, log.take())
			_, err = c.ReadDatabase(ctx, "clocks")
			require.NoError(t, err)
			assert.Equal(t, []signedRequest{{date: httpDate(clock.Now()), status: http.StatusOK}}, log.take())
		})
	}
}

// The offset is measured again on every response: a machine clock that
// jumps (an NTP step, a VM restored) is corrected on the next answer, and
// one that comes right again stops being corrected.
func TestAClockThatJumpsIsMeasuredAgain(t *testing.T) {
	ctx := rulesContext(t)
	clock := newTestClock()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
	var mu sync.Mutex
	skew := time.Duration(0)
	setSkew := func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		skew = d
	}
	log := &dateLog{next: acct.Transport()}
	c, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(), Transport: log, Now: func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return clock.Now().Add(skew)
	}})
	require.NoError(t, err)

	for _, step := range []struct {
		skew       time.Duration
		wantOffset time.Duration
	}{{0, 0}, {-2 * time.Hour, 2 * time.Hour}, {30 * time.Minute, -30 * time.Minute}, {0, 0}} {
		setSkew(step.skew)
		_, err := c.ReadAccount(ctx) // measures (refused first when the jump is beyond 15 minutes)
		require.NoError(t, err, "skew %s", step.skew)
		_, err = c.ReadAccount(ctx)
		require.NoError(t, err, "skew %s", step.skew)
		reqs := log.take()
		assert.Equal(t, signedRequest{date: httpDate(clock.Now()), status: http.StatusOK}, reqs[len(reqs)-1], "skew %s", step.skew)
		assert.InDelta(t, float64(step.wantOffset), float64(c.ClockOffset()), float64(time.Second), "skew %s", step.skew)
		clock.Advance(time.Minute)
	}
}

// A Retry-After given as a date is a time on the service's clock: the
// wait is read against the answer's Date, not against this machine's
// clock, here an hour ahead of the service (it would not wait at all).
func TestARetryAfterDateIsReadOnTheServicesClock(t *testing.T) {
	ctx := rulesContext(t)
	clock := newTestClock()
	clock.Advance(-time.Hour) // the service's time; the machine's is time.Now
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
	c, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(),
		Transport: retryAfterDate{next: acct.Transport(), after: time.Second},
		Retry:     cdb.RetryOptions{MaxElapsed: 500 * time.Millisecond}}) // no wait of a second
	require.NoError(t, err)
	_, err = c.ReadAccount(ctx) // learns the offset
	require.NoError(t, err)

	_, err = c.ReadDatabase(ctx, "throttled")
	var ce *cdb.CosmosError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, time.Second, ce.RetryAfter, "a second after the answer's Date")
}

// retryAfterDate answers every read of a database 429 with a Retry-After
// date after the account's Date.
type retryAfterDate struct {
	next  http.RoundTripper
	after time.Duration
}

func (r retryAfterDate) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := r.next.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || req.URL.Path == "/" {
		return res, err
	}
	date, perr := http.ParseTime(res.Header.Get("Date"))
	if perr != nil {
		return res, nil
	}
	res.StatusCode = http.StatusTooManyRequests
	res.Header.Set("Retry-After", httpDate(date.Add(r.after)))
	return res, nil
}
