package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// The application's rates in `cdb top`: each process's Δtotal over Δread
// time between the last two readings seen, summed; a restart (a total that
// went down) leaves the process out for that interval; a process without
// totals, or whose lease ended, is not counted.
func TestTopSumsTheProcessesRatesFromTheirPublishedTotals(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	live := t0.Add(time.Hour)
	member := func(ru float64, throttles, requests int64, at time.Time) cdb.ProcessLeaseMember {
		return cdb.ProcessLeaseMember{Until: live, Totals: &cdb.ProcessTotals{RequestCharge: ru, Throttles: throttles, Requests: requests, ReadAt: at}}
	}
	olderBuild := cdb.ProcessLeaseMember{Until: live}
	ended := cdb.ProcessLeaseMember{Until: t0, Totals: &cdb.ProcessTotals{RequestCharge: 1e6, ReadAt: t0}}

	var r processReadings
	r = r.next(map[string]cdb.ProcessLeaseMember{
		"a": member(100, 1, 10, t0.Add(-time.Second)), "b": member(50, 0, 5, t0.Add(-2*time.Second)),
		"c": olderBuild, "d": ended,
	}, t0)
	first := r.rates()
	assert.Equal(t, processRates{Covered: 0, Publishing: 2}, first, "one reading each: no rate yet")

	r = r.next(map[string]cdb.ProcessLeaseMember{
		"a": member(200, 3, 20, t0.Add(4*time.Second)),
		"b": member(5, 0, 1, t0.Add(3*time.Second)), // restarted
		"c": olderBuild, "d": ended,
	}, t0.Add(5*time.Second))
	second := r.rates()
	assert.Equal(t, 1, second.Covered, "b restarted: left out")
	assert.Equal(t, 2, second.Publishing)
	require.NotNil(t, second.RUPerSecond)
	assert.InDelta(t, 20.0, *second.RUPerSecond, 1e-9, "a: 100 RU over 5s")
	assert.InDelta(t, 0.4, *second.ThrottlesPerSecond, 1e-9, "a: 2 429s over 5s")

	r = r.next(map[string]cdb.ProcessLeaseMember{
		"a": member(200, 3, 20, t0.Add(4*time.Second)), // not renewed since: its last rate stands
		"b": member(55, 1, 6, t0.Add(8*time.Second)),
		"c": olderBuild,
	}, t0.Add(10*time.Second))
	third := r.rates()
	assert.Equal(t, 2, third.Covered)
	assert.InDelta(t, 30.0, *third.RUPerSecond, 1e-9, "a's 20 and b's 50 RU over 5s")
	assert.InDelta(t, 0.6, *third.ThrottlesPerSecond, 1e-9, "a's 0.4 and b's 1 over 5s")
}

func TestTopSaysWhatTheApplicationsRatesCover(t *testing.T) {
	ru, rate := 12.5, 0.25
	cases := []struct {
		name       string
		s          topSample
		ru, thr    string
		note, last string
	}{
		{"no process leases", topSample{}, "n/a", "n/a", "the application's: no live process leases",
			"n/a: the figures come from processes that use Config.ProcessLeases"},
		{"older builds", topSample{LiveProcesses: 2}, "n/a", "n/a", "none of 2 publish totals (older builds)", topNote},
		{"first readings", topSample{LiveProcesses: 2, Processes: processRates{Publishing: 2}}, "-", "-",
			"0 of 2 processes: rates need 2 renewals", topNote},
		{"rates", topSample{LiveProcesses: 3, Processes: processRates{Covered: 2, Publishing: 3, RUPerSecond: &ru, ThrottlesPerSecond: &rate}},
			"12.50", "0.25", "the application's: 2 of 3 processes", topNote},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lines := topLines(c.s, time.Second)
			assert.Contains(t, lines, row("RU/s", c.ru, c.note))
			assert.Contains(t, lines, row("429/s", c.thr, c.note))
			assert.Equal(t, c.last, lines[len(lines)-1])
			for _, line := range lines {
				assert.LessOrEqual(t, len(line), 80, line)
			}
		})
	}
}

// row is a table row as topLines draws one without an age.
func row(label, value, note string) string {
	return topRow(label, value, "", note)
}
