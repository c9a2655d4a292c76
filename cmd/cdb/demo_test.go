package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

func demoTestContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// fakePacerClock is the pacer's clock and sleep: sleeping advances it, and
// each sleep is recorded.
type fakePacerClock struct {
	now   time.Time
	slept []time.Duration
}

func (c *fakePacerClock) install(p *ruPacer) {
	p.now = func() time.Time { return c.now }
	p.sleep = func(_ context.Context, d time.Duration) error {
		c.slept = append(c.slept, d)
		c.now = c.now.Add(d)
		return nil
	}
	p.restart()
}

func (c *fakePacerClock) total() time.Duration {
	var sum time.Duration
	for _, d := range c.slept {
		sum += d
	}
	return sum
}

// The pacer lets order i start once the budget since the start covers both
// what the account has charged and i orders' estimate.
func TestRUPacerSpacesStartsByTheRUConsumed(t *testing.T) {
	ctx := demoTestContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	client := acct.Client()
	p := newRUPacer(100, 50, func() float64 { return client.Stats().RequestCharge })
	clock := &fakePacerClock{now: time.Unix(1_000_000, 0)}
	clock.install(p)

	require.NoError(t, p.wait(ctx, 0))
	assert.Empty(t, clock.slept, "nothing spent, nothing estimated: the first order starts at once")

	require.NoError(t, p.wait(ctx, 1))
	assert.Equal(t, 500*time.Millisecond, clock.total(), "one order's estimate, 50 RU at 100 RU/s")

	// The orders cost more than estimated: the account's charges set the pace.
	require.NoError(t, client.EnsureDatabase(ctx, "db"))
	cc, err := client.NewContainer("db", "c")
	require.NoError(t, err)
	_, err = cc.Create(ctx, cdb.ContainerProperties{PartitionKey: cdb.PartitionKeyDefinition{Paths: []string{"/pk"}}})
	require.NoError(t, err)
	for i := range 30 {
		_, err := cc.CreateItem(ctx, cdb.NewPartitionKeyString("p"), []byte(fmt.Sprintf(`{"id":"%d","pk":"p"}`, i)), nil)
		require.NoError(t, err)
	}
	spent := client.Stats().RequestCharge
	require.Greater(t, spent, 100.0, "more than two orders' estimate")
	require.NoError(t, p.wait(ctx, 2))
	assert.Equal(t, p.secondsFor(spent), clock.total(), "waited until %.1f RU fit in the budget", spent)

	// Once the budget covers what was spent, the estimate paces again.
	clock.slept = nil
	require.NoError(t, p.wait(ctx, 10))
	assert.Equal(t, p.secondsFor(10*50)-p.secondsFor(spent), clock.total())
}

func TestRUPacerStopsWaitingWhenCancelled(t *testing.T) {
	p := newRUPacer(1, 1000, func() float64 { return 0 })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, p.wait(ctx, 5), context.Canceled)
}

func TestDemoOnAnAccountIsSmallerAndPaced(t *testing.T) {
	assert.Equal(t, demoDefaults{orders: 60}, demoDefaultsFor(targetInMemory), "in memory: the full workload, unpaced")
	assert.Equal(t, demoDefaults{orders: 60}, demoDefaultsFor(targetLocal), "an emulator on loopback has no RU/s to pay for")
	onAccount := demoDefaultsFor(targetAccount)
	assert.Less(t, float64(onAccount.orders*demoOrderRU)/onAccount.ruPerSecond, 60.0,
		"the default workload fits in a minute of its budget")
	assert.Less(t, onAccount.ruPerSecond, 400.0, "a new container's 400 RU/s leave room for the dispatchers' polling")
}

// Only an endpoint off this machine is an account with RU/s to pace for:
// cdb emulator and Microsoft's emulator listen on loopback.
func TestDemoPacesOnlyForAnEndpointOffThisMachine(t *testing.T) {
	for endpoint, loopback := range map[string]bool{
		"http://127.0.0.1:41234":                           true,
		"https://localhost:8081/":                          true,
		"https://LOCALHOST:8081":                           true,
		"http://[::1]:8081":                                true,
		"https://127.8.9.10:443":                           true,
		"https://myaccount.documents.azure.com:443/":       false,
		"https://10.0.0.4:8081":                            false,
		"https://localhost.example.com:443/":               false,
		"https://myaccount-westeurope.documents.azure.com": false,
	} {
		assert.Equal(t, loopback, isLoopbackEndpoint(endpoint), endpoint)
	}
}

// On an account the demo waits out throttling for longer than a client does
// by default: a 400 RU/s container answers a burst with 429s.
func TestDemoOnAnAccountRidesOutThrottling(t *testing.T) {
	ctx := demoTestContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	cfg := cdb.Config{Endpoint: acct.Endpoint(), Key: acct.Key(), ClientOptions: cdb.ClientOptions{Transport: acct.Transport()}}
	throttle := func() func() {
		return acct.InjectFault(cdb.FakeFault{Status: http.StatusTooManyRequests, RetryAfter: time.Millisecond, Times: 20})
	}

	remove := throttle()
	_, err := cdb.NewProvider(ctx, cfg)
	require.Error(t, err, "20 throttles in a row outlast the default retries")
	assert.True(t, cdb.HasStatus(err, http.StatusTooManyRequests), "%v", err)
	remove()

	throttle()
	p, err := cdb.NewProvider(ctx, demoAccountConfig(cfg, "cdb-demo-test"))
	require.NoError(t, err, "the demo's client waits them out")
	defer p.Close()
	assert.Equal(t, "cdb-demo-test", p.Container().ID())
}

// A paced demo on the in-memory account waits between starts and still
// completes every order.
func TestPacedDemoCompletes(t *testing.T) {
	ctx := demoTestContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client()})
	require.NoError(t, err)
	defer p.Close()
	var out bytes.Buffer
	d := newDemo(p, 3, &out)
	d.pace(10 * demoOrderRU) // a tenth of a second per order
	waits := 0
	sleep := d.pacer.sleep
	d.pacer.sleep = func(ctx context.Context, dur time.Duration) error { waits++; return sleep(ctx, dur) }

	require.NoError(t, d.run(ctx, 2))
	assert.Positive(t, waits, "the starts were paced")
	assert.Equal(t, int64(3), d.shipped.Load()+d.failed.Load(), "every order settled")
	assert.Contains(t, out.String(), "summary")
}

// buildCDB builds the cdb binary into a temporary directory.
func buildCDB(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cdb")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

var httpsEndpointLine = regexp.MustCompile(`^endpoint=(https://127\.0\.0\.1:\d+) key=(\S+)$`)

// The guide's path for an emulator with its own certificate, end to end on
// the built binary: `cdb emulator -tls-cert` serves https, and `cdb demo`
// trusts it through COSMOS_CA_FILE, paced as on any account.
func TestDemoOnATLSEmulatorWithTheCAFile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs the demo")
	}
	ctx := demoTestContext(t)
	bin := buildCDB(t)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "emulator.pem")

	emulator := exec.CommandContext(ctx, bin, "emulator", "-tls-cert", caFile)
	stdout, err := emulator.StdoutPipe()
	require.NoError(t, err)
	emulator.Stderr = io.Discard
	require.NoError(t, emulator.Start())
	t.Cleanup(func() { _ = emulator.Process.Kill(); _ = emulator.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	m := httpsEndpointLine.FindStringSubmatch(strings.TrimSpace(line))
	require.NotNil(t, m, "stdout line %q", line)

	demo := func(extraEnv ...string) (string, error) {
		cmd := exec.CommandContext(ctx, bin, "demo", "-orders", "2", "-ru-per-second", "20000")
		cmd.Dir = dir // no .env
		cmd.Env = append(os.Environ(), "COSMOS_ENDPOINT="+m[1], "COSMOS_KEY="+m[2], "COSMOS_INSECURE_SKIP_VERIFY=", "COSMOS_CA_FILE=")
		cmd.Env = append(cmd.Env, extraEnv...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := demo()
	require.Error(t, err, "without the CA file the certificate is not trusted: %s", out)
	assert.Contains(t, out, "certificate")

	out, err = demo("COSMOS_CA_FILE=" + caFile)
	require.NoError(t, err, "%s", out)
	assert.Contains(t, out, "pacing: orders start so that the demo uses about 20000 RU/s")
	assert.Contains(t, out, "2/2 orders")
	assert.Contains(t, out, "deleted afterwards")

	// The operator commands trust the same file; the demo's container is
	// gone, so the container check finds nothing.
	metrics := exec.CommandContext(ctx, bin, "metrics", "-container", "cdb-demo-gone")
	metrics.Dir = dir
	metrics.Env = append(os.Environ(), "COSMOS_ENDPOINT="+m[1], "COSMOS_KEY="+m[2], "COSMOS_INSECURE_SKIP_VERIFY=", "COSMOS_CA_FILE="+caFile)
	mout, err := metrics.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 1, exit.ExitCode(), "a failure, not a usage error: %s", mout)
	assert.NotContains(t, string(mout), "certificate", "the certificate is trusted")
	assert.Contains(t, string(mout), `container "cdb-demo-gone"`)
	assert.Contains(t, string(mout), "not found")
}
