package main

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// topOnTerminal runs `cdb top -n 2` with its stdout on a terminal of cols
// columns and returns what it wrote there.
func topOnTerminal(t *testing.T, cols uint16, conn []string) string {
	return onTerminal(t, cols, cli(append([]string{"top", "-n", "2", "-interval", "100ms"}, conn...)...).command(t))
}

// On a terminal each sample is drawn over the last from the top left
// corner: every line cleared to its end, the rest of the screen cleared
// below the table, and no line as wide as the terminal (which would wrap).
func TestBinaryTopRedrawsInPlaceOnATerminal(t *testing.T) {
	conn, _ := topFixture(t)
	out := topOnTerminal(t, 60, conn)
	frames := strings.Split(out, "\x1b[H")
	require.Len(t, frames, 3, "two samples, each drawn from the cursor's home: %q", out)
	assert.Empty(t, frames[0], "nothing before the first")
	for _, frame := range frames[1:] {
		assert.True(t, strings.HasSuffix(frame, "\x1b[J"), "the screen below the table is cleared: %q", frame)
		lines := strings.Split(strings.TrimSuffix(frame, "\x1b[J"), "\r\n")
		require.Len(t, lines, 14, "the table's 13 lines: %q", frame)
		for _, line := range lines[:13] {
			require.True(t, strings.HasSuffix(line, "\x1b[K"), "each line clears what an earlier one left: %q", line)
			shown := regexp.MustCompile("\x1b\\[[0-9;]*[A-Za-z]").ReplaceAllString(line, "")
			assert.Less(t, utf8.RuneCountInString(shown), 60, "cut to the terminal's width less one: %q", shown)
		}
		assert.Regexp(t, `(?m)^orchestrator +3 `, frame)
	}
}
