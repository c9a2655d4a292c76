package cosmostest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"time"
)

// ServerCLIEnv names the variable that points at @vercel/cosmosdb-server's
// cli.js; make test sets it after installing the pinned version.
const ServerCLIEnv = "CDB_COSMOSDB_SERVER_CLI"

var readyLine = regexp.MustCompile(`Ready to accept HTTP connections at (\S+:\d+)`)

// NPMServer is a running @vercel/cosmosdb-server process on loopback.
type NPMServer struct {
	Endpoint string
	cmd      *exec.Cmd
	cancel   context.CancelFunc
}

// StartNPMServer starts the server at cliPath with node on a free loopback
// port and waits until it reports that it is ready.
func StartNPMServer(ctx context.Context, cliPath string) (*NPMServer, error) {
	if _, err := os.Stat(cliPath); err != nil {
		return nil, fmt.Errorf("start @vercel/cosmosdb-server: %s=%s: %w", ServerCLIEnv, cliPath, err)
	}
	procCtx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(procCtx, "node", cliPath, "--host", "127.0.0.1", "-p", "0", "--no-ssl")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("start @vercel/cosmosdb-server: %w", err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("start @vercel/cosmosdb-server: %w", err)
	}
	addr, err := waitForReady(ctx, stdout)
	if err != nil {
		cancel()
		_ = cmd.Wait()
		return nil, fmt.Errorf("start @vercel/cosmosdb-server: %w", err)
	}
	return &NPMServer{Endpoint: "http://" + addr, cmd: cmd, cancel: cancel}, nil
}

// waitForReady reads the server's stdout until its ready line, then keeps
// draining it so the process never blocks on a full pipe.
func waitForReady(ctx context.Context, stdout io.Reader) (string, error) {
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		reported := false
		for sc.Scan() {
			if m := readyLine.FindStringSubmatch(sc.Text()); m != nil && !reported {
				found <- m[1]
				reported = true
			}
		}
		close(found)
	}()
	timeout := time.NewTimer(60 * time.Second)
	defer timeout.Stop()
	select {
	case addr, ok := <-found:
		if !ok {
			return "", fmt.Errorf("the server exited before it was ready")
		}
		return addr, nil
	case <-timeout.C:
		return "", fmt.Errorf("no ready line within 60s")
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// Stop kills the server and waits for it.
func (s *NPMServer) Stop() {
	s.cancel()
	_ = s.cmd.Wait()
}
