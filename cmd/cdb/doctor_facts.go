package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"math"
	"net"
	"net/http/httptrace"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/duroxide-go/cdb"
)

// What `cdb doctor` (doctor.go) reports of the account beside its steps:
// the consistency level and regions, the application's container, the
// latency of the doctor's own requests to the region that answered them,
// the clock offset and the HTTP protocol.

// doctorFacts are the report's facts, in -o json beside the steps.
type doctorFacts struct {
	Consistency  string   `json:"consistency"`   // the account's default level; "" when connect failed
	WriteRegions []string `json:"write_regions"` // the account's writable locations
	ReadRegions  []string `json:"read_regions"`  // and readable ones
	// AppContainer is the application's container as the app-container
	// step read it; null when it is missing or was not read.
	AppContainer *appContainerJSON `json:"app_container"`
	Latency      *latencyJSON      `json:"latency"` // null when no document request was answered
	// ClockOffsetMs is what the client adds to this machine's clock to read
	// the service's, from the responses' Date header: 0 within a second,
	// the header's resolution.
	ClockOffsetMs float64 `json:"clock_offset_ms"`
	HTTPProtocol  string  `json:"http_protocol"` // what the transport negotiated: HTTP/2.0 or HTTP/1.1
	// Throughput is what the throughput step read: of the application's
	// container, or, when it is missing, of the throw-away container
	// NewProvider created as it will create it (Container says which).
	// Null when unknown; ThroughputUnknown then says why.
	Throughput        *throughputJSON `json:"throughput"`
	ThroughputUnknown string          `json:"throughput_unknown,omitempty"`
	costJSON
}

// appContainerJSON is the application's container.
type appContainerJSON struct {
	Name         string `json:"name"`
	PartitionKey string `json:"partition_key"` // its paths, comma-separated
	Indexing     string `json:"indexing"`      // mode and path counts
	// DefaultTTL is null when time to live is off, -1 on with no default.
	DefaultTTL       *int     `json:"default_ttl"`
	CompositeIndexes []string `json:"composite_indexes"`
	UnindexedPaths   []string `json:"unindexed_paths"` // what NewProvider warns about
	// Throughput is the container's, or its database's shared; null when
	// it could not be read.
	Throughput *throughputJSON `json:"throughput"`
}

// throughputJSON is what a container may spend.
type throughputJSON struct {
	Mode        string `json:"mode"`          // serverless, manual or autoscale
	RUPerSecond int    `json:"ru_per_second"` // manual: provisioned; autoscale: the maximum; serverless: the container's ceiling
	Shared      bool   `json:"shared"`        // the database's throughput, shared by its containers
	Container   string `json:"container"`     // whose it is
}

// latencyJSON is the doctor's document requests' latency, per attempt,
// to the region that answered them.
type latencyJSON struct {
	Region   string  `json:"region"` // the account's name for it, or its host
	Host     string  `json:"host"`
	Requests int     `json:"requests"`
	P50Ms    float64 `json:"p50_ms"`
	P90Ms    float64 `json:"p90_ms"`
	P99Ms    float64 `json:"p99_ms"`
}

// addFacts fills in the report's facts from what the steps saw.
func (d *doctor) addFacts(r *doctorJSON) {
	r.WriteRegions, r.ReadRegions = []string{}, []string{}
	if d.account != nil {
		r.Consistency = d.account.ConsistencyPolicy.DefaultConsistencyLevel
		r.WriteRegions = regionList(d.account.WritableLocations)
		r.ReadRegions = regionList(d.account.ReadableLocations)
	}
	if d.appProps != nil {
		r.AppContainer = describeAppContainer(*d.appProps)
		if d.throughput != nil && d.throughput.Container == d.appProps.ID {
			r.AppContainer.Throughput = d.throughput
		}
	}
	r.Throughput, r.ThroughputUnknown = d.throughput, d.throughputUnknown
	r.costJSON = cost(d.benchCost, d.throughput)
	host, protocol := d.wire.mostUsed()
	r.HTTPProtocol = protocol
	r.Latency = latencyOf(d.attempts.documentDurations(), host, d.regionOf(host))
	r.ClockOffsetMs = milliseconds(d.client.ClockOffset())
}

func regionList(regions []cdb.AccountRegion) []string {
	names := make([]string, len(regions))
	for i, r := range regions {
		names[i] = r.Name
	}
	return names
}

func describeAppContainer(props cdb.ContainerProperties) *appContainerJSON {
	c := &appContainerJSON{
		Name: props.ID, PartitionKey: strings.Join(props.PartitionKey.Paths, ","), Indexing: describeIndexing(props.IndexingPolicy),
		DefaultTTL: props.DefaultTimeToLive, CompositeIndexes: []string{}, UnindexedPaths: cdb.UnindexedProviderPaths(props.IndexingPolicy),
	}
	if c.UnindexedPaths == nil {
		c.UnindexedPaths = []string{}
	}
	if props.IndexingPolicy != nil {
		for _, ci := range props.IndexingPolicy.CompositeIndexes {
			paths := make([]string, len(ci))
			for i, p := range ci {
				paths[i] = p.Path + " " + firstOf(p.Order, cdb.CompositeIndexAscending)
			}
			c.CompositeIndexes = append(c.CompositeIndexes, "("+strings.Join(paths, ", ")+")")
		}
	}
	return c
}

// regionOf names the account's region whose endpoint is host, or gives
// host itself (the account's global endpoint, or a local server's).
func (d *doctor) regionOf(host string) string {
	if d.account == nil || host == "" {
		return host
	}
	for _, r := range append(slices.Clone(d.account.WritableLocations), d.account.ReadableLocations...) {
		if u, err := url.Parse(r.Endpoint); err == nil && strings.EqualFold(hostWithPort(u), host) {
			return r.Name
		}
	}
	return host
}

// hostWithPort is u's host:port, the port filled in from its scheme, as
// the transport dials it.
func hostWithPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// latencyOf is the percentiles of durations, nil when there are none.
func latencyOf(durations []time.Duration, host, region string) *latencyJSON {
	if len(durations) == 0 {
		return nil
	}
	sort.Slice(durations, func(i, j int) bool { return durations[i] < durations[j] })
	return &latencyJSON{
		Region: region, Host: host, Requests: len(durations),
		P50Ms: milliseconds(percentile(durations, 50)), P90Ms: milliseconds(percentile(durations, 90)), P99Ms: milliseconds(percentile(durations, 99)),
	}
}

// percentile is the nearest-rank percentile p of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// documentDurations are the durations of the answered attempts on
// documents: the requests the provider makes all the time, without the
// seconds a container's creation or deletion takes.
func (l *attemptLog) documentDurations() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []time.Duration
	for _, a := range l.attempts {
		if a.resourceType == "docs" && a.status != 0 {
			out = append(out, a.duration)
		}
	}
	return out
}

// wireLog records where the doctor's requests went and over which
// protocol, through the connection events of net/http/httptrace: the
// client's records of its attempts do not say.
type wireLog struct {
	mu        sync.Mutex
	hosts     map[string]int // host:port → requests
	protocols map[string]int // protocol → requests
}

// trace is the hooks a step's context carries.
func (w *wireLog) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GetConn: func(hostPort string) { w.count(&w.hosts, hostPort) },
		GotConn: func(info httptrace.GotConnInfo) { w.count(&w.protocols, protocolOf(info.Conn)) },
	}
}

func (w *wireLog) count(m *map[string]int, key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if *m == nil {
		*m = map[string]int{}
	}
	(*m)[key]++
}

// protocolOf is the HTTP protocol spoken on conn: HTTP/2 where TLS
// negotiated it (ALPN h2), else HTTP/1.1, which is all the transport
// speaks without TLS.
func protocolOf(conn net.Conn) string {
	if tc, ok := conn.(*tls.Conn); ok && tc.ConnectionState().NegotiatedProtocol == "h2" {
		return "HTTP/2.0"
	}
	return "HTTP/1.1"
}

// mostUsed is the host and the protocol most requests used.
func (w *wireLog) mostUsed() (host, protocol string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return mostCounted(w.hosts), mostCounted(w.protocols)
}

func mostCounted(m map[string]int) string {
	best, bestN := "", 0
	for k, n := range m {
		if n > bestN || n == bestN && k < best {
			best, bestN = k, n
		}
	}
	return best
}

// printFacts prints the facts after the steps, a line each, going on in
// lines indented past their label.
func printFacts(out io.Writer, r doctorJSON) {
	width := terminalWidth(out)
	line := func(label, text string) {
		printWrapped(out, fmt.Sprintf("%-*s%s", factIndent, label, text), width, factIndent)
	}
	if r.Consistency != "" {
		line("account", fmt.Sprintf("consistency %s; writes in [%s]; reads in [%s]",
			r.Consistency, strings.Join(r.WriteRegions, ", "), strings.Join(r.ReadRegions, ", ")))
	}
	if c := r.AppContainer; c != nil {
		ttl := "off"
		if c.DefaultTTL != nil {
			ttl = fmt.Sprint(*c.DefaultTTL)
		}
		line("container", fmt.Sprintf("%q: partition key %s; %s; composite [%s]; defaultTtl %s",
			c.Name, c.PartitionKey, c.Indexing, strings.Join(c.CompositeIndexes, " "), ttl))
	}
	throughput, cost := throughputFacts(r)
	line("throughput", throughput)
	if cost != "" {
		line("cost", cost)
	}
	if l := r.Latency; l != nil {
		line("latency", fmt.Sprintf("to %s over %s: p50 %.1f ms, p90 %.1f ms, p99 %.1f ms (%d document requests)",
			l.Region, r.HTTPProtocol, l.P50Ms, l.P90Ms, l.P99Ms, l.Requests))
	}
	clock := "the service's clock reads as this machine's, within a second"
	if r.ClockOffsetMs != 0 {
		clock = fmt.Sprintf("the service's clock is %+.1f s from this machine's; the client corrects for it, but other hosts' clocks "+
			"must agree: set this machine's clock (NTP)", r.ClockOffsetMs/1000)
	}
	line("clock", clock)
}

// factIndent is where a fact's text starts, past its label.
const factIndent = 11
