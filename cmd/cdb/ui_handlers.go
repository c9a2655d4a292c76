package main

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/uuid"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/durable"
)

//go:embed ui_assets
var uiAssets embed.FS

// uiServer serves the UI's pages and actions on one provider.
type uiServer struct {
	p        *cdb.CosmosProvider
	endpoint string
	readOnly bool
	guard    uiGuard
	pages    *template.Template
	live     *uiLive
	logf     func(format string, args ...any)
}

func newUIServer(p *cdb.CosmosProvider, endpoint string, o uiOptions, log io.Writer) (*uiServer, error) {
	csrf, err := newUIToken()
	if err != nil {
		return nil, err
	}
	pages, err := template.New("").Funcs(template.FuncMap{"time": formatTime}).ParseFS(uiAssets, "ui_assets/*.html")
	if err != nil {
		return nil, fmt.Errorf("parse the UI's pages: %w", err)
	}
	host, _, _ := net.SplitHostPort(o.addr) // check has refused one that does not split
	guard := uiGuard{token: o.token, csrf: csrf, loopback: isLoopbackHost(host), secure: o.tlsCert != "" || o.behindTLSProxy}
	return &uiServer{p: p, endpoint: endpoint, readOnly: o.readOnly, guard: guard, pages: pages, live: newUILive(p, endpoint),
		logf: func(format string, args ...any) { fmt.Fprintf(log, format+"\n", args...) }}, nil
}

// routes are the UI's pages behind its guard; with -read-only the actions
// are not served at all.
func (s *uiServer) routes() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(uiAssets, "ui_assets/static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", s.listPage)
	mux.HandleFunc("GET /instance", s.instancePage)
	mux.HandleFunc("GET /instance/history.json", s.historyJSON)
	mux.HandleFunc("GET /live", s.livePage)
	mux.HandleFunc("GET /live.json", s.liveJSON)
	if !s.readOnly {
		mux.HandleFunc("GET /confirm", s.confirmPage)
		mux.HandleFunc("/act/{action}", s.act)
	}
	return s.guard.wrap(mux)
}

// uiPage is what every page's frame needs.
type uiPage struct {
	Title    string
	ReadOnly bool
	CSRF     string
}

func (s *uiServer) page(title string) uiPage {
	return uiPage{Title: title, ReadOnly: s.readOnly, CSRF: s.guard.csrf}
}

// render writes a page, whole or not at all: a page that cannot be made
// is a 500, and its mistake goes to the server's log.
func (s *uiServer) render(w http.ResponseWriter, status int, name string, data any) {
	var page bytes.Buffer
	if err := s.pages.ExecuteTemplate(&page, name, data); err != nil {
		s.logf("cdb ui: page %s: %v", name, err)
		http.Error(w, "cdb ui: page "+name+" could not be made (see the server's log)", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = page.WriteTo(w)
}

// uiErrorPage is a failure as a page: what failed, in the CLI's words.
type uiErrorPage struct {
	uiPage
	Message string
}

func (s *uiServer) fail(w http.ResponseWriter, what string, err error) {
	s.render(w, uiStatusOf(err), "error.html", uiErrorPage{uiPage: s.page(what), Message: what + ": " + err.Error()})
}

// uiStatusOf is the HTTP status of a failure: the CLI's exit codes, as
// HTTP says them.
func uiStatusOf(err error) int {
	var usage usageError
	var exists instanceExists
	var finished instanceFinished
	switch {
	case errors.As(err, &usage):
		return http.StatusBadRequest
	case errors.As(err, &exists), errors.As(err, &finished), errors.Is(err, cdb.ErrInstanceRunning),
		errors.Is(err, cdb.ErrNotParked), errors.Is(err, cdb.ErrInstanceLocked):
		// The instance's state refused it: a conflict, not a store that failed.
		return http.StatusConflict
	case errors.Is(err, cdb.ErrInstanceNotFound):
		return http.StatusNotFound
	}
	return http.StatusBadGateway
}

// uiListPage is the instance list.
type uiListPage struct {
	uiPage
	Filter    uiFilter
	Statuses  []string
	Metrics   cdb.SystemMetrics
	Instances []instanceJSON
	Scanned   int
	Next      string // the next page's URL, "" on the last
	Error     string
}

// uiFilter is the list's form, as the browser sent it.
type uiFilter struct {
	Name, Status, OlderThan, NewerThan, IDPrefix, Limit string
}

// query turns the form into cdb instances' query, with the same flag
// types and so the same checks.
func (f uiFilter) query() (instanceQuery, error) {
	q := instanceQuery{limit: 50}
	set := func(flag, v string, into interface{ Set(string) error }) error {
		if v == "" {
			return nil
		}
		if err := into.Set(v); err != nil {
			return usageError{msg: fmt.Sprintf("%s: %v", flag, err), cause: err}
		}
		return nil
	}
	var limit pageLimit
	err := errors.Join(set("status", f.Status, &q.statuses), set("name", f.Name, &q.name),
		set("older than", f.OlderThan, &q.olderThan), set("newer than", f.NewerThan, &q.newerThan), set("limit", f.Limit, &limit))
	if limit > 0 {
		q.limit = int(limit)
	}
	return q, err
}

func (f uiFilter) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"name": f.Name, "status": f.Status, "older": f.OlderThan, "newer": f.NewerThan, "id": f.IDPrefix, "limit": f.Limit} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

func (s *uiServer) listPage(w http.ResponseWriter, r *http.Request) {
	in := r.URL.Query()
	f := uiFilter{Name: in.Get("name"), Status: in.Get("status"), OlderThan: in.Get("older"), NewerThan: in.Get("newer"),
		IDPrefix: in.Get("id"), Limit: in.Get("limit")}
	data := uiListPage{uiPage: s.page("instances"), Filter: f, Statuses: knownStatuses(), Instances: []instanceJSON{}}
	status := http.StatusOK
	m, err := s.p.GetSystemMetrics(r.Context())
	if err != nil {
		s.fail(w, "read the counts", describe(s.endpoint, err))
		return
	}
	data.Metrics = m
	list, err := s.listInstances(r.Context(), f, in.Get("after"))
	if err != nil {
		data.Error, status = err.Error(), uiStatusOf(err)
	}
	data.Instances, data.Scanned = list.Instances, list.Scanned
	if list.Next != nil {
		next := f.values()
		next.Set("after", *list.Next)
		data.Next = "/?" + next.Encode()
	}
	s.render(w, status, "list.html", data)
}

// listInstances reads one page as cdb instances does; the id prefix is
// matched on the page read, so the page may come back short.
func (s *uiServer) listInstances(ctx context.Context, f uiFilter, after string) (instancesJSON, error) {
	q, err := f.query()
	if err != nil {
		return instancesJSON{}, err
	}
	q.after, q.now = after, s.p.ServiceTime()
	list, err := q.page(ctx, s.p)
	if err != nil {
		var usage usageError
		if errors.As(err, &usage) {
			return instancesJSON{}, err
		}
		return instancesJSON{}, describe(s.endpoint, err)
	}
	if f.IDPrefix != "" {
		kept := list.Instances[:0]
		for _, i := range list.Instances {
			if strings.HasPrefix(i.InstanceID, f.IDPrefix) {
				kept = append(kept, i)
			}
		}
		list.Instances = kept
	}
	return list, nil
}

// uiInstancePage is one instance.
type uiInstancePage struct {
	uiPage
	showJSON
	Failure     *uiFailure
	KVKeys      []string
	Children    []string
	Timeline    uiTimeline
	HistoryJSON string
	Live        bool // it takes messages: raise and cancel apply
}

// uiFailure is a failed instance's typed error.
type uiFailure struct {
	Variant, Category, Message, Details string
	Retryable                           bool
}

func (s *uiServer) instancePage(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	shown, err := readInstance(r.Context(), s.p, id)
	if err != nil {
		s.fail(w, "instance", instanceError(s.endpoint, id, err))
		return
	}
	history, _ := json.MarshalIndent(shown.History, "", "  ")
	data := uiInstancePage{uiPage: s.page(id), showJSON: shown, KVKeys: sortedKeys(shown.KV),
		Children: childrenOf(id, shown.History), Timeline: buildTimeline(id, shown.History),
		HistoryJSON: string(history), Failure: failureOf(shown.History),
		Live: !hasFinished(cdb.InstanceStatus(shown.Status))}
	s.render(w, http.StatusOK, "instance.html", data)
}

// childrenOf are the instance ids of the sub-orchestrations a history
// scheduled.
func childrenOf(instance string, history []cdb.Event) []string {
	var children []string
	for _, e := range history {
		if sub, ok := e.Kind.(cdb.SubOrchestrationScheduled); ok {
			children = append(children, cdb.BuildChildInstanceID(instance, sub.Instance))
		}
	}
	return children
}

// failureOf is the typed error of a history's OrchestrationFailed, nil
// when it has none.
func failureOf(history []cdb.Event) *uiFailure {
	for _, e := range history {
		failed, ok := e.Kind.(cdb.OrchestrationFailed)
		if !ok || failed.Details == nil {
			continue
		}
		details, _ := json.Marshal(failed.Details)
		d := failed.Details
		return &uiFailure{Variant: d.Variant(), Category: d.Category(), Message: d.DisplayMessage(), Details: string(details), Retryable: d.IsRetryable()}
	}
	return nil
}

// historyJSON is the instance's history as show -o json prints it, to
// copy or fetch.
func (s *uiServer) historyJSON(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	history, err := s.p.Read(r.Context(), id)
	if err != nil {
		http.Error(w, instanceError(s.endpoint, id, err).Error(), uiStatusOf(instanceError(s.endpoint, id, err)))
		return
	}
	if history == nil {
		history = []cdb.Event{}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(history)
}

// uiConfirmPage asks before an action, naming the instance.
type uiConfirmPage struct {
	uiPage
	Action string
	ID     string
}

func (s *uiServer) confirmPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	action, id := q.Get("action"), q.Get("id")
	switch action {
	case "start":
		if id == "" {
			id = uuid.NewString()
		}
	case "raise", "cancel", "resume", "delete":
		if id == "" {
			s.fail(w, action, usageError{msg: "which instance? (id is missing)"})
			return
		}
	default:
		s.fail(w, "confirm", usageError{msg: fmt.Sprintf("%q is not an action: start, raise, cancel, resume or delete", action)})
		return
	}
	s.render(w, http.StatusOK, "confirm.html", uiConfirmPage{uiPage: s.page(action + " " + id), Action: action, ID: id})
}

// uiDonePage says what an action did.
type uiDonePage struct {
	uiPage
	ID      string
	Message string
}

// act runs a confirmed action: the same function as the CLI's command.
func (s *uiServer) act(w http.ResponseWriter, r *http.Request) {
	if !s.guard.allowsAction(w, r) {
		return
	}
	action, id := r.PathValue("action"), r.PostFormValue("id")
	if id == "" {
		s.fail(w, action, usageError{msg: "which instance? (id is missing)"})
		return
	}
	msg, err := s.runAction(r.Context(), action, id, r)
	if err != nil {
		s.fail(w, action+" "+id, err)
		return
	}
	s.render(w, http.StatusOK, "done.html", uiDonePage{uiPage: s.page(action + " " + id), ID: id, Message: msg})
}

// runAction does action on instance id with the form's fields and says
// what it did, in the CLI's words.
func (s *uiServer) runAction(ctx context.Context, action, id string, r *http.Request) (string, error) {
	client := durable.NewClient(s.p)
	raw := r.PostFormValue("raw") == "on"
	switch action {
	case "raise":
		event, data, queue := r.PostFormValue("event"), r.PostFormValue("data"), r.PostFormValue("queue") == "on"
		if event == "" {
			return "", usageError{msg: "name the event"}
		}
		if err := checkPayload("the data", data, raw); err != nil {
			return "", err
		}
		info, err := raiseOn(ctx, client, s.endpoint, id, event, data, queue)
		if err != nil {
			return "", err
		}
		verb := "raised event"
		if queue {
			verb = "queued message"
		}
		return fmt.Sprintf("%s %q on instance %s (%s)", verb, event, id, info.Status), nil
	case "cancel":
		reason := firstOf(r.PostFormValue("reason"), "canceled with cdb ui")
		info, err := requestCancel(ctx, client, s.endpoint, id, reason)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("cancellation of instance %s requested (%s): %s", id, info.Status, reason), nil
	case "resume":
		res, err := resumeParked(ctx, s.p, s.endpoint, id)
		if err != nil {
			return "", err
		}
		return res.message(), nil
	case "delete":
		res, err := deleteInstance(ctx, s.p, s.endpoint, id, r.PostFormValue("force") == "on")
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("deleted %d instance(s), %d execution(s), %d event(s), %d queued message(s)",
			res.InstancesDeleted, res.ExecutionsDeleted, res.EventsDeleted, res.QueueMessagesDeleted), nil
	case "start":
		return s.start(ctx, client, id, r, raw)
	}
	return "", usageError{msg: fmt.Sprintf("%q is not an action: start, raise, cancel, resume or delete", action)}
}

// start enqueues a start as cdb start does, refusing a taken id.
func (s *uiServer) start(ctx context.Context, client *durable.Client, id string, r *http.Request, raw bool) (string, error) {
	name, input := r.PostFormValue("name"), r.PostFormValue("input")
	if name == "" {
		return "", usageError{msg: "name the orchestration"}
	}
	if err := checkPayload("the input", input, raw); err != nil {
		return "", err
	}
	req := startRequest{id: id, ifExists: existsFail, raw: raw}
	if v := r.PostFormValue("version"); v != "" {
		if err := req.version.Set(v); err != nil {
			return "", usageError{msg: "version: " + err.Error(), cause: err}
		}
	}
	if _, err := req.start(ctx, client, name, input, io.Discard); err != nil {
		var exists instanceExists
		if errors.As(err, &exists) {
			return "", err
		}
		return "", instanceError(s.endpoint, id, err)
	}
	return fmt.Sprintf("started %s as instance %s: its runtime takes it on its next poll", name, id), nil
}

// livePage is the page that charts /live.json.
func (s *uiServer) livePage(w http.ResponseWriter, _ *http.Request) {
	s.render(w, http.StatusOK, "live.html", s.page("live"))
}

// liveJSON is the samples the live page charts, a new one taken when the
// last is older than the live view's interval.
func (s *uiServer) liveJSON(w http.ResponseWriter, r *http.Request) {
	samples, err := s.live.samples(r.Context())
	if err != nil {
		http.Error(w, describe(s.endpoint, err).Error(), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"samples": samples})
}
