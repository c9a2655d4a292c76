package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"unicode/utf8"
)

// defaultWidth is the width of a terminal that does not say.
const defaultWidth = 80

// repaintLine paints line over the terminal line the cursor is on: back to
// its start, cleared (a shorter line leaves nothing of a longer one), and
// cut to the terminal's width less one column, so the terminal never wraps
// it (a wrapped line is left behind by the next repaint).
func repaintLine(w io.Writer, line string) {
	fmt.Fprintf(w, "\r\x1b[K%s", fitWidth(line, terminalWidth(w)-1))
}

// fitWidth cuts s to at most width characters, marking the cut with "…".
func fitWidth(s string, width int) string {
	if width < 1 {
		return ""
	}
	if utf8.RuneCountInString(s) <= width {
		return s
	}
	runes := []rune(s)
	return string(runes[:width-1]) + "…"
}

// terminalWidth is $COLUMNS when set, else the width of the terminal w
// writes to, else 80.
func terminalWidth(w io.Writer) int {
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	if f, ok := w.(*os.File); ok {
		if n := terminalColumns(f); n > 0 {
			return n
		}
	}
	return defaultWidth
}
