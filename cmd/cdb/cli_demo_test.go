package main

// cdb demo through the built binary: its progress lines, its pace on an
// emulator, and the timeline it prints, opened again with cdb show.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var progressLinePattern = regexp.MustCompile(`[0-9]+/[0-9]+ orders`)

// Off a terminal the demo prints a progress line every 2 s; each fits 80
// columns and has the requests and the RU.
func TestBinaryDemoProgressLinesFitEightyColumns(t *testing.T) {
	code, stdout, stderr := cli("demo", "-orders", "6", "-concurrency", "2").run(t)
	require.Equal(t, 0, code, stderr)
	lines := 0
	for _, line := range strings.Split(stdout, "\n") {
		if !progressLinePattern.MatchString(line) {
			continue
		}
		lines++
		assert.LessOrEqual(t, utf8.RuneCountInString(line), 80, "%q", line)
		assert.Regexp(t, `  [0-9]+ requests  [0-9]+ RU  [0-9.]+s$`, line)
	}
	assert.Positive(t, lines, "the demo printed progress: %s", stdout)
}

func TestProgressLineKeepsRequestsAndRUWhateverTheWidth(t *testing.T) {
	p := demoProgress{settled: 9876, orders: 10000, shipped: 8000, failed: 1876, escalated: 2500, activities: 65432,
		requests: 1234567, charge: 12345678, elapsed: 4321e9}
	for _, width := range []int{40, 57, 79, 119, 200} {
		line := p.line(width)
		assert.LessOrEqual(t, utf8.RuneCountInString(line), width, "%q", line)
		if width >= 57 { // the line without the fields that give way
			assert.Contains(t, line, "9876/10000 orders  ", "width %d", width)
			assert.Contains(t, line, "  1234567 requests  12345678 RU  4321.0s", "width %d", width)
		}
	}
	assert.Equal(t, "9876/10000 orders  1234567 requests  12345678 RU  4321.0s", p.line(79),
		"the outcomes, the bar and the activities give way first")
	assert.Equal(t, "[#########.]  9876/10000 orders  8000 shipped 1876 failed 2500 escalated  65432 activities  1234567 requests  12345678 RU  4321.0s",
		p.line(200))
	typical := demoProgress{settled: 45, orders: 60, shipped: 40, failed: 3, escalated: 2, activities: 312, requests: 4301, charge: 43012, elapsed: 9.8e9}
	assert.Equal(t, "45/60 orders  40 shipped 3 failed 2 escalated  4301 requests  43012 RU  9.8s", typical.line(79))
}

// On an emulator on loopback the demo does not pace itself; with -keep its
// container stays, and the order it shows, and that order's child, open
// with cdb show, whose history has the event names the timeline printed.
func TestBinaryDemoOnAnEmulatorIsUnpacedAndItsTimelineOpensWithShow(t *testing.T) {
	emulator := cli("emulator").command(t)
	out, err := emulator.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, emulator.Start())
	t.Cleanup(func() { _ = emulator.Process.Kill(); _ = emulator.Wait() })
	first, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	m := endpointLine.FindStringSubmatch(strings.TrimSpace(first))
	require.NotNil(t, m, "emulator line %q", first)
	env := []string{"COSMOS_ENDPOINT=" + m[1], "COSMOS_KEY=" + m[2]}

	code, stdout, stderr := cli("demo", "-orders", "3", "-keep").with(env...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, stdout, "pacing:")
	assert.Contains(t, stdout, "not paced: the endpoint is an emulator on loopback")
	explore := regexp.MustCompile(`explore it \(the instances, the order above, its payment\):\n  cdb instances -container (\S+)\n  cdb show -container \S+ (\S+)\n  cdb show -container \S+ (\S+)\n`).
		FindStringSubmatch(stdout)
	require.NotNil(t, explore, stdout)
	container, order, child := explore[1], explore[2], explore[3]
	assert.Equal(t, order+"::sub::", child[:len(order)+7], "a generated child id: the parent's, ::sub:: and the event")
	assert.Contains(t, stdout, "ChargePayment as "+child, "the timeline names the child by the id it is stored under")

	code, shown, stderr := cli("show", "-o", "json", "-container", container, order).with(env...).run(t)
	require.Equal(t, 0, code, stderr)
	var history struct {
		History []struct {
			Type string `json:"type"`
		} `json:"history"`
	}
	require.NoError(t, json.Unmarshal([]byte(shown), &history), shown)
	var stored []string
	for _, e := range history.History {
		stored = append(stored, e.Type)
	}
	assert.Equal(t, stored, timelineKinds(stdout), "the demo's timeline names each event as cdb show -o json types it")

	code, shown, stderr = cli("show", "-container", container, child).with(env...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, shown, "orchestration ChargePayment@")
	assert.Contains(t, shown, fmt.Sprintf("parent     %s\n", order))
}

var timelineLine = regexp.MustCompile(`^  #[0-9]+ +(?:\+[0-9][0-9a-z.]*)? +([A-Za-z]+)(?: |$)`)

// timelineKinds are the event kinds of the timeline lines in out.
func timelineKinds(out string) []string {
	var kinds []string
	for _, line := range strings.Split(out, "\n") {
		if m := timelineLine.FindStringSubmatch(line); m != nil {
			kinds = append(kinds, m[1])
		}
	}
	return kinds
}
