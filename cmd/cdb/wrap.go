package main

import (
	"io"
	"strings"
	"unicode/utf8"
)

// wrapLine breaks line into lines of at most width characters, at spaces
// where it can, so that text output reads on an 80-column terminal; the
// lines after the first start with indent spaces. A word longer than a
// line is cut where the line ends: a JSON payload has no spaces.
func wrapLine(line string, width, indent int) []string {
	indent = min(indent, width/2) // a narrow terminal still gets some text per line
	rest := []rune(strings.TrimRight(line, " "))
	var lines []string
	prefix := ""
	for {
		room := max(width-len(prefix), 1)
		if len(rest) <= room {
			return append(lines, prefix+string(rest))
		}
		head, tail := breakAt(rest, room)
		lines = append(lines, prefix+strings.TrimRight(string(head), " "))
		rest = []rune(strings.TrimLeft(string(tail), " "))
		prefix = strings.Repeat(" ", indent)
	}
}

// breakAt splits runes, longer than room, at its last space within room
// past its leading spaces, or else at room.
func breakAt(runes []rune, room int) (head, tail []rune) {
	leading := 0
	for leading < len(runes) && runes[leading] == ' ' {
		leading++
	}
	for i := room; i > leading; i-- {
		if runes[i] == ' ' {
			return runes[:i], runes[i+1:]
		}
	}
	return runes[:room], runes[room:]
}

// printWrapped prints line to out wrapped at width, its continuation lines
// indented by indent.
func printWrapped(out io.Writer, line string, width, indent int) {
	for _, l := range wrapLine(line, width, indent) {
		_, _ = io.WriteString(out, l+"\n")
	}
}

// wrapText wraps each line of text at width, continuing a line at its own
// indentation (a flag's usage under its name, a paragraph at its margin).
func wrapText(text string, width int) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(text, "\n") {
		body := strings.TrimSuffix(line, "\n")
		if utf8.RuneCountInString(body) <= width {
			b.WriteString(line)
			continue
		}
		indent := len(body) - len(strings.TrimLeft(body, " "))
		b.WriteString(strings.Join(wrapLine(body, width, indent), "\n"))
		if strings.HasSuffix(line, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}

// helpWidth is the width of help and usage text: the terminal's, but no
// wider than 80 columns, which prose reads best within.
func helpWidth(out io.Writer) int {
	return min(terminalWidth(out), defaultWidth)
}
