package uibrowser

import (
	"context"
	"flag"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// -update writes the timeline's screenshot to docs/ui-timeline.png, which
// the README shows; without it the screenshot goes to the test's temporary
// folder, so that a run leaves the working tree as it was.
var updateScreenshot = flag.Bool("update", false, "write the timeline's screenshot to docs/ui-timeline.png")

const (
	// waitingOrder is the order the test starts and ships: it waits on its
	// "shipped" queue until the test raises the message through the page.
	waitingOrder = "order-ui-browser"
	// hostileID would retitle the page and set a global if it ran.
	hostileID = `<script>document.title="pwned";window.pwned=1</script><img src=x onerror="window.pwned=2">`
	// pollWithin bounds each wait for the store to change.
	pollWithin = 30 * time.Second
	// stepWithin bounds each step in the browser: a page that never comes
	// fails the step.
	stepWithin = 15 * time.Second
)

// TestUIInABrowser drives cdb ui in headless Chromium through what an
// operator does: filter the list, start an order, watch it wait, ship it
// through the raise form and see it complete, read its timeline against its
// history, and start an instance whose id is markup that must stay text.
func TestUIInABrowser(t *testing.T) {
	ctx := newBrowser(t, 90*time.Second)
	base := startUI(t)

	waitForDemoBooks(t, ctx, base)
	filterByNameAndStatus(t, ctx, base)
	startThroughForm(t, ctx, base, waitingOrder, "ProcessOrder", `{"id":"order-ui-browser","customer":"ui","items":3,"total":42}`)
	openFromFilteredList(t, ctx, base, waitingOrder)
	// Shipped after its first wait timed out, so that the timeline shows a
	// timer that fired, an escalation and a second wait.
	waitForInstance(t, ctx, base, waitingOrder, func(page string) bool { return strings.Contains(page, `"name": "Escalate"`) }, "escalated")
	shipThroughRaiseForm(t, ctx)
	waitForInstance(t, ctx, base, waitingOrder, func(page string) bool { return statusIs(page, "Completed") }, "Completed")

	dom := read(t, ctx, "read the timeline", chromedp.Evaluate[timelineDOM](readTimelineJS))
	rawHistory := read(t, ctx, "read the raw history", chromedp.TextContent(chromedp.CSS("pre.json")))
	checkTimeline(t, dom, rawHistory)
	saveTimelineScreenshot(t, ctx)

	checkHostileIDStaysText(t, ctx, base)
	checkLiveCharts(t, ctx, base)
}

// checkLiveCharts opens the live page and waits for its script to draw a
// second sample: the latency charts draw p50 and p99 as two lines.
func checkLiveCharts(t *testing.T, ctx context.Context, base string) {
	t.Helper()
	do(t, ctx, "open the live page", chromedp.Navigate(base+"/live"))
	eventually(t, "the live page draws a second sample", func() (bool, string) {
		status := read(t, ctx, "the live status", chromedp.TextContent(chromedp.CSS("#live-status")))
		return strings.HasPrefix(status, "sample 2 "), status
	})
	captions := read(t, ctx, "the charts' captions", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("#charts figcaption")].map(c => c.textContent)`))
	lines := read(t, ctx, "the charts' lines", chromedp.Evaluate[[]int](
		`[...document.querySelectorAll("#charts figure")].map(f => f.querySelectorAll("polyline").length)`))
	require.Len(t, lines, len(captions))
	for i, c := range captions {
		want := 1
		if strings.Contains(c, "latency") {
			want = 2
		}
		assert.Equal(t, want, lines[i], "lines of the chart %q", c)
	}
	assert.Contains(t, strings.Join(captions, "\n"), "activity latency ms (p50 / p99): ")
	assert.Contains(t, strings.Join(captions, "\n"), "RU per orchestration (application): ")
}

// do runs the browser's actions as one step, failing the test with what
// the step was for.
func do(t *testing.T, ctx context.Context, step string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	stepCtx, cancel := context.WithTimeout(ctx, stepWithin)
	defer cancel()
	if err := chromedp.Do(stepCtx, actions...); err != nil {
		t.Fatalf("%s: %v\n%s", step, err, whereTheBrowserIs(ctx))
	}
}

// whereTheBrowserIs is the page the browser shows, for a failure's message.
func whereTheBrowserIs(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	location, _ := chromedp.Run(ctx, chromedp.Location())
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	return "the browser shows " + location + ":\n" + text
}

// read runs an action that reads a value, failing the test with what the
// value was for.
func read[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	stepCtx, cancel := context.WithTimeout(ctx, stepWithin)
	defer cancel()
	v, err := chromedp.Run(stepCtx, a)
	if err != nil {
		t.Fatalf("%s: %v\n%s", what, err, whereTheBrowserIs(ctx))
	}
	return v
}

// eventually asks done until it says yes, failing the test after
// pollWithin with the last thing it saw.
func eventually(t *testing.T, what string, done func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(pollWithin)
	for {
		ok, seen := done()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last seen: %s", what, pollWithin, seen)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// listRowsJS reads the instance list's rows as the page shows them: id,
// status, orchestration@version.
const listRowsJS = `[...document.querySelectorAll("table.instances tbody tr")].filter(tr => tr.cells.length === 6)
  .map(tr => [tr.cells[0].textContent, tr.cells[1].textContent, tr.cells[2].textContent])`

// filteredByID is the list's filter form once it has been submitted with an
// id prefix: the page that answered shows it in the field's value.
const filteredByID = `form.filter input[name="id"]:not([value=""])`

// waitForDemoBooks filters the list by the id prefix "ledger" until the
// demo's ledger has completed: the demo's orders are all settled then,
// and an order the test ships cannot close its books early.
func waitForDemoBooks(t *testing.T, ctx context.Context, base string) {
	t.Helper()
	filterByNameAndIDPrefix(t, ctx, base, "Ledger", "ledger")
	eventually(t, "the demo's ledger completes", func() (bool, string) {
		do(t, ctx, "reload the filtered list", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(filteredByID)))
		rows := read(t, ctx, "the list's rows", chromedp.Evaluate[[][]string](listRowsJS))
		return len(rows) == 1 && rows[0][0] == "ledger" && rows[0][1] == "Completed", strings.Join(flatten(rows), " | ")
	})
}

// filterByNameAndIDPrefix filters the list by orchestration name and id
// prefix on a page of a thousand, the most the provider reads at once: the
// prefix is matched on the page read, and the demo leaves more instances
// than a page of 50.
func filterByNameAndIDPrefix(t *testing.T, ctx context.Context, base, name, prefix string) {
	t.Helper()
	do(t, ctx, "filter the list by "+name+" and the id prefix "+prefix,
		chromedp.Navigate(base+"/"),
		chromedp.SetValue(chromedp.CSS(`form.filter input[name="name"]`), name),
		chromedp.SetValue(chromedp.CSS(`form.filter input[name="id"]`), prefix),
		chromedp.SetValue(chromedp.CSS(`form.filter input[name="limit"]`), "1000"),
		chromedp.Click(chromedp.CSS(`form.filter button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(filteredByID)))
}

// filterByNameAndStatus filters the list through its form by orchestration
// name and status, and checks every row it shows matches both.
func filterByNameAndStatus(t *testing.T, ctx context.Context, base string) {
	t.Helper()
	do(t, ctx, "filter the list by name and status",
		chromedp.Navigate(base+"/"),
		chromedp.SetValue(chromedp.CSS(`form.filter input[name="name"]`), "ProcessOrder"),
		chromedp.SetValue(chromedp.CSS(`form.filter select[name="status"]`), "Completed"),
		chromedp.Click(chromedp.CSS(`form.filter button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`form.filter input[name="name"][value="ProcessOrder"]`)))
	location := read(t, ctx, "the filtered list's address", chromedp.Location())
	rows := read(t, ctx, "the list's rows", chromedp.Evaluate[[][]string](listRowsJS))
	u, err := url.Parse(location)
	require.NoError(t, err)
	assert.Equal(t, "Completed", u.Query().Get("status"), "the form's status is in the address")
	assert.Equal(t, "ProcessOrder", u.Query().Get("name"), "the form's name is in the address")
	require.NotEmpty(t, rows, "the demo completed some orders")
	for _, r := range rows {
		assert.Equal(t, "Completed", r[1], "row %s's status", r[0])
		assert.True(t, strings.HasPrefix(r[2], "ProcessOrder@"), "row %s's orchestration %q", r[0], r[2])
	}
}

// startThroughForm starts an instance through the header's start link, its
// form and its confirmation, and checks the page that says it did.
func startThroughForm(t *testing.T, ctx context.Context, base, id, name, input string) {
	t.Helper()
	do(t, ctx, "start "+id,
		chromedp.Navigate(base+"/"),
		chromedp.Click(chromedp.CSS(`header nav a[href="/confirm?action=start"]`)),
		chromedp.WaitVisible(chromedp.CSS(`form.confirm`)),
		chromedp.SetValue(chromedp.CSS(`form.confirm input[name="id"]`), id),
		chromedp.SetValue(chromedp.CSS(`form.confirm input[name="name"]`), name),
		chromedp.SetValue(chromedp.CSS(`form.confirm textarea[name="input"]`), input),
		chromedp.Click(chromedp.CSS(`form.confirm button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`p.done`)))
	done := read(t, ctx, "the start's result", chromedp.Text(chromedp.CSS(`p.done`)))
	assert.Equal(t, "started "+name+" as instance "+id+": its runtime takes it on its next poll", done)
}

// openFromFilteredList finds a ProcessOrder by its id prefix in the list
// and opens it from its link.
func openFromFilteredList(t *testing.T, ctx context.Context, base, id string) {
	t.Helper()
	filterByNameAndIDPrefix(t, ctx, base, "ProcessOrder", id)
	rows := read(t, ctx, "the list's rows", chromedp.Evaluate[[][]string](listRowsJS))
	require.Len(t, rows, 1, "the id prefix finds the one instance: %s", strings.Join(flatten(rows), " | "))
	assert.Equal(t, id, rows[0][0])
	do(t, ctx, "open "+id+" from its link",
		chromedp.Click(chromedp.CSS(`table.instances tbody td a`)),
		chromedp.WaitVisible(chromedp.CSS(`h1 code.id`)))
	assert.Equal(t, id, read(t, ctx, "the instance page's heading", chromedp.TextContent(chromedp.CSS(`h1 code.id`))), "its link opens its page")
}

// waitForInstance reloads the instance's page until its text says what
// the test waits for.
func waitForInstance(t *testing.T, ctx context.Context, base, id string, done func(page string) bool, what string) {
	t.Helper()
	do(t, ctx, "open "+id, chromedp.Navigate(base+"/instance?id="+url.QueryEscape(id)))
	eventually(t, id+" is "+what, func() (bool, string) {
		do(t, ctx, "reload "+id, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("dl.info")))
		page := read(t, ctx, id+"'s page", chromedp.TextContent(chromedp.CSS("main")))
		return done(page), page
	})
}

// statusIs reports whether an instance page's text gives status: its
// information's "status" term runs into its value in textContent.
func statusIs(page, status string) bool {
	return strings.Contains(page, "status"+status)
}

// shipThroughRaiseForm raises the warehouse's "shipped" message from the
// instance's page, through the confirmation that names the instance.
func shipThroughRaiseForm(t *testing.T, ctx context.Context) {
	t.Helper()
	do(t, ctx, "open the raise form",
		chromedp.Click(chromedp.CSS(`p.actions a[href^="/confirm?action=raise"]`)),
		chromedp.WaitVisible(chromedp.CSS(`form.confirm`)))
	heading := read(t, ctx, "the confirmation's heading", chromedp.Text(chromedp.CSS(`h1`)))
	assert.Equal(t, "raise an event on instance "+waitingOrder+"?", heading, "the confirmation names the instance")
	do(t, ctx, "raise shipped",
		chromedp.SetValue(chromedp.CSS(`form.confirm input[name="event"]`), "shipped"),
		chromedp.SetValue(chromedp.CSS(`form.confirm textarea[name="data"]`), `"TRK-UI-1"`),
		chromedp.Click(chromedp.CSS(`form.confirm input[name="queue"]`)),
		chromedp.Click(chromedp.CSS(`form.confirm button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`p.done`)))
	done := read(t, ctx, "the raise's result", chromedp.Text(chromedp.CSS(`p.done`)))
	assert.True(t, strings.HasPrefix(done, `queued message "shipped" on instance `+waitingOrder), "the action's result: %s", done)
}

// saveTimelineScreenshot photographs the timeline's SVG.
func saveTimelineScreenshot(t *testing.T, ctx context.Context) {
	t.Helper()
	png := read(t, ctx, "screenshot the timeline", chromedp.Screenshot(chromedp.CSS("svg.timeline")))
	require.True(t, len(png) > 8 && string(png[1:4]) == "PNG", "a PNG")
	require.Less(t, len(png), 256<<10, "a screenshot the repository can keep (tools/check-tracked-files refuses 1 MiB)")
	path := filepath.Join(t.TempDir(), "ui-timeline.png")
	if *updateScreenshot {
		path = filepath.Join("..", "..", "docs", "ui-timeline.png")
	}
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("the timeline's screenshot (%d bytes): %s", len(png), path)
}

// checkHostileIDStaysText starts an instance whose id is markup that would
// run script, then checks the pages show it as text and ran nothing.
func checkHostileIDStaysText(t *testing.T, ctx context.Context, base string) {
	t.Helper()
	startThroughForm(t, ctx, base, hostileID, "ProcessOrder", `{"id":"hostile","customer":"ui","items":1,"total":1}`)
	assert.Equal(t, "cdb ui · start "+hostileID, read(t, ctx, "the result's title", chromedp.Title()), "the id is the title's text")
	assert.False(t, read(t, ctx, "window.pwned", chromedp.Evaluate[bool](`window.pwned !== undefined`)), "the id ran nothing")

	openFromFilteredList(t, ctx, base, hostileID)
	assert.Equal(t, "cdb ui · "+hostileID, read(t, ctx, "the instance's title", chromedp.Title()), "the id is the title's text")
	assert.False(t, read(t, ctx, "window.pwned", chromedp.Evaluate[bool](`window.pwned !== undefined`)), "the id ran nothing")
	assert.Zero(t, read(t, ctx, "the scripts", chromedp.Evaluate[int](`document.scripts.length`)), "no script element on the page")
	assert.Zero(t, read(t, ctx, "the images", chromedp.Evaluate[int](`document.images.length`)), "no image element on the page")
}

// flatten is the list's rows as lines, for a failure's message.
func flatten(rows [][]string) []string {
	var out []string
	for _, r := range rows {
		out = append(out, strings.Join(r, " "))
	}
	return out
}
