package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/duroxide-go/cdb"
)

// `cdb top` is an operator's first look at a container: every interval it
// takes cdb.CosmosProvider.SampleQueues (the gauges' queries, 6 per
// partition key range) and reads the process lease membership document (1
// read), and shows the queues, the outbox, the held messages, the
// instances that ended per second, and the live processes.
//
// RU/s and 429/s across the application's processes come from the totals
// the processes publish with their process lease renewals
// (topprocesses.go); processes without process leases publish nothing. The
// view row is top's own cost, which is what watching costs.

// The line under the table says where the RU figures come from.
const (
	topNote          = "app: from the processes' lease renewals; view: top's own cost"
	topNoteNoMembers = "n/a: the figures come from processes that use Config.ProcessLeases"
)

// topOptions are cdb top's flags.
type topOptions struct {
	interval time.Duration
	count    int // samples to take; 0: until interrupted
	format   outputFormat
}

func runTop(ctx context.Context, argv []string, stdout, stderr io.Writer) error {
	o := topOptions{interval: 5 * time.Second}
	return operatorCommandOn(watchingConnection, "top", func(fs *flag.FlagSet) {
		fs.Func("interval", "`time` between samples, e.g. 1s (default 5s); each costs 6 queries per partition key range and 1 read", func(v string) error {
			d, err := time.ParseDuration(v)
			switch {
			case err != nil:
				return errors.New("not a duration (e.g. 500ms, 5s, 1m)")
			case d <= 0:
				return fmt.Errorf("must be positive, got %s", d)
			}
			o.interval = d
			return nil
		})
		fs.Func("n", "stop after `count` samples (default 0: until interrupted)", func(v string) error {
			n, err := strconv.Atoi(v)
			switch {
			case err != nil:
				return errors.New("not a number")
			case n < 0:
				return fmt.Errorf("must be 0 or more, got %d", n)
			}
			o.count = n
			return nil
		})
		registerOutput(fs, &o.format)
	}, 0, 0, nil, func(ctx context.Context, p *cdb.CosmosProvider, endpoint string, _ []string, out io.Writer) error {
		v := &topView{p: p, endpoint: endpoint, opts: o, out: out, tty: isTerminal(out) && o.format == formatText}
		return v.run(ctx)
	})(ctx, argv, stdout, stderr)
}

// topView takes the samples and shows them.
type topView struct {
	p        *cdb.CosmosProvider
	endpoint string
	opts     topOptions
	out      io.Writer
	tty      bool // redraw in place
	readings processReadings
}

// topSample is one sample as shown, and as `top -o json` prints it (one
// object per line). The field names are the CLI's (docs/cli.md).
type topSample struct {
	Sample int       `json:"sample"`
	Time   time.Time `json:"time"` // the service's time the sample began
	// Endpoint, Database and Container say which container it is.
	Endpoint     string      `json:"endpoint"`
	Database     string      `json:"database"`
	Container    string      `json:"container"`
	Orchestrator backlogJSON `json:"orchestrator_queue"`
	Worker       backlogJSON `json:"worker_queue"`
	Outbox       backlogJSON `json:"outbox"`
	Parked       backlogJSON `json:"parked"`
	Poison       backlogJSON `json:"poison"`
	// Completed counts the instances that ended (Completed or Failed)
	// since the previous sample, over Seconds; null on the first sample.
	Completed          *uint64  `json:"completed"`
	CompletedPerSecond *float64 `json:"completed_per_second"`
	Seconds            *float64 `json:"seconds"`
	// LiveProcesses counts the processes whose process lease
	// (Config.ProcessLeases) runs; processes without one do not show.
	LiveProcesses int `json:"live_processes"`
	// Processes are the application's RU and 429s per second, from the
	// totals its live processes publish with their process leases.
	Processes processRates `json:"processes"`
	View      viewCost     `json:"view"`
}

// backlogJSON is a cdb.Backlog: how many, and the oldest's age.
type backlogJSON struct {
	Count            uint64  `json:"count"`
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
}

// viewCost is what top's own requests cost since the previous sample (the
// first sample's: its own).
type viewCost struct {
	Requests      int64    `json:"requests"`
	RequestCharge float64  `json:"request_charge"`
	RUPerSecond   *float64 `json:"ru_per_second"` // null on the first sample
	Throttles     int64    `json:"throttles"`     // 429 answers
}

func backlogToJSON(b cdb.Backlog) backlogJSON {
	return backlogJSON{Count: b.Count, OldestAgeSeconds: b.OldestAge.Seconds()}
}

// run takes a sample every interval until the count is reached or ctx
// ends. A failing first sample ends top; a later one is shown and the
// next interval tries again.
func (v *topView) run(ctx context.Context) error {
	tick := time.NewTicker(v.opts.interval)
	defer tick.Stop()
	var prev *topSample
	stats := v.p.Client().Stats()
	for n := 1; v.opts.count == 0 || n <= v.opts.count; n++ {
		if n > 1 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
		}
		s, err := v.take(ctx, n, prev)
		after := v.p.Client().Stats()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && prev == nil:
			return describe(v.endpoint, err)
		case err != nil:
			v.showFailure(n, err)
			continue // rates run from the last sample that worked
		}
		s.View = costBetween(stats, after, s.Seconds)
		stats = after
		if err := v.show(s); err != nil {
			return err
		}
		prev = &s
	}
	return nil
}

// take reads one sample; the completions are counted since prev's time.
func (v *topView) take(ctx context.Context, n int, prev *topSample) (topSample, error) {
	var since time.Time
	if prev != nil {
		since = prev.Time
	}
	q, err := v.p.SampleQueues(ctx, since)
	if err != nil {
		return topSample{}, err
	}
	members, err := v.p.ReadProcessLeaseMembership(ctx)
	if err != nil {
		return topSample{}, err
	}
	c := v.p.Container()
	s := topSample{
		Sample: n, Time: q.Time.UTC(), Endpoint: v.endpoint, Database: c.DatabaseID(), Container: c.ID(),
		Orchestrator: backlogToJSON(q.Orchestrator), Worker: backlogToJSON(q.Worker), Outbox: backlogToJSON(q.Outbox),
		Parked: backlogToJSON(q.Parked), Poison: backlogToJSON(q.Poison),
		LiveProcesses: liveMembers(members, q.Time),
	}
	v.readings = v.readings.next(members, q.Time)
	s.Processes = v.readings.rates()
	if prev != nil {
		seconds := max(q.Time.Sub(prev.Time).Seconds(), 1e-3)
		rate := float64(q.Completed) / seconds
		s.Completed, s.CompletedPerSecond, s.Seconds = &q.Completed, &rate, &seconds
	}
	return s, nil
}

// liveMembers counts the process leases that run past now.
func liveMembers(members map[string]cdb.ProcessLeaseMember, now time.Time) int {
	live := 0
	for _, m := range members {
		if m.Until.After(now) {
			live++
		}
	}
	return live
}

// costBetween is what top's requests cost between two snapshots of its
// client's stats, per second of the seconds since the previous sample
// (nil: none).
func costBetween(before, after cdb.ClientStats, seconds *float64) viewCost {
	c := viewCost{Requests: after.Requests - before.Requests, RequestCharge: after.RequestCharge - before.RequestCharge,
		Throttles: after.Throttles - before.Throttles}
	if seconds != nil {
		rate := c.RequestCharge / *seconds
		c.RUPerSecond = &rate
	}
	return c
}

// show prints a sample: a JSON line, a block, or the block redrawn over
// the last one on a terminal.
func (v *topView) show(s topSample) error {
	if v.opts.format == formatJSON {
		return writeJSONLine(v.out, s)
	}
	v.showLines(topLines(s, v.opts.interval))
	return nil
}

// showFailure says a sample failed, where the table would go.
func (v *topView) showFailure(n int, err error) {
	if v.opts.format == formatJSON {
		_ = writeJSONLine(v.out, map[string]any{"sample": n, "error": err.Error()})
		return
	}
	v.showLines([]string{fmt.Sprintf("cdb top  sample %d failed: %v", n, describe(v.endpoint, err)), "next try in " + v.opts.interval.String()})
}

// showLines prints lines cut to the width: on a terminal over the previous
// ones (cursor home, each line cleared to its end, the rest of the screen
// cleared), else as a block and a blank line.
func (v *topView) showLines(lines []string) {
	width := terminalWidth(v.out)
	var b strings.Builder
	if v.tty {
		width-- // a line as wide as the terminal wraps on some
		b.WriteString("\x1b[H")
	}
	for _, line := range lines {
		b.WriteString(fitWidth(line, width))
		if v.tty {
			b.WriteString("\x1b[K")
		}
		b.WriteString("\n")
	}
	if v.tty {
		b.WriteString("\x1b[J")
	} else {
		b.WriteString("\n")
	}
	fmt.Fprint(v.out, b.String())
}

// writeJSONLine prints v as one line, so a stream of samples reads line by
// line.
func writeJSONLine(out io.Writer, v any) error {
	line, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	_, err = fmt.Fprintf(out, "%s\n", line)
	return err
}

// topLines is a sample as a table of at most 80 columns.
func topLines(s topSample, interval time.Duration) []string {
	row := topRow
	backlog := func(label string, b backlogJSON, note string) string {
		return row(label, fmt.Sprint(b.Count), formatAge(b), note)
	}
	completed, completedNote := "-", "Completed+Failed per second, from sample 2"
	if s.CompletedPerSecond != nil {
		completed = fmt.Sprintf("%.2f", *s.CompletedPerSecond)
		completedNote = fmt.Sprintf("%d ended (Completed, Failed) in %.1fs", *s.Completed, *s.Seconds)
	}
	appRU, appThrottles, appNote := processRows(s)
	note := topNote
	if s.LiveProcesses == 0 {
		note = topNoteNoMembers
	}
	viewRate := "-"
	if s.View.RUPerSecond != nil {
		viewRate = fmt.Sprintf("%.2f", *s.View.RUPerSecond)
	}
	return []string{
		fmt.Sprintf("cdb top  %s/%s at %s", s.Database, s.Container, s.Endpoint),
		row("", "COUNT", "OLDEST", fmt.Sprintf("sample %d  %s  every %s", s.Sample, s.Time.Format("15:04:05Z"), interval)),
		backlog("orchestrator", s.Orchestrator, "turns a fetch could take now"),
		backlog("worker", s.Worker, "activities a fetch could take now"),
		backlog("outbox", s.Outbox, "commits not yet delivered (or removed)"),
		backlog("held parked", s.Parked, "waiting for their instance to start"),
		backlog("held poison", s.Poison, "never decoded: set aside for an operator"),
		row("completed/s", completed, "", completedNote),
		row("processes", fmt.Sprint(s.LiveProcesses), "", "live process leases (Config.ProcessLeases)"),
		row("RU/s", appRU, "", appNote),
		row("429/s", appThrottles, "", appNote),
		row("view RU/s", viewRate, "", fmt.Sprintf("own: %d requests, %.1f RU, %d 429s a sample",
			s.View.Requests, s.View.RequestCharge, s.View.Throttles)),
		note,
	}
}

// processRows are the application's RU/s and 429/s cells and the note
// that says how many processes they cover.
func processRows(s topSample) (ru, throttles, note string) {
	r := s.Processes
	switch {
	case s.LiveProcesses == 0:
		return "n/a", "n/a", "the application's: no live process leases"
	case r.Publishing == 0:
		return "n/a", "n/a", fmt.Sprintf("none of %d publish totals (older builds)", s.LiveProcesses)
	case r.Covered == 0:
		return "-", "-", fmt.Sprintf("0 of %d processes: rates need 2 renewals", s.LiveProcesses)
	}
	return fmt.Sprintf("%.2f", *r.RUPerSecond), fmt.Sprintf("%.2f", *r.ThrottlesPerSecond),
		fmt.Sprintf("the application's: %d of %d processes", r.Covered, s.LiveProcesses)
}

// topRow is a row of top's table: a label, a count or rate, an age, and
// a note.
func topRow(label, count, oldest, note string) string {
	return strings.TrimRight(fmt.Sprintf("%-14s %9s %8s   %s", label, count, oldest, note), " ")
}

// formatAge is a backlog's oldest age, short: "-" when there is none.
func formatAge(b backlogJSON) string {
	if b.Count == 0 {
		return "-"
	}
	d := time.Duration(b.OldestAgeSeconds * float64(time.Second))
	switch {
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}
