package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
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

// progressField is one part of a progress line; rank 0 is always shown,
// then rank 1, 2, ... as the width allows.
type progressField struct {
	text string
	rank int
}

// progressSeparator is what stands between two fields.
const progressSeparator = "  "

// fitFields joins the fields, in their order, leaving out the highest
// ranks until the line fits in width; what rank 0 alone does not fit is
// cut.
func fitFields(width int, fields []progressField) string {
	highest := 0
	for _, f := range fields {
		highest = max(highest, f.rank)
	}
	line := ""
	for rank := highest; rank >= 0; rank-- {
		line = joinFields(fields, rank)
		if utf8.RuneCountInString(line) <= width {
			return line
		}
	}
	return fitWidth(line, width)
}

// joinFields joins the fields of at most rank.
func joinFields(fields []progressField, rank int) string {
	var parts []string
	for _, f := range fields {
		if f.rank <= rank {
			parts = append(parts, f.text)
		}
	}
	return strings.Join(parts, progressSeparator)
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

// progressBar is done of total as a bar of width cells.
func progressBar(done, total, width int) string {
	filled := min(done*width/max(total, 1), width)
	return "[" + strings.Repeat("#", filled) + strings.Repeat(".", width-filled) + "]"
}
