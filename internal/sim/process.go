package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/duroxide-go/cdb"
	rt "github.com/duroxide-go/cdb/durable"
)

// The two-process scenario: `cdb emulator` serves the in-memory account on
// loopback, worker processes (`cdb sim-node`) run the runtime against it,
// and the harness SIGKILLs one of them now and then, preferably while an
// outbox is being delivered, and starts a replacement. The workers write
// what their activities and acks did to record files, which the harness
// reads at the end to check the same invariants as in process.

// NodeOptions configure one worker process (`cdb sim-node`).
type NodeOptions struct {
	Endpoint string
	Key      string
	ID       string
	Seed     int64
	// RecordPath is the file the node appends its records to (JSON lines).
	RecordPath string
	Logger     *slog.Logger
}

// RunNode runs one node against an account until ctx ends, then shuts it
// down gracefully.
func RunNode(ctx context.Context, o NodeOptions) error {
	f, err := os.OpenFile(o.RecordPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("sim: node %s: open record file: %w", o.ID, err)
	}
	defer f.Close()
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cfg := Config{Seed: o.Seed}.withDefaults()
	viol := &violations{}
	rec := newRecorder(viol)
	rec.sink = fileSink(f)
	e := &env{cfg: cfg, endpoint: o.Endpoint, key: o.Key, transport: http.DefaultTransport, rec: rec, stats: newStats(), logger: logger,
		clock: &simClock{}}
	settings := drawSettings(rand.New(rand.NewSource(o.Seed)), cfg, e.clock, role{full: true}, o.ID)
	var n *node
	for n == nil {
		n, err = startNode(ctx, e, o.ID, 0, settings, false)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("sim: node %s: %w", o.ID, ctx.Err())
			}
			logger.Warn("node start failed; retrying", "error", err)
			time.Sleep(100 * time.Millisecond)
		}
	}
	logger.Info("node running", "node", o.ID, "settings", settings.describeSelf)
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n.shutdown(stopCtx)
	return nil
}

// recordLine is one line of a node's record file.
type recordLine struct {
	Kind   string          `json:"kind"` // start, end, commit
	Record json.RawMessage `json:"record"`
}

// fileSink appends each record as a line, in one write, so a SIGKILL
// leaves whole lines.
func fileSink(f *os.File) func(kind string, v any) {
	var mu sync.Mutex
	return func(kind string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			return
		}
		line, err := json.Marshal(recordLine{Kind: kind, Record: b})
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		_, _ = f.Write(append(line, '\n'))
	}
}

// ProcessConfig configures the two-process scenario.
type ProcessConfig struct {
	// Config is the workload (Seed, Scenarios or Duration, Features,
	// timeouts); its Faults are not used: the faults here are the kills.
	Config
	// Binary is the cdb command (built from ./cmd/cdb).
	Binary string
	// Workers is how many worker processes run at once (default 2).
	Workers int
	// Latency is the emulator's latency per request (default 3ms), so a
	// large fan-out's outbox takes a while to deliver.
	Latency time.Duration
	// KillEvery is the mean time between two kills (default 4s).
	KillEvery time.Duration
	// Dir receives the record files and the processes' logs (default: a
	// new temporary directory).
	Dir string
}

// RunProcesses runs the two-process scenario and returns its report.
func RunProcesses(ctx context.Context, pc ProcessConfig) (Report, error) {
	cfg := pc.Config.withDefaults()
	if pc.Workers <= 0 {
		pc.Workers = 2
	}
	if pc.Latency <= 0 {
		pc.Latency = 3 * time.Millisecond
	}
	if pc.KillEvery <= 0 {
		pc.KillEvery = 4 * time.Second
	}
	if pc.Dir == "" {
		dir, err := os.MkdirTemp("", "cdb-sim-")
		if err != nil {
			return Report{}, fmt.Errorf("sim: temp dir: %w", err)
		}
		pc.Dir = dir
	}
	cfg.Faults = Faults{Crashes: true, CrashEvery: pc.KillEvery}
	began := time.Now()
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}

	emu, endpoint, key, err := startEmulator(ctx, pc.Binary, pc.Latency, filepath.Join(pc.Dir, "emulator.log"))
	if err != nil {
		return Report{}, err
	}
	defer stopProcess(emu)

	observer, err := cdb.NewProvider(ctx, cdb.Config{Endpoint: endpoint, Key: key, ReconcileInterval: time.Hour,
		AbandonedDeletionAge: time.Hour, Logger: logger.With("node", "observer")})
	if err != nil {
		return Report{}, fmt.Errorf("sim: observer: %w", err)
	}
	defer observer.Close()

	viol := &violations{}
	stats := newStats()
	e := &env{cfg: cfg, rec: newRecorder(viol), stats: stats, logger: logger, progress: newProgress(cfg.Stall, cfg.HardCap), clock: &simClock{}}
	// The workers' transports are in other processes: the history
	// documents and queue items in the container show their progress.
	probeCtx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	go probeProgress(probeCtx, observer.Container(), e.progress)
	rng := rand.New(rand.NewSource(cfg.Seed))
	pool := &processPool{bin: pc.Binary, dir: pc.Dir, endpoint: endpoint, key: key, stats: stats, logger: logger,
		observer: observer, rng: rand.New(rand.NewSource(rng.Int63())), procs: make([]*workerProcess, pc.Workers)}
	for slot := range pool.procs {
		if err := pool.start(slot); err != nil {
			pool.stopAll()
			return Report{}, err
		}
	}
	client := rt.NewClient(observer)
	h := &harness{env: e, caller: func() *rt.Client { return client }, crash: pool.killOne, observer: client, viol: viol,
		expect: map[string]*expectation{}}

	h.runWorkload(ctx, rng)
	h.waitTerminal(ctx, instancesOf(h.expectations()))
	h.checkLeftovers(ctx, observer.Container())
	pool.stopAll()
	execs, crashed, err := replayRecords(pool.recordFiles(), pool.killedIDs(), viol, stats)
	if err != nil {
		return Report{}, err
	}
	stats.Activities = len(execs)
	h.checkOutcomes(ctx, sendsTwice(execs))
	h.checkHistories(ctx)
	checkSessions(viol, execs, crashed, nil)
	failing, pending := split(viol.all(), cfg.Pending)
	return Report{Seed: cfg.Seed, Elapsed: time.Since(began), Stats: stats, Violations: failing, Pending: pending,
		Replay: fmt.Sprintf("make soak-processes SOAK_SEED=%d SOAK_SECONDS=%d", cfg.Seed, int(cfg.Duration.Seconds()))}, nil
}

// startEmulator runs `cdb emulator` and reads the endpoint and key it
// prints.
func startEmulator(ctx context.Context, bin string, latency time.Duration, logPath string) (*exec.Cmd, string, string, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, "", "", fmt.Errorf("sim: emulator log: %w", err)
	}
	cmd := exec.Command(bin, "emulator", "-latency", latency.String(), "-ranges", "2")
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", "", fmt.Errorf("sim: emulator stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, "", "", fmt.Errorf("sim: start emulator: %w", err)
	}
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	var endpoint, key string
	for _, field := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(field, "endpoint="); ok {
			endpoint = v
		}
		if v, ok := strings.CutPrefix(field, "key="); ok {
			key = v
		}
	}
	if endpoint == "" || key == "" {
		stopProcess(cmd)
		return nil, "", "", fmt.Errorf("sim: the emulator printed no endpoint and key (see %s)", logPath)
	}
	return cmd, endpoint, key, nil
}

// stopProcess asks a process to stop and waits a little, then kills it.
func stopProcess(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// workerProcess is one `cdb sim-node`.
type workerProcess struct {
	id     string
	cmd    *exec.Cmd
	record string
}

// processPool keeps Workers worker processes running.
type processPool struct {
	bin, dir, endpoint, key string
	stats                   *Stats
	logger                  *slog.Logger
	observer                *cdb.CosmosProvider

	mu      sync.Mutex
	rng     *rand.Rand
	procs   []*workerProcess
	next    int
	records []string
	killed  []string
}

func (p *processPool) start(slot int) error {
	p.mu.Lock()
	p.next++
	id := fmt.Sprintf("p%d", p.next)
	seed := p.rng.Int63()
	p.mu.Unlock()
	record := filepath.Join(p.dir, id+".jsonl")
	logFile, err := os.Create(filepath.Join(p.dir, id+".log"))
	if err != nil {
		return fmt.Errorf("sim: worker log: %w", err)
	}
	cmd := exec.Command(p.bin, "sim-node", "-endpoint", p.endpoint, "-id", id, "-record", record, "-seed", fmt.Sprint(seed))
	// The key goes in the environment, not on the command line, where
	// every user of the machine could read it.
	cmd.Env = append(os.Environ(), cdb.EnvKey+"="+p.key)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("sim: start worker %s: %w", id, err)
	}
	p.stats.count(&p.stats.Nodes, 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.procs[slot] = &workerProcess{id: id, cmd: cmd, record: record}
	p.records = append(p.records, record)
	return nil
}

// killOne SIGKILLs a random worker, preferably while an outbox is waiting
// for delivery (a large fan-out's relay), and starts its replacement.
func (p *processPool) killOne(ctx context.Context) {
	where := "sigkill"
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if p.outboxInFlight(ctx) {
			where = "sigkill-outbox-in-flight"
			break
		}
		sleepCtx(ctx, 10*time.Millisecond)
	}
	if ctx.Err() != nil {
		return
	}
	p.mu.Lock()
	slot := p.rng.Intn(len(p.procs))
	w := p.procs[slot]
	p.mu.Unlock()
	_ = w.cmd.Process.Kill()
	_ = w.cmd.Wait()
	p.stats.crash(where)
	p.logger.Info("worker killed", "worker", w.id, "where", where)
	p.mu.Lock()
	p.killed = append(p.killed, w.id)
	p.mu.Unlock()
	if err := p.start(slot); err != nil {
		p.logger.Error("replacement worker did not start", "error", err)
	}
}

// probeProgress marks progress whenever the container holds more history
// documents, or fewer queue items, than the last time it looked.
func probeProgress(ctx context.Context, container *cdb.ContainerClient, p *progress) {
	turns, queued := -1, -1
	for sleepCtx(ctx, time.Second) {
		h, errH := container.QueryItems(ctx, "SELECT c.id FROM c WHERE c.type = 'hist'", nil, nil)
		q, errQ := container.QueryItems(ctx, "SELECT c.id FROM c WHERE c.type IN ('msg', 'work')", nil, nil)
		if errH != nil || errQ != nil {
			continue
		}
		if turns >= 0 && (len(h.Items) > turns || len(q.Items) < queued) {
			p.mark()
		}
		turns, queued = len(h.Items), len(q.Items)
	}
}

func (p *processPool) outboxInFlight(ctx context.Context) bool {
	res, err := p.observer.Container().QueryItems(ctx, "SELECT c.id FROM c WHERE c.type = 'outbox'", nil, nil)
	return err == nil && len(res.Items) > 0
}

func (p *processPool) stopAll() {
	p.mu.Lock()
	procs := append([]*workerProcess(nil), p.procs...)
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range procs {
		if w == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			stopProcess(w.cmd)
		}()
	}
	wg.Wait()
}

func (p *processPool) recordFiles() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.records...)
}

func (p *processPool) killedIDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.killed...)
}

// replayRecords reads the workers' record files and feeds them, in time
// order, through a recorder, which checks them as it would have in process.
func replayRecords(paths, killed []string, viol *violations, stats *Stats) ([]execution, map[string]bool, error) {
	type timed struct {
		at     time.Time
		kind   string
		exec   execution
		commit commitRecord
	}
	var all []timed
	for _, path := range paths {
		lines, err := readRecordLines(path)
		if err != nil {
			return nil, nil, err
		}
		for _, l := range lines {
			t := timed{kind: l.Kind}
			switch l.Kind {
			case "start", "end":
				if json.Unmarshal(l.Record, &t.exec) != nil {
					continue
				}
				t.at = t.exec.Start
				if l.Kind == "end" {
					t.at = t.exec.End
				}
			case "commit":
				if json.Unmarshal(l.Record, &t.commit) != nil {
					continue
				}
				t.at = t.commit.At
			}
			all = append(all, t)
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].at.Before(all[j].at) })
	rec := newRecorder(viol)
	rec.stats = stats
	for _, id := range killed {
		rec.nodeCrashed(id)
	}
	for _, t := range all {
		switch t.kind {
		case "start":
			rec.started(t.exec)
		case "end":
			rec.ended(t.exec)
		case "commit":
			rec.committed(t.commit)
		}
	}
	execs, crashed := rec.snapshot()
	return execs, crashed, nil
}

func readRecordLines(path string) ([]recordLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("sim: read records: %w", err)
	}
	defer f.Close()
	var out []recordLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l recordLine
		if json.Unmarshal(sc.Bytes(), &l) == nil {
			out = append(out, l) // a line cut by a SIGKILL does not decode and is skipped
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("sim: read records %s: %w", path, err)
	}
	return out, nil
}
