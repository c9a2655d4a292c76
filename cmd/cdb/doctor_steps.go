package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/duroxide-go/cdb"
)

// The steps of `cdb doctor` (doctor.go) that check the account, the
// container and the queries; doctor_batch.go has the batch and PATCH
// steps, doctor_runtime.go the provider and the bench.

// providerConfig is a provider on the throw-away container through the
// doctor's client.
func (d *doctor) providerConfig(skipBootstrap bool) cdb.Config {
	cfg := d.cfg
	cfg.SkipBootstrap = skipBootstrap
	cfg.ShortPolling = true
	return cfg
}

// connect reads the account (GET /) with the configured credential: the
// provider needs Session consistency or stronger, and one write region.
func (d *doctor) connect(ctx context.Context) stepOutcome {
	var account cdb.AccountProperties
	err := d.firstAnswer(ctx, func(ctx context.Context) error {
		var err error
		account, err = d.client.ReadAccount(ctx)
		return err
	})
	const fixEndpoint = "set " + cdb.EnvEndpoint + " (or -endpoint) to the account's URI, https://<account>.documents.azure.com:443/"
	var ce *cdb.CosmosError
	switch {
	case cdb.HasStatus(err, http.StatusUnauthorized) && d.cfg.ClientOptions.Credential != nil:
		refused := failed(err, "read the account", "", "")
		refused.meaning, refused.action = "the account refused the Entra ID token", refusedTokenAction
		return refused
	case cdb.HasStatus(err, http.StatusUnauthorized):
		return failed(err, "read the account", "", "")
	case errors.As(err, &ce) && ce.StatusCode != 0 && ce.ActivityID == "":
		return failed(err, "read the account", "the endpoint answered without Cosmos DB's headers: it is some other web server", fixEndpoint)
	case err != nil:
		return failed(err, "read the account", "", "")
	case len(account.WritableLocations) == 0 && len(account.ReadableLocations) == 0:
		return failed(nil, "the endpoint's answer describes no database account", "it is not a Cosmos DB account endpoint", fixEndpoint)
	}
	d.account = &account
	level := account.ConsistencyPolicy.DefaultConsistencyLevel
	detail := fmt.Sprintf("account %q: default consistency %s, write regions [%s], read regions [%s], signed with %s",
		account.ID, level, regionNames(account.WritableLocations), regionNames(account.ReadableLocations), signedWithWhat(d.cfg))
	switch {
	case strings.EqualFold(level, "Eventual"), strings.EqualFold(level, "ConsistentPrefix"):
		return failed(nil, detail, "NewProvider refuses an account whose default consistency is "+level+": its locks need to read their own writes",
			"set the account's default consistency to Session (portal: Default consistency; or az cosmosdb update --default-consistency-level Session)")
	case account.EnableMultipleWriteLocations:
		return failed(nil, detail+", multi-region writes on", "NewProvider refuses multi-region writes: its locks hold only within one write region",
			"use an account with a single write region (multi-region writes off)")
	}
	return passed("%s", detail)
}

func regionNames(regions []cdb.AccountRegion) string {
	names := make([]string, len(regions))
	for i, r := range regions {
		names[i] = r.Name
	}
	return strings.Join(names, ", ")
}

// bootstrap opens a provider on the throw-away container the way an
// application does: NewProvider reads the database and the container
// first, creates what is missing, and waits until the new container
// serves (a real account answers 404/1003 for a moment after creating it).
func (d *doctor) bootstrap(ctx context.Context) stepOutcome {
	_, err := d.client.ReadDatabase(ctx, d.cfg.Database)
	switch {
	case err == nil:
	case cdb.IsNotFound(err):
		d.createdDB = true
	default:
		return failed(err, fmt.Sprintf("read database %q", d.cfg.Database), "", "")
	}
	mark := d.attempts.mark()
	start := time.Now()
	d.mayExist = true
	p, err := cdb.NewProvider(ctx, d.providerConfig(false))
	if cdb.HasStatus(err, http.StatusForbidden) {
		d.mayExist, d.metadataRefused = false, true
		missing := ""
		if d.createdDB {
			d.createdDB, d.databaseMissing = false, true
			missing = fmt.Sprintf(" (database %q is missing too)", d.cfg.Database)
		}
		return skipped("this credential may not create databases or containers%s: the account answered 403 "+
			"(an Entra ID data-plane role never may; disableKeyBasedMetadataWriteAccess refuses keys too), "+
			"so the steps that write in a throw-away container are skipped and your container is only read", missing)
	}
	if err != nil {
		return failed(err, "NewProvider", "", "")
	}
	_ = p.Close()
	warming := 0
	for _, a := range d.attempts.since(mark) {
		if a.status == http.StatusNotFound && a.substatus == cdb.SubStatusOwnerResourceNotFound {
			warming++
		}
	}
	db := "existed"
	if d.createdDB {
		db = "was missing: created (and kept: your provider uses it)"
	}
	return passed("database %q %s; NewProvider created container %q and saw it serve after %s (%d answers 404/1003 meanwhile)",
		d.cfg.Database, db, d.cfg.Container, time.Since(start).Round(time.Millisecond), warming)
}

// checkContainer reads the container back and opens a provider on it
// without bootstrapping, which checks it as NewProvider checks an
// application's existing container.
func (d *doctor) checkContainer(ctx context.Context) stepOutcome {
	props, err := d.container.Read(ctx)
	if err != nil {
		return failed(err, "read the container", "", "")
	}
	d.containerProps = &props
	shown := describeContainer(props)
	p, err := cdb.NewProvider(ctx, d.providerConfig(true))
	var mismatch *cdb.ContainerMismatchError
	if errors.As(err, &mismatch) {
		return failed(err, shown, "the service stored the provider's container definition differently, so NewProvider refuses it",
			"report it with this line; the definition is ProviderContainerProperties, shown for az and Bicep in docs/real-account.md")
	}
	if err != nil {
		return failed(err, shown, "", "")
	}
	_ = p.Close()
	return passed("%s: NewProvider accepts it", shown)
}

// describeContainer is what the provider needs of a container, as the
// service returned it.
func describeContainer(props cdb.ContainerProperties) string {
	ttl := "unset"
	if props.DefaultTimeToLive != nil {
		ttl = fmt.Sprint(*props.DefaultTimeToLive)
	}
	var composites []string
	if props.IndexingPolicy != nil {
		for _, ci := range props.IndexingPolicy.CompositeIndexes {
			paths := make([]string, len(ci))
			for i, c := range ci {
				paths[i] = strings.TrimPrefix(c.Path, "/") + " " + c.Order
			}
			composites = append(composites, "("+strings.Join(paths, ", ")+")")
		}
	}
	return fmt.Sprintf("partition key %s (%s, version %d), defaultTtl %s, %s, composite indexes [%s]",
		strings.Join(props.PartitionKey.Paths, ","), props.PartitionKey.Kind, props.PartitionKey.Version, ttl,
		describeIndexing(props.IndexingPolicy), strings.Join(composites, " "))
}

// describeIndexing summarises an indexing policy: its mode and how many
// paths it includes and excludes. A policy the service did not return is
// its default, which indexes every path.
func describeIndexing(policy *cdb.IndexingPolicy) string {
	if policy == nil {
		return "indexing default (every path)"
	}
	return fmt.Sprintf("indexing %s (%d included, %d excluded paths)",
		firstOf(policy.IndexingMode, cdb.IndexingModeConsistent), len(policy.IncludedPaths), len(policy.ExcludedPaths))
}

// queueDoc is a document shaped like a queue item, for the queries the
// queues depend on.
type queueDoc struct {
	ID        string `json:"id"`
	PK        string `json:"pk"`
	Type      string `json:"type"`
	VisibleAt int64  `json:"visibleAt"`
	Seq       int64  `json:"seq"`
}

const (
	queueDocType  = "doctor"
	queueDocCount = 12
	queueDocTop   = 3
)

// seedQueueDocs writes the queue-shaped documents once, each in its own
// partition so that they spread over the ranges. Their visibleAt values
// repeat, so seq decides some of the order.
func (d *doctor) seedQueueDocs(ctx context.Context) ([]queueDoc, error) {
	if d.queueDocs != nil {
		return d.queueDocs, nil
	}
	docs := make([]queueDoc, queueDocCount)
	for i := range docs {
		docs[i] = queueDoc{
			ID: fmt.Sprintf("doctor-q-%02d", i), PK: fmt.Sprintf("doctor-q-%02d", i), Type: queueDocType,
			VisibleAt: 1000 + int64(i*5%6)*10, Seq: int64(i),
		}
		body, _ := json.Marshal(docs[i])
		if _, err := d.container.CreateItem(ctx, cdb.NewPartitionKeyString(docs[i].PK), body, nil); err != nil {
			return nil, fmt.Errorf("create %s: %w", docs[i].ID, err)
		}
	}
	d.queueDocs = docs
	return docs, nil
}

// orderedQueueQuery has the shape of the provider's candidate query: a
// parameterised TOP, filters, and ORDER BY the composite index.
const orderedQueueQuery = "SELECT TOP @top c.id, c.visibleAt, c.seq FROM c WHERE c.type = @type AND c.visibleAt <= @now " +
	"ORDER BY c.type ASC, c.visibleAt ASC, c.seq ASC"

func orderedQueueParams() []cdb.QueryParameter {
	return []cdb.QueryParameter{{Name: "@top", Value: queueDocTop}, {Name: "@type", Value: queueDocType}, {Name: "@now", Value: 1 << 40}}
}

// rangeQueries runs the queue query on every partition key range (the
// range header), as the provider's fetches do, and checks each range's
// answer against its documents: the TOP of them in index order.
func (d *doctor) rangeQueries(ctx context.Context) stepOutcome {
	const meaning = "the service does not serve the provider's queue query on a partition key range: fetches cannot find their work"
	if _, err := d.seedQueueDocs(ctx); err != nil {
		return failed(err, "seed the queue documents", "", "")
	}
	ordered, err := d.container.QueryItemsPerRange(ctx, orderedQueueQuery, orderedQueueParams(), nil)
	if err != nil {
		return failed(err, "ORDER BY and TOP per range", meaning, "")
	}
	all, err := d.container.QueryItemsPerRange(ctx, "SELECT c.id, c.visibleAt, c.seq FROM c WHERE c.type = @type",
		[]cdb.QueryParameter{{Name: "@type", Value: queueDocType}}, nil)
	if err != nil {
		return failed(err, "read the documents per range", "", "")
	}
	seen := 0
	for rangeID, res := range all {
		docs, err := decodeQueueDocs(res.Items)
		if err != nil {
			return failed(err, "decode range "+rangeID, "", "")
		}
		seen += len(docs)
		sortQueueDocs(docs)
		want := idsOf(docs[:min(queueDocTop, len(docs))])
		gotDocs, err := decodeQueueDocs(ordered[rangeID].Items)
		if err != nil {
			return failed(err, "decode range "+rangeID, "", "")
		}
		if got := idsOf(gotDocs); !slices.Equal(got, want) {
			return failed(nil, fmt.Sprintf("range %s answered %v for its TOP %d, not %v", rangeID, got, queueDocTop, want), meaning,
				"report it with this line: the provider relies on ORDER BY and TOP per range")
		}
	}
	if seen != queueDocCount {
		return failed(nil, fmt.Sprintf("the ranges held %d of the %d documents", seen, queueDocCount),
			"the partition key ranges do not cover the container: per-range queries miss items", "report it with this line")
	}
	return passed("%d range(s) each answered the TOP %d of its documents in (type, visibleAt, seq) order", len(all), queueDocTop)
}

func decodeQueueDocs(items []json.RawMessage) ([]queueDoc, error) {
	docs := make([]queueDoc, len(items))
	for i, it := range items {
		if err := json.Unmarshal(it, &docs[i]); err != nil {
			return nil, fmt.Errorf("decode %s: %w", it, err)
		}
	}
	return docs, nil
}

func sortQueueDocs(docs []queueDoc) {
	sort.Slice(docs, func(i, j int) bool {
		if docs[i].VisibleAt != docs[j].VisibleAt {
			return docs[i].VisibleAt < docs[j].VisibleAt
		}
		return docs[i].Seq < docs[j].Seq
	})
}

func idsOf(docs []queueDoc) []string {
	ids := make([]string, len(docs))
	for i, d := range docs {
		ids[i] = d.ID
	}
	return ids
}

// rangeAggregates runs COUNT, SUM and MAX per range, as the provider's
// metrics and its latest-execution lookup do, and combines the partial
// results (every page's) as it does.
func (d *doctor) rangeAggregates(ctx context.Context) stepOutcome {
	docs, err := d.seedQueueDocs(ctx)
	if err != nil {
		return failed(err, "seed the queue documents", "", "")
	}
	var wantCount, wantSum, wantMax float64
	for _, doc := range docs {
		wantCount++
		wantSum += float64(doc.Seq)
		wantMax = max(wantMax, float64(doc.VisibleAt))
	}
	params := []cdb.QueryParameter{{Name: "@type", Value: queueDocType}}
	checks := []struct {
		name, query string
		combine     func(a, b float64) float64
		want        float64
	}{
		{"COUNT", "SELECT VALUE COUNT(1) FROM c WHERE c.type = @type", func(a, b float64) float64 { return a + b }, wantCount},
		{"SUM", "SELECT VALUE SUM(c.seq) FROM c WHERE c.type = @type", func(a, b float64) float64 { return a + b }, wantSum},
		{"MAX", "SELECT VALUE MAX(c.visibleAt) FROM c WHERE c.type = @type", func(a, b float64) float64 { return max(a, b) }, wantMax},
	}
	var shown []string
	for _, c := range checks {
		perRange, err := d.container.QueryItemsPerRange(ctx, c.query, params, nil)
		if err != nil {
			return failed(err, c.name+" per range", "the service does not serve aggregates on a partition key range: metrics and queue depths fail", "")
		}
		got := 0.0
		for _, res := range perRange {
			for _, item := range res.Items {
				var v float64
				if json.Unmarshal(item, &v) == nil { // an empty range's MAX has no value
					got = c.combine(got, v)
				}
			}
		}
		if got != c.want {
			return failed(nil, fmt.Sprintf("%s per range combined to %v, not %v", c.name, got, c.want),
				"the service's partial aggregates per range do not add up: metrics would be wrong", "report it with this line")
		}
		shown = append(shown, fmt.Sprintf("%s %v", c.name, got))
	}
	return passed("%s over the ranges, as expected", strings.Join(shown, ", "))
}

// crossPartitionControl sends the ordered queue query without a range or
// a partition key. Cosmos DB's gateway refuses it (400/1004): it cannot
// merge an ORDER BY across partitions for a client that sends no query
// plan, which is why the provider sends such queries per range only. A
// server that answers it instead (one without query plans) has nothing to
// control; its answer must still be in order.
func (d *doctor) crossPartitionControl(ctx context.Context) stepOutcome {
	if _, err := d.seedQueueDocs(ctx); err != nil {
		return failed(err, "seed the queue documents", "", "")
	}
	res, err := d.container.QueryItems(ctx, orderedQueueQuery, orderedQueueParams(), nil)
	if cdb.HasStatus(err, http.StatusBadRequest) {
		_, sub, _ := cdb.StoreStatus(err)
		return passed("ORDER BY across partitions refused with 400/%d, as Cosmos DB does: the provider sends it per range only", sub)
	}
	if err != nil {
		return failed(err, "ORDER BY across partitions", "", "")
	}
	docs, err := decodeQueueDocs(res.Items)
	if err != nil {
		return failed(err, "decode the answer", "", "")
	}
	want := slices.Clone(docs)
	sortQueueDocs(want)
	if !slices.Equal(idsOf(docs), idsOf(want)) {
		return failed(nil, fmt.Sprintf("ORDER BY across partitions answered out of order: %v", idsOf(docs)),
			"the server accepts an ORDER BY it cannot serve and answers out of order", "report it with this line")
	}
	return d.lacks("the server answered ORDER BY across partitions itself, in order", "the gateway's refusal of ORDER BY across partitions (400/1004)")
}

// sessionTokenFormat is a write's session token: the partition key range
// id, then the simple form (an LSN) or the vector form (version, global
// LSN, and regional LSNs).
var sessionTokenFormat = regexp.MustCompile(`^([^:,]+):(-?\d+#\d+(?:#\d+=-?\d+)*|\d+)$`)

// sessionToken checks the session token a write returns and reads the
// write back with it, as the provider reads its own writes.
func (d *doctor) sessionToken(ctx context.Context) stepOutcome {
	const id = "doctor-session"
	pk := cdb.NewPartitionKeyString(id)
	created, err := d.container.CreateItem(ctx, pk, []byte(`{"id":"`+id+`","pk":"`+id+`"}`), nil)
	if err != nil {
		return failed(err, "create an item", "", "")
	}
	token := created.SessionToken
	if token == "" {
		return d.lacks("a write answered no session token", "session tokens")
	}
	m := sessionTokenFormat.FindStringSubmatch(token)
	if m == nil {
		return failed(nil, fmt.Sprintf("a write answered the session token %q", token),
			"the client cannot read this token format: reads would not see the provider's own writes", "report it with this line")
	}
	ranges, err := d.container.ReadPartitionKeyRanges(ctx, true)
	if err != nil {
		return failed(err, "read the partition key ranges", "", "")
	}
	if !slices.ContainsFunc(ranges, func(r cdb.PartitionKeyRange) bool { return r.ID == m[1] }) {
		return failed(nil, fmt.Sprintf("the session token %q names range %s, not one of the container's", token, m[1]),
			"the client keeps tokens per range: this one would never be sent", "report it with this line")
	}
	read, err := d.container.ReadItem(ctx, pk, id, &cdb.ItemOptions{SessionToken: token})
	if err != nil {
		return failed(err, "read the item with its session token", "", "")
	}
	return passed("a write answered %q (range %s of %d, LSN part %s); a read with it answered %d", token, m[1], len(ranges), m[2], read.StatusCode)
}

// ttlWait bounds how long an item with a 1 s time to live may stay
// readable: Cosmos DB hides it once its _ts, in whole seconds, is more
// than a second old.
const ttlWait = 6 * time.Second

// timeToLive writes an item with ttl 1 and waits until reads no longer
// see it: the provider's staged parts, markers and sequencers expire that
// way. Cosmos DB hides an expired item from reads at once, before its
// background purge.
func (d *doctor) timeToLive(ctx context.Context) stepOutcome {
	if d.containerProps != nil && d.containerProps.DefaultTimeToLive == nil {
		return d.lacks("the container came back without its defaultTtl", "time to live")
	}
	const id = "doctor-ttl"
	pk := cdb.NewPartitionKeyString(id)
	item := []byte(`{"id":"` + id + `","pk":"` + id + `","ttl":1}`)
	if _, err := d.container.CreateItem(ctx, pk, item, nil); err != nil {
		return failed(err, "create an item with ttl 1", "", "")
	}
	start := time.Now()
	for {
		_, err := d.container.ReadItem(ctx, pk, id, nil)
		if cdb.IsNotFound(err) {
			break
		}
		if err != nil {
			return failed(err, "read the item", "", "")
		}
		if time.Since(start) > ttlWait {
			return d.lacks(fmt.Sprintf("an item with ttl 1 s was still readable after %s", ttlWait),
				"time to live (the provider's staged parts, markers and sequencers expire by it)")
		}
		if err := sleepOrDone(ctx, 250*time.Millisecond); err != nil {
			return failed(err, "wait for the item to expire", "", "")
		}
	}
	gone := time.Since(start)
	again, err := d.container.CreateItem(ctx, pk, item, nil)
	recreated := fmt.Sprint(again.StatusCode)
	if cdb.IsConflict(err) {
		recreated = "409 (expired but not purged yet: the provider's sequencer retries this)"
	} else if err != nil {
		return failed(err, "create the expired item's id again", "", "")
	}
	return passed("an item with ttl 1 s was gone after %s; creating its id again answered %s", gone.Round(100*time.Millisecond), recreated)
}

// lacks reports a behaviour of Cosmos DB the target does not have. A
// local server (the npm server, say) may lack it: the step is skipped with
// the reason. An Azure account may not: Cosmos DB documents the behaviour
// and the provider relies on it, so there the step fails.
func (d *doctor) lacks(seen, behaviour string) stepOutcome {
	if !isAzureAccount(d.cfg.Endpoint) {
		return skipped("%s: this server lacks %s, which Cosmos DB has", seen, behaviour)
	}
	return failed(nil, seen, "this account lacks "+behaviour+", which Cosmos DB documents and the provider relies on",
		"report it with this line (status, substatus and activity id) at github.com/duroxide-go/cdb/issues")
}

// isAzureAccount reports whether endpoint is a Cosmos DB account in an
// Azure cloud, rather than a local server or emulator.
func isAzureAccount(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	host := strings.ToLower(u.Hostname())
	for _, suffix := range []string{".documents.azure.com", ".documents.azure.us", ".documents.azure.cn"} {
		if strings.HasSuffix(host, suffix) {
			return true
		}
	}
	return false
}

// cleanup removes the throw-away container, with a bounded context of its
// own so that it runs after an interrupt or the run's timeout too, and
// checks that it is gone.
func (d *doctor) cleanup(ctx context.Context) stepOutcome {
	if !d.mayExist {
		return skipped("nothing to remove: no container was created")
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), doctorCleanupTimeout)
	defer cancel()
	action := fmt.Sprintf("delete container %q of database %q yourself (portal, or az cosmosdb sql container delete)", d.cfg.Container, d.cfg.Database)
	if err := d.container.Delete(ctx); err != nil && !cdb.IsNotFound(err) {
		return failed(err, "remove the throw-away container", "the throw-away container is still there", action)
	}
	if _, err := d.container.Read(ctx); !cdb.IsNotFound(err) {
		return failed(err, "the throw-away container still reads after its deletion", "the throw-away container may still be there", action)
	}
	kept := ""
	if d.createdDB {
		kept = fmt.Sprintf("; database %q, which was missing, is kept for your provider", d.cfg.Database)
	}
	return passed("removed container %q%s", d.cfg.Container, kept)
}
