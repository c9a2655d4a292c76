package sdkcompat

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// emulator is a running `cdb emulator` process.
type emulator struct {
	endpoint string
	key      string
}

var emulatorLine = regexp.MustCompile(`^endpoint=(http://127\.0\.0\.1:\d+) key=(\S+)$`)

// startEmulator builds cmd/cdb from the parent module, starts `cdb emulator`
// with the given flags and reads its one stdout line. The process is killed
// when the test ends.
func startEmulator(t *testing.T, flags ...string) emulator {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cdb")
	build := exec.Command("go", "build", "-o", bin, "./cmd/cdb")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build cdb: %v\n%s", err, out)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, append([]string{"emulator"}, flags...)...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start cdb emulator: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})

	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
	}()
	select {
	case l, ok := <-line:
		m := emulatorLine.FindStringSubmatch(l)
		if !ok || m == nil {
			t.Fatalf("cdb emulator printed %q, want endpoint=http://127.0.0.1:PORT key=KEY", l)
		}
		return emulator{endpoint: m[1], key: m[2]}
	case <-time.After(60 * time.Second):
		t.Fatal("cdb emulator printed nothing within 60s")
	}
	panic(fmt.Sprintf("unreachable in %s", t.Name()))
}
