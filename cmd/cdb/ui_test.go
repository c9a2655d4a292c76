package main

// cdb ui's handlers through httptest: every page and action, hostile
// values from the store, and the refusals of its security rules.

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

// hostileID is an instance id, and hostileOutput an output, that would run
// script or break out of an attribute if a page did not escape them.
var (
	hostileID     = `<script>alert("id")</script>'"` + strings.Repeat("x", 300)
	hostileOutput = `<script>alert('out')</script>"><img src=x onerror=alert(1)>` + strings.Repeat("y", 5000)
)

// uiFixture is a container with "busy" (running), "done" (completed with
// KV and a custom status), "broken" (failed with a typed error) and
// hostileID (completed with hostileOutput), and a UI on it.
type uiFixture struct {
	p   *cdb.CosmosProvider
	key string
}

func newUIFixture(t *testing.T) uiFixture {
	t.Helper()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	ctx := context.Background()
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client(), ShortPolling: true, GaugeInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	providertest.CreateInstance(ctx, t, p, "busy")
	custom := "shipped"
	endInstance(t, p, "done", cdb.StatusCompleted, "all good", cdb.KeyValueSet{Key: "color", Value: "blue"},
		cdb.CustomStatusUpdated{Status: &custom}, cdb.OrchestrationCompleted{Output: "all good"})
	failure := cdb.ApplicationError{Kind: cdb.AppOrchestrationFailed{}, Message: "card declined", Retryable: false}
	endInstance(t, p, "broken", cdb.StatusFailed, failure.DisplayMessage(), cdb.OrchestrationFailed{Details: failure})
	endInstance(t, p, hostileID, cdb.StatusCompleted, hostileOutput, cdb.OrchestrationCompleted{Output: hostileOutput})
	return uiFixture{p: p, key: acct.Key()}
}

// endInstance creates instance and ends it in one turn with events.
func endInstance(t *testing.T, p *cdb.CosmosProvider, id string, status cdb.InstanceStatus, output string, events ...cdb.EventKind) {
	t.Helper()
	ctx := context.Background()
	providertest.CreateInstance(ctx, t, p, id)
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: id, Name: "go", Data: "{}"}, 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Equal(t, id, item.Instance)
	history := make([]cdb.Event, len(events))
	for i, k := range events {
		history[i] = cdb.Event{EventID: uint64(i + 2), InstanceID: id, ExecutionID: 1, Kind: k, TimestampMs: uint64(time.Now().UnixMilli())}
	}
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, history, nil, nil, cdb.ExecutionMetadata{Status: &status, Output: &output}, nil))
}

// handler is the UI with options o (loopback when o.addr is empty).
func (fx uiFixture) handler(t *testing.T, o uiOptions) http.Handler {
	t.Helper()
	if o.addr == "" {
		o.addr = "127.0.0.1:8080"
	}
	s, err := newUIServer(fx.p, fx.p.Client().Endpoint(), o, io.Discard)
	require.NoError(t, err)
	return s.routes()
}

// uiRequest is a request as a browser on loopback sends it.
func uiRequest(method, target string, form url.Values) *http.Request {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	r := httptest.NewRequest(method, target, body)
	r.Host = "127.0.0.1:8080"
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	return r
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// get serves a GET of target and wants status.
func get(t *testing.T, h http.Handler, target string, status int) string {
	t.Helper()
	w := serve(h, uiRequest(http.MethodGet, target, nil))
	require.Equal(t, status, w.Code, w.Body.String())
	return w.Body.String()
}

// csrfOf is the CSRF token a confirmation page carries.
func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`).FindStringSubmatch(page)
	require.NotNil(t, m, "the confirmation page carries a CSRF token")
	return m[1]
}

// confirmAndPost opens action's confirmation of id and posts its form
// with fields.
func confirmAndPost(t *testing.T, h http.Handler, action, id string, fields url.Values) *httptest.ResponseRecorder {
	t.Helper()
	page := get(t, h, "/confirm?action="+action+"&id="+url.QueryEscape(id), http.StatusOK)
	form := url.Values{"csrf": {csrfOf(t, page)}, "id": {id}}
	for k, v := range fields {
		form[k] = v
	}
	return serve(h, uiRequest(http.MethodPost, "/act/"+action, form))
}

func TestUIListShowsCountsAndPagesWithTheStoresToken(t *testing.T) {
	fx := newUIFixture(t)
	h := fx.handler(t, uiOptions{})

	page := get(t, h, "/", http.StatusOK)
	assert.Contains(t, page, "total <b>4</b>")
	assert.Contains(t, page, "running <b>1</b>")
	assert.Contains(t, page, "completed <b>2</b>")
	assert.Contains(t, page, "failed <b>1</b>")
	for _, id := range []string{"busy", "done", "broken"} {
		assert.Contains(t, page, `<a href="/instance?id=`+id+`">`+id+`</a>`)
	}

	seen := map[string]bool{}
	target := "/?limit=1"
	for pages := 0; target != ""; pages++ {
		require.Less(t, pages, 10, "the pages end")
		page = get(t, h, target, http.StatusOK)
		for _, m := range regexp.MustCompile(`<a href="/instance\?id=([^"]*)">`).FindAllStringSubmatch(page, -1) {
			id, err := url.QueryUnescape(m[1])
			require.NoError(t, err)
			assert.False(t, seen[id], "%q on one page only", id)
			seen[id] = true
		}
		target = ""
		if m := regexp.MustCompile(`<a href="(/\?[^"]*)">next page`).FindStringSubmatch(page); m != nil {
			target = strings.ReplaceAll(m[1], "&amp;", "&")
			assert.Contains(t, target, "limit=1", "the next page keeps the filters")
		}
	}
	assert.Len(t, seen, 4, "the pages hold every instance once")
}

func TestUIListFiltersByStatusNameAgeAndIDPrefix(t *testing.T) {
	fx := newUIFixture(t)
	h := fx.handler(t, uiOptions{})

	page := get(t, h, "/?status=failed", http.StatusOK)
	assert.Contains(t, page, `id=broken"`)
	assert.NotContains(t, page, `id=done"`)
	assert.Contains(t, page, `<option value="Failed"`, "the form keeps the statuses")

	page = get(t, h, "/?id=bu", http.StatusOK)
	assert.Contains(t, page, `id=busy"`)
	assert.NotContains(t, page, `id=broken"`)

	page = get(t, h, "/?name=NoSuch*", http.StatusOK)
	assert.Contains(t, page, "(no instances on this page)")
	page = get(t, h, "/?older=1h", http.StatusOK)
	assert.Contains(t, page, "(no instances on this page)")

	page = get(t, h, "/?status=Sleeping", http.StatusBadRequest)
	assert.Contains(t, page, `status: &#34;Sleeping&#34; is not one of`, "a bad filter is cdb instances' usage error")
}

func TestUIInstancePageShowsInfoKVTimelineAndHistory(t *testing.T) {
	fx := newUIFixture(t)
	h := fx.handler(t, uiOptions{})

	page := get(t, h, "/instance?id=done", http.StatusOK)
	assert.Contains(t, page, `<dd class="status Completed">Completed</dd>`)
	assert.Contains(t, page, `<pre class="value output">all good</pre>`)
	assert.Contains(t, page, `<dt>custom status</dt><dd><pre class="value">shipped</pre>`)
	assert.Contains(t, page, `<dt>color</dt><dd><pre class="value">blue</pre>`)
	assert.Contains(t, page, `<svg class="timeline"`)
	assert.Contains(t, page, `data-kind="end"`)
	assert.Contains(t, page, `&#34;type&#34;: &#34;OrchestrationCompleted&#34;`, "the raw history as JSON")
	assert.Contains(t, page, `/confirm?action=delete&amp;id=done`)
	assert.NotContains(t, page, `action=raise`, "a completed instance takes no event")

	page = get(t, h, "/instance?id=broken", http.StatusOK)
	assert.Contains(t, page, "<dt>error</dt>")
	assert.Contains(t, page, "Application (application), non-retryable")

	page = get(t, h, "/instance?id=busy", http.StatusOK)
	assert.Contains(t, page, `/confirm?action=raise&amp;id=busy`)
	assert.Contains(t, page, `/confirm?action=cancel&amp;id=busy`)

	page = get(t, h, "/instance?id=nobody", http.StatusNotFound)
	assert.Contains(t, page, `instance: instance &#34;nobody&#34; not found`)

	w := serve(h, uiRequest(http.MethodGet, "/instance/history.json?id=done", nil))
	require.Equal(t, http.StatusOK, w.Code)
	var history []map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &history))
	assert.Equal(t, "OrchestrationCompleted", history[len(history)-1]["type"])
}

func TestUIEscapesHostileIDsAndOutputs(t *testing.T) {
	fx := newUIFixture(t)
	h := fx.handler(t, uiOptions{})
	for _, target := range []string{"/", "/instance?id=" + url.QueryEscape(hostileID), "/confirm?action=delete&id=" + url.QueryEscape(hostileID)} {
		page := get(t, h, target, http.StatusOK)
		assert.False(t, strings.Contains(page, "<script>"), "%.80s: no script element", target)
		assert.False(t, strings.Contains(page, "<img"), "%.80s: no element from the output", target)
	}
	page := get(t, h, "/instance?id="+url.QueryEscape(hostileID), http.StatusOK)
	assert.Contains(t, page, "&lt;script&gt;alert(&#34;id&#34;)&lt;/script&gt;&#39;&#34;"+strings.Repeat("x", 300), "the id as text, whole")
	assert.Contains(t, page, "&lt;script&gt;alert(&#39;out&#39;)&lt;/script&gt;&#34;&gt;&lt;img src=x onerror=alert(1)&gt;"+strings.Repeat("y", 5000))

	w := confirmAndPost(t, h, "delete", hostileID, nil)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.False(t, strings.Contains(w.Body.String(), "<script>"), "the result page escapes the id")
	assert.Contains(t, w.Body.String(), "deleted 1 instance(s)")
}

func TestUIRefusesWithoutTheRightToken(t *testing.T) {
	fx := newUIFixture(t)
	h := fx.handler(t, uiOptions{addr: "0.0.0.0:8443", token: "s3cret-token", behindTLSProxy: true})
	remote := func(target string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		r.Host = "ui.example.com"
		return r
	}

	assert.Equal(t, http.StatusUnauthorized, serve(h, remote("/")).Code, "no token")
	wrong := remote("/")
	wrong.AddCookie(&http.Cookie{Name: uiTokenCookie, Value: "guess"})
	assert.Equal(t, http.StatusUnauthorized, serve(h, wrong).Code, "a wrong token")
	assert.Equal(t, http.StatusUnauthorized, serve(h, remote("/login?token=guess")).Code)
	assert.Equal(t, http.StatusUnauthorized, serve(h, remote("/live.json")).Code)
	assert.Equal(t, http.StatusUnauthorized, serve(h, remote("/static/ui.css")).Code)

	login := serve(h, remote("/login?token=s3cret-token"))
	require.Equal(t, http.StatusSeeOther, login.Code)
	assert.Equal(t, "/", login.Header().Get("Location"), "the token leaves the address bar")
	cookie := login.Result().Cookies()[0]
	assert.True(t, cookie.HttpOnly)
	assert.True(t, cookie.Secure, "behind a TLS proxy the browser speaks HTTPS")
	assert.Equal(t, http.SameSiteStrictMode, cookie.SameSite)
	withCookie := remote("/")
	withCookie.AddCookie(cookie)
	assert.Equal(t, http.StatusOK, serve(h, withCookie).Code)

	bearer := remote("/live.json")
	bearer.Header.Set("Authorization", "Bearer s3cret-token")
	assert.Equal(t, http.StatusOK, serve(h, bearer).Code)
}

func TestUIActionsRefuseAGetAMissingOrWrongCSRFTokenAndAnotherOrigin(t *testing.T) {
	fx := newUIFixture(t)
	h := fx.handler(t, uiOptions{})
	page := get(t, h, "/confirm?action=cancel&id=busy", http.StatusOK)
	csrf := csrfOf(t, page)

	w := serve(h, uiRequest(http.MethodGet, "/act/cancel?id=busy&csrf="+csrf, nil))
	assert.Equal(t, http.StatusMethodNotAllowed, w.Code, "a GET never acts")
	w = serve(h, uiRequest(http.MethodPost, "/act/cancel", url.Values{"id": {"busy"}}))
	assert.Equal(t, http.StatusForbidden, w.Code, "no CSRF token")
	w = serve(h, uiRequest(http.MethodPost, "/act/cancel", url.Values{"id": {"busy"}, "csrf": {strings.Repeat("0", 64)}}))
	assert.Equal(t, http.StatusForbidden, w.Code, "a wrong CSRF token")
	foreign := uiRequest(http.MethodPost, "/act/cancel", url.Values{"id": {"busy"}, "csrf": {csrf}})
	foreign.Header.Set("Origin", "https://evil.example")
	assert.Equal(t, http.StatusForbidden, serve(h, foreign).Code, "another site's form")

	info, err := fx.p.GetInstanceInfo(context.Background(), "busy")
	require.NoError(t, err)
	assert.Equal(t, cdb.StatusRunning, info.Status)
	assertNothingQueued(t, fx.p)
}

// assertNothingQueued says no refused action left a message.
func assertNothingQueued(t *testing.T, p *cdb.CosmosProvider) {
	t.Helper()
	item, _, _, err := p.FetchOrchestrationItem(context.Background(), time.Minute, 0, nil)
	require.NoError(t, err)
	assert.Nil(t, item, "nothing was enqueued")
}

func TestUIReadOnlyServesNoAction(t *testing.T) {
	fx := newUIFixture(t)
	h := fx.handler(t, uiOptions{readOnly: true})
	page := get(t, h, "/instance?id=busy", http.StatusOK)
	assert.NotContains(t, page, "/confirm")
	assert.Contains(t, page, "read-only")
	get(t, h, "/confirm?action=cancel&id=busy", http.StatusNotFound)
	w := serve(h, uiRequest(http.MethodPost, "/act/cancel", url.Values{"id": {"busy"}}))
	assert.Equal(t, http.StatusNotFound, w.Code)
	assertNothingQueued(t, fx.p)
}

func TestUIConfirmationNamesTheInstance(t *testing.T) {
	fx := newUIFixture(t)
	h := fx.handler(t, uiOptions{})
	for _, action := range []string{"raise", "cancel", "delete"} {
		page := get(t, h, "/confirm?action="+action+"&id=busy", http.StatusOK)
		assert.Contains(t, page, `instance <code class="id">busy</code>?`, action)
		assert.Contains(t, page, `<form class="confirm" method="post" action="/act/`+action+`">`)
		assert.Contains(t, page, `<button type="submit" class="danger">`+action+` busy</button>`)
	}
	page := get(t, h, "/confirm?action=start", http.StatusOK)
	assert.Regexp(t, `start a new instance <code class="id">[0-9a-f-]{36}</code>\?`, page)
	get(t, h, "/confirm?action=explode&id=busy", http.StatusBadRequest)
}

func TestUIActionsDoWhatTheCLIDoes(t *testing.T) {
	fx := newUIFixture(t)
	h := fx.handler(t, uiOptions{})
	ctx := context.Background()
	next := func() (string, []cdb.WorkItem) {
		item, token, _, err := fx.p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.NotNil(t, item)
		require.NoError(t, fx.p.AckOrchestrationItem(ctx, token, item.ExecutionID, nil, nil, nil, cdb.ExecutionMetadata{}, nil))
		return item.Instance, item.Messages
	}

	w := confirmAndPost(t, h, "raise", "busy", url.Values{"event": {"approval"}, "data": {`{"by":"ann"}`}})
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Contains(t, w.Body.String(), `raised event &#34;approval&#34; on instance busy (Running)`)
	instance, messages := next()
	assert.Equal(t, "busy", instance)
	assert.Equal(t, []cdb.WorkItem{cdb.ExternalRaisedMessage{Instance: "busy", Name: "approval", Data: `{"by":"ann"}`}}, messages)

	w = confirmAndPost(t, h, "raise", "busy", url.Values{"event": {"approval"}, "data": {`{by:ann}`}})
	assert.Equal(t, http.StatusBadRequest, w.Code, "data that is not JSON, as cdb raise refuses it")
	w = confirmAndPost(t, h, "raise", "done", url.Values{"event": {"approval"}})
	assert.Equal(t, http.StatusConflict, w.Code, "the instance's state refused it, not the store")
	assert.Contains(t, w.Body.String(), `instance &#34;done&#34; has finished (Completed): nothing raised`)

	w = confirmAndPost(t, h, "cancel", "busy", url.Values{"reason": {"wrong order"}})
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	_, messages = next()
	require.Len(t, messages, 1)
	assert.Equal(t, "wrong order", messages[0].(cdb.CancelInstanceMessage).Reason)

	w = confirmAndPost(t, h, "delete", "busy", nil)
	assert.Equal(t, http.StatusConflict, w.Code, "the instance's state refused it, not the store")
	assert.Contains(t, w.Body.String(), "running", "a running instance is deleted only with force, as cdb delete says")
	w = confirmAndPost(t, h, "delete", "busy", url.Values{"force": {"on"}})
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	_, err := fx.p.GetInstanceInfo(ctx, "busy")
	assert.ErrorIs(t, err, cdb.ErrInstanceNotFound)

	w = confirmAndPost(t, h, "start", "order-9", url.Values{"name": {"ProcessOrder"}, "input": {`{"total":3}`}})
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	instance, messages = next()
	assert.Equal(t, "order-9", instance)
	assert.Equal(t, `{"total":3}`, messages[0].(cdb.StartOrchestrationMessage).Input)
	w = confirmAndPost(t, h, "start", "done", url.Values{"name": {"ProcessOrder"}})
	assert.Equal(t, http.StatusConflict, w.Code, "a taken id, cdb start's exit code 3")
	assert.Contains(t, w.Body.String(), `instance &#34;done&#34; already exists (Completed)`)
}

func TestUILiveJSONSamplesWhatTopShows(t *testing.T) {
	fx := newUIFixture(t)
	h := fx.handler(t, uiOptions{})
	page := get(t, h, "/live", http.StatusOK)
	assert.Contains(t, page, `<script src="/static/live.js"></script>`)
	assert.Contains(t, get(t, h, "/static/live.js", http.StatusOK), `fetch("/live.json"`)

	var body struct{ Samples []topSample }
	require.NoError(t, json.Unmarshal([]byte(get(t, h, "/live.json", http.StatusOK)), &body))
	require.Len(t, body.Samples, 1)
	s := body.Samples[0]
	assert.Equal(t, 1, s.Sample)
	assert.Equal(t, "duroxide", s.Container)
	assert.Positive(t, s.View.Requests, "the UI's own cost")
	require.NoError(t, json.Unmarshal([]byte(get(t, h, "/live.json", http.StatusOK)), &body))
	assert.Len(t, body.Samples, 1, "a page asking again within the interval costs nothing")
}

func TestUIEveryResponseForbidsInlineScriptAndOtherOrigins(t *testing.T) {
	fx := newUIFixture(t)
	h := fx.handler(t, uiOptions{})
	for _, target := range []string{"/", "/instance?id=done", "/instance?id=nobody", "/live", "/live.json", "/static/ui.css", "/confirm?action=start", "/nowhere"} {
		w := serve(h, uiRequest(http.MethodGet, target, nil))
		csp := w.Header().Get("Content-Security-Policy")
		assert.Contains(t, csp, "default-src 'none'", target)
		assert.Contains(t, csp, "script-src 'self';", target)
		assert.NotContains(t, csp, "unsafe-inline", target)
		assert.Equal(t, "nosniff", w.Header().Get("X-Content-Type-Options"), target)
		// same-origin: no address leaves for another site, and a browser
		// still names this one in the Origin of a confirmation's POST
		// (under no-referrer Chromium sends "Origin: null", which
		// allowsAction refuses: internal/uibrowser found it).
		assert.Equal(t, "same-origin", w.Header().Get("Referrer-Policy"), target)
		assert.NotRegexp(t, `<script>|<script [^s]|\son[a-z]+=`, w.Body.String(), "%s: no inline script or handler", target)
	}
}

func TestUIPagesNeverShowTheKey(t *testing.T) {
	fx := newUIFixture(t)
	h := fx.handler(t, uiOptions{})
	for _, target := range []string{"/", "/instance?id=done", "/instance?id=nobody", "/live", "/live.json", "/confirm?action=start"} {
		w := serve(h, uiRequest(http.MethodGet, target, nil))
		assert.NotContains(t, w.Body.String(), fx.key, target)
	}
}

func TestUIOnLoopbackRefusesAnotherHost(t *testing.T) {
	fx := newUIFixture(t)
	h := fx.handler(t, uiOptions{})
	r := uiRequest(http.MethodGet, "/", nil)
	r.Host = "rebound.example:8080"
	assert.Equal(t, http.StatusMisdirectedRequest, serve(h, r).Code, "a page whose DNS name was rebound to 127.0.0.1 gets nothing")
	r.Host = "localhost:8080"
	assert.Equal(t, http.StatusOK, serve(h, r).Code)
}

func TestUIRefusesAnUnsafeBinding(t *testing.T) {
	for _, tc := range []struct {
		o         uiOptions
		err       string
		makeToken bool
	}{
		{o: uiOptions{addr: "127.0.0.1:8080"}},
		{o: uiOptions{addr: "[::1]:8080"}},
		{o: uiOptions{addr: "0.0.0.0:8080"}, err: "-addr 0.0.0.0:8080 is reachable from other machines: pass -tls-cert and -tls-key, or -behind-tls-proxy when a proxy in front terminates TLS"},
		{o: uiOptions{addr: ":8080", token: "t"}, err: "-addr :8080 is reachable from other machines"},
		{o: uiOptions{addr: "0.0.0.0:8080", tlsCert: "c.pem"}, err: "-tls-cert and -tls-key go together"},
		{o: uiOptions{addr: "0.0.0.0:8080", behindTLSProxy: true}, makeToken: true},
		{o: uiOptions{addr: "10.0.0.5:8443", tlsCert: "c.pem", tlsKey: "k.pem", token: "chosen"}},
		{o: uiOptions{addr: "nonsense"}, err: "-addr \"nonsense\""},
	} {
		o := tc.o
		printToken, err := o.check()
		if tc.err != "" {
			var usage usageError
			require.ErrorAs(t, err, &usage, tc.o.addr)
			assert.Contains(t, err.Error(), tc.err)
			continue
		}
		require.NoError(t, err, tc.o.addr)
		assert.Equal(t, tc.makeToken, printToken, tc.o.addr)
		if tc.makeToken {
			assert.Regexp(t, `^[0-9a-f]{64}$`, o.token)
		}
	}
}

func TestUIHelpSaysHowToBindSafely(t *testing.T) {
	code, out, _ := runCLI("help", "ui")
	require.Equal(t, 0, code)
	for _, want := range []string{"127.0.0.1", envUIToken, "-tls-cert", "-behind-tls-proxy", "-read-only", "CSRF"} {
		assert.Contains(t, out, want)
	}
}

// The timeline draws each attempt of a retried activity as a bar of its
// own, ended by its outcome, and the timer between them.
func TestUITimelineDrawsABarPerAttempt(t *testing.T) {
	failure := cdb.ApplicationError{Kind: cdb.AppActivityFailed{}, Message: "card declined"}
	history := []cdb.Event{
		timelineEvent(1, 0, 1000, cdb.OrchestrationStarted{Name: "Pay", Version: "1.0.0"}),
		timelineEvent(2, 0, 1000, cdb.ActivityScheduled{Name: "Charge", Input: "x"}),
		timelineEvent(3, 2, 1010, cdb.ActivityFailed{Details: failure}),
		timelineEvent(4, 0, 1010, cdb.TimerCreated{FireAtMs: 1210}),
		timelineEvent(5, 4, 1210, cdb.TimerFired{FireAtMs: 1210}),
		timelineEvent(6, 0, 1210, cdb.ActivityScheduled{Name: "Charge", Input: "x"}),
		timelineEvent(7, 6, 1250, cdb.ActivityCompleted{Result: "receipt"}),
		timelineEvent(8, 0, 1250, cdb.ExternalSubscribed{Name: "approval"}),
		timelineEvent(9, 0, 2000, cdb.ExternalEvent{Name: "approval", Data: "yes"}),
	}
	tl := buildTimeline("order", history)
	type bar struct {
		id             uint64
		kind, label    string
		outcome        string
		startMs, endMs uint64
	}
	x := func(ms uint64) float64 { return timelineLabelWidth + float64(ms-1000)/1000*timelinePlotWidth }
	want := []bar{
		{2, "activity", "Charge (attempt 1)", "failed", 1000, 1010},
		{4, "timer", "timer (wait 200ms before attempt 2)", "ok", 1010, 1210},
		{6, "activity", "Charge (attempt 2)", "ok", 1210, 1250},
		{8, "wait", "wait for approval", "ok", 1250, 2000},
	}
	require.Len(t, tl.Rows, len(want)+1, "and a point for the event")
	for i, b := range want {
		r := tl.Rows[i]
		assert.Equal(t, []any{b.id, b.kind, b.label, b.outcome}, []any{r.EventID, r.Kind, r.Label, r.Outcome})
		assert.InDelta(t, x(b.startMs), r.X, 0.01, "#%d starts when scheduled", b.id)
		assert.InDelta(t, max(x(b.endMs)-x(b.startMs), timelineMinBar), r.W, 0.01, "#%d ends with its outcome", b.id)
	}
	assert.True(t, tl.Rows[4].Point)
	assert.Equal(t, "event approval", tl.Rows[4].Label)
}

// The live samples' latencies come from the histories of the instances
// that ended since the previous sample: an activity from its schedule to
// its result, a timer turn from the timer's due time to its turn. The
// instances of the fixture ended before the first sample and are not
// measured.
func TestUILiveJSONMeasuresLatenciesFromTheHistoriesOfEndedInstances(t *testing.T) {
	fx := newUIFixture(t)
	s, err := newUIServer(fx.p, fx.p.Client().Endpoint(), uiOptions{addr: "127.0.0.1:8080"}, io.Discard)
	require.NoError(t, err)
	h := s.routes()
	// The store keeps milliseconds and a sample counts what ended in its
	// previous sample's millisecond, so the fixture's must be over.
	time.Sleep(5 * time.Millisecond)
	type sample struct {
		Ended              int            `json:"ended_read"`
		TurnLatency        *uiLatencyJSON `json:"turn_latency"`
		ActivityLatency    *uiLatencyJSON `json:"activity_latency"`
		RUPerOrchestration *float64       `json:"ru_per_orchestration"`
	}
	var body struct{ Samples []sample }
	require.NoError(t, json.Unmarshal([]byte(get(t, h, "/live.json", http.StatusOK)), &body))
	assert.Nil(t, body.Samples[0].ActivityLatency, "the first sample has no window")

	ctx := context.Background()
	providertest.CreateInstance(ctx, t, fx.p, "timed")
	require.NoError(t, fx.p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "timed", Name: "go", Data: "{}"}, 0))
	item, token, _, err := fx.p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	t0 := uint64(time.Now().Add(-time.Minute).UnixMilli())
	two, four := uint64(2), uint64(4)
	event := func(id uint64, source *uint64, at uint64, k cdb.EventKind) cdb.Event {
		return cdb.Event{EventID: id, SourceEventID: source, InstanceID: "timed", ExecutionID: 1, TimestampMs: at, Kind: k}
	}
	history := []cdb.Event{
		event(2, nil, t0, cdb.ActivityScheduled{Name: "A"}),
		event(3, &two, t0+300, cdb.ActivityCompleted{Result: "a"}),
		event(4, nil, t0+300, cdb.ActivityScheduled{Name: "B"}),
		event(5, &four, t0+1300, cdb.ActivityFailed{Details: cdb.ApplicationError{Kind: cdb.AppActivityFailed{}, Message: "no"}}),
		event(6, nil, t0+1300, cdb.TimerCreated{FireAtMs: t0 + 5000}),
		event(7, nil, t0+5040, cdb.TimerFired{FireAtMs: t0 + 5000}),
		event(8, nil, t0+5040, cdb.OrchestrationCompleted{Output: "done"}),
	}
	status, output := cdb.StatusCompleted, "done"
	require.NoError(t, fx.p.AckOrchestrationItem(ctx, token, item.ExecutionID, history, nil, nil, cdb.ExecutionMetadata{Status: &status, Output: &output}, nil))

	s.live.taken = time.Time{} // the next request samples at once
	require.NoError(t, json.Unmarshal([]byte(get(t, h, "/live.json", http.StatusOK)), &body))
	require.Len(t, body.Samples, 2)
	second := body.Samples[1]
	assert.Equal(t, 1, second.Ended, "only the instance that ended since the first sample")
	assert.Equal(t, &uiLatencyJSON{Count: 2, P50Ms: 300, P99Ms: 1000}, second.ActivityLatency)
	assert.Equal(t, &uiLatencyJSON{Count: 1, P50Ms: 40, P99Ms: 40}, second.TurnLatency)
	assert.Nil(t, second.RUPerOrchestration, "no process publishes its RU")

	s.live.taken = time.Time{}
	require.NoError(t, json.Unmarshal([]byte(get(t, h, "/live.json", http.StatusOK)), &body))
	third := body.Samples[2]
	assert.Zero(t, third.Ended, "an instance is measured once")
	assert.Nil(t, third.ActivityLatency)
	assert.Nil(t, third.TurnLatency)
}

func TestUIRUPerOrchestrationIsTheApplicationsRUOverItsCompletionsInTheLast30Seconds(t *testing.T) {
	sample := func(ruPerSecond *float64, completed uint64, seconds float64) topSample {
		var s topSample
		s.Processes.RUPerSecond, s.Completed, s.Seconds = ruPerSecond, &completed, &seconds
		return s
	}
	rate := func(v float64) *float64 { return &v }
	assert.Nil(t, ruPerOrchestration([]topSample{{}}), "the first sample has no rates")
	assert.Nil(t, ruPerOrchestration([]topSample{sample(rate(100), 0, 2)}), "none ended")
	assert.Nil(t, ruPerOrchestration([]topSample{sample(nil, 4, 2)}), "no process publishes its RU")
	// 100 RU/s for 2 s and 50 RU/s for 2 s over 5 orchestrations.
	assert.Equal(t, 60.0, *ruPerOrchestration([]topSample{sample(rate(100), 1, 2), sample(nil, 7, 2), sample(rate(50), 4, 2)}))
	window := []topSample{sample(rate(1000), 1, 2)}
	for range uiRUWindow {
		window = append(window, sample(rate(10), 1, 2))
	}
	assert.Equal(t, 20.0, *ruPerOrchestration(window), "the samples before the last 30 seconds are left out")
}

// parkBusy parks the fixture's "busy" for an hour with a message in its
// turn, as a runtime whose code diverged does.
func parkBusy(t *testing.T, p *cdb.CosmosProvider) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "busy", Name: "approve", Data: "{}"}, 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Equal(t, "busy", item.Instance)
	require.NoError(t, p.ParkOrchestrationItem(ctx, token, time.Hour, "schedule mismatch at event 2"))
}

func TestUIResumesAParkedInstanceBehindAConfirmation(t *testing.T) {
	fx := newUIFixture(t)
	parkBusy(t, fx.p)
	h := fx.handler(t, uiOptions{})

	assert.Contains(t, get(t, h, "/instance?id=busy", http.StatusOK), `<a href="/confirm?action=resume&amp;id=busy">resume now…</a>`)
	assert.NotContains(t, get(t, h, "/instance?id=done", http.StatusOK), "action=resume", "only a parked instance offers it")
	page := get(t, h, "/confirm?action=resume&id=busy", http.StatusOK)
	assert.Contains(t, page, `<h1>resume parked instance <code class="id">busy</code> now?</h1>`)
	assert.Contains(t, page, `<form class="confirm" method="post" action="/act/resume">`)
	assert.Contains(t, page, `<button type="submit" class="danger">resume busy</button>`)

	w := serve(h, uiRequest(http.MethodGet, "/act/resume?id=busy&csrf="+csrfOf(t, page), nil))
	assert.Equal(t, http.StatusMethodNotAllowed, w.Code, "a GET never acts")
	w = serve(h, uiRequest(http.MethodPost, "/act/resume", url.Values{"id": {"busy"}}))
	assert.Equal(t, http.StatusForbidden, w.Code, "no CSRF token")
	assertNothingQueued(t, fx.p) // still parked: its turn is not due

	w = confirmAndPost(t, h, "resume", "busy", nil)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Regexp(t, `<p class="done">resumed parked instance busy: 1 message\(s\) due now instead of at \S+ \(parked 1 time\(s\): schedule mismatch at event 2\)</p>`, w.Body.String())
	item, _, _, err := fx.p.FetchOrchestrationItem(context.Background(), time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "the parked turn is due now, not in an hour")
	assert.Equal(t, []cdb.WorkItem{cdb.ExternalRaisedMessage{Instance: "busy", Name: "approve", Data: "{}"}}, item.Messages)

	w = confirmAndPost(t, h, "resume", "done", nil)
	assert.Equal(t, http.StatusConflict, w.Code, "the instance's state refused it")
	assert.Contains(t, w.Body.String(), `instance &#34;done&#34; is not parked: nothing resumed`)
	w = confirmAndPost(t, h, "resume", "busy", nil)
	assert.Equal(t, http.StatusConflict, w.Code)
	assert.Contains(t, w.Body.String(), `instance &#34;busy&#34; is locked by a runtime, which is running its turn now: nothing resumed`)
}

func TestUIReadOnlyOffersNoResume(t *testing.T) {
	fx := newUIFixture(t)
	parkBusy(t, fx.p)
	h := fx.handler(t, uiOptions{readOnly: true})
	page := get(t, h, "/instance?id=busy", http.StatusOK)
	assert.Contains(t, page, `<dd class="parked">`, "the park is shown")
	assert.NotContains(t, page, "resume")
	get(t, h, "/confirm?action=resume&id=busy", http.StatusNotFound)
	w := serve(h, uiRequest(http.MethodPost, "/act/resume", url.Values{"id": {"busy"}}))
	assert.Equal(t, http.StatusNotFound, w.Code)
	assertNothingQueued(t, fx.p)
}
