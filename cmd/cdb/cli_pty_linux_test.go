package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// openPTY opens a pseudo-terminal of cols×rows: the test reads the master,
// cdb writes to the slave as to a terminal.
func openPTY(t *testing.T, cols, rows uint16) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { _ = master.Close() })
	var unlock int32
	require.NoError(t, ioctl(master.Fd(), syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)))
	var n uint32
	require.NoError(t, ioctl(master.Fd(), syscall.TIOCGPTN, unsafe.Pointer(&n)))
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	size := struct{ rows, cols, x, y uint16 }{rows, cols, 0, 0}
	require.NoError(t, ioctl(slave.Fd(), syscall.TIOCSWINSZ, unsafe.Pointer(&size)))
	return master, slave
}

func ioctl(fd uintptr, req uint, arg unsafe.Pointer) error {
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, uintptr(req), uintptr(arg)); errno != 0 {
		return errno
	}
	return nil
}

// onTerminal runs cmd with its stdout on a terminal of cols columns and
// returns what it wrote there.
func onTerminal(t *testing.T, cols uint16, cmd *exec.Cmd) string {
	t.Helper()
	master, slave := openPTY(t, cols, 24)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = slave, &stderr
	require.NoError(t, cmd.Start())
	require.NoError(t, slave.Close())
	var out bytes.Buffer
	read := make(chan struct{})
	go func() { _, _ = io.Copy(&out, master); close(read) }() // ends with EIO once cdb exits
	require.NoError(t, cmd.Wait(), stderr.String())
	<-read
	return out.String()
}

// demoOnTerminal runs `cdb demo` with its stdout on a terminal of cols
// columns and returns what it wrote there.
func demoOnTerminal(t *testing.T, cols uint16, env ...string) string {
	return onTerminal(t, cols, cli("demo", "-orders", "12", "-concurrency", "2").with(env...).command(t))
}

// repaintScreen replays the repainted lines (those that start with a bare
// carriage return) of a terminal's output on a line of width columns, as a
// terminal shows them. It returns how many repaints there were, and the
// first one that wrapped or left characters of an earlier one behind.
func repaintScreen(output string, width int) (repaints int, problem string) {
	var line []rune
	col, repainting := 0, false
	var written strings.Builder
	check := func() {
		if !repainting || problem != "" {
			return
		}
		repaints++
		if shown := strings.TrimRight(string(line), " "); shown != strings.TrimRight(written.String(), " ") {
			problem = fmt.Sprintf("the line shows %q after %q was painted", shown, written.String())
		}
	}
	for i := 0; i < len(output); {
		switch {
		case strings.HasPrefix(output[i:], "\r\n"), output[i] == '\n':
			check()
			repainting, line, col = false, nil, 0
			i += strings.Index(output[i:], "\n") + 1
		case output[i] == '\r':
			check()
			repainting, col = true, 0
			written.Reset()
			i++
		case strings.HasPrefix(output[i:], "\x1b[K"):
			line = line[:min(col, len(line))]
			i += 3
		default:
			r, size := utf8.DecodeRuneInString(output[i:])
			i += size
			if !repainting {
				continue
			}
			if col >= width && problem == "" {
				problem = fmt.Sprintf("%q does not fit in %d columns: the terminal wraps it and the next repaint leaves it behind", written.String()+string(r), width)
			}
			written.WriteRune(r)
			for len(line) <= col {
				line = append(line, ' ')
			}
			line[col] = r
			col++
		}
	}
	check()
	return repaints, problem
}

func TestBinaryProgressLineFitsAnEightyColumnTerminal(t *testing.T) {
	out := demoOnTerminal(t, 80)
	repaints, problem := repaintScreen(out, 80)
	assert.Positive(t, repaints, "the demo repaints a progress line on a terminal: %q", out)
	assert.Empty(t, problem)
	assert.Contains(t, out, "12/12", "the last repaint shows every order settled")
	assert.Regexp(t, `12/12 orders .*  [0-9]+ requests  [0-9]+ RU  [0-9.]+s`, out, "and still the requests and the RU")
}

func TestBinaryProgressLineFollowsCOLUMNS(t *testing.T) {
	out := demoOnTerminal(t, 80, "COLUMNS=50")
	repaints, problem := repaintScreen(out, 50)
	assert.Positive(t, repaints)
	assert.Empty(t, problem)
}
