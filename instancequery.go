package cdb

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// A paged, filtered listing of instances, newest first. The filters run on
// the server; each partition key range gives its newest matches (ORDER BY
// and TOP are allowed within one range, refused across ranges by the
// gateway), and the client merges them. The continuation token is a
// position in the listing's order, not a Cosmos DB token, so it outlives
// range splits and merges.

// Bounds of InstanceQuery.PageSize.
const (
	DefaultInstancePageSize = 100
	MaxInstancePageSize     = 1000
)

// InstanceQuery selects one page of instances, newest first: by creation
// time, then by instance id, descending. Every filter given applies.
type InstanceQuery struct {
	// Statuses keeps the instances whose current execution has one of
	// these statuses (Running, Completed, Failed, ContinuedAsNew), and
	// the queued starts with Queued; none keeps every status, Queued too.
	Statuses []InstanceStatus
	// Parked keeps only the Running instances a runtime parked
	// (InstanceInfo.Parked).
	Parked bool
	// Name keeps the instances of this orchestration name or, when it ends
	// in '*', of the names that start with what comes before it; '*'
	// anywhere else is refused. Case-sensitive. A queued start's name is
	// on its start message, so it is matched on the page read.
	Name string
	// CreatedAfter and CreatedBefore, when set, keep the instances created
	// strictly after and strictly before them (the store keeps
	// milliseconds).
	CreatedAfter, CreatedBefore time.Time
	// EndedAfter, when set, keeps the instances whose current execution
	// ended Completed or Failed at or after it (the store keeps
	// milliseconds): what ended since a moment, as a watcher samples it.
	EndedAfter time.Time
	// PageSize is the most instances a page holds: 0 for
	// DefaultInstancePageSize, at most MaxInstancePageSize.
	PageSize int
	// ContinuationToken is the previous page's, "" for the first page. It
	// is a position in the listing's order, so the next page may change
	// the filters.
	ContinuationToken string
}

// InstancePage is one page of QueryInstances.
type InstancePage struct {
	// Instances are newest first, with Output left nil (GetInstanceInfo
	// reads it).
	Instances []InstanceInfo
	// ContinuationToken asks for the next page; "" on the last page. A page
	// before it may hold fewer than PageSize instances, even none (see
	// QueryInstances).
	ContinuationToken string
	// RequestCharge is what the page cost, in RU.
	RequestCharge float64
}

// QueryInstances reads one page of the instances q selects, newest first.
// Input it cannot take (a page size out of bounds, CreatedAfter after
// CreatedBefore, a status no instance is stored with, a '*' that does not
// end Name, a continuation token it did not give) is refused with
// ErrInvalidInput.
//
// A page costs one query per partition key range, `SELECT TOP PageSize+1
// ... ORDER BY c.createdAt DESC` with every filter in it, each reading the
// fields InstanceInfo needs of at most PageSize+1 instance documents; no
// named instance is read on its own (a queued start is: see below). Two
// checks add requests, rarely:
//   - when a range's answer ends inside a run of instances created in the
//     same millisecond and the page needs that millisecond, one query per
//     such range for every instance of that millisecond;
//   - when the page holds sub-orchestrations, one cross-partition filter
//     query for instance documents a deletion marked, usually empty; only
//     when it finds some, one point read per ancestor of each
//     sub-orchestration on the page.
//
// Queued starts (StatusQueued) are listed as GetInstanceInfo describes
// them, ordered by when their instance document was created: the query
// selects nameless instance documents too, and each one on the page costs
// one point read of the start message it records, which tells whether
// that start is still queued and names its orchestration. A nameless
// document that records no queued start (messages came to an id never
// started, or a turn consumed the start) is passed over.
//
// Instances being deleted are left out as GetInstanceInfo leaves them out:
// marked ones by the query, the others of a tree being deleted by those
// checks. A page may then hold fewer than PageSize instances, with a
// continuation token; so may one whose millisecond runs ended it, and the
// last page may be empty.
func (p *CosmosProvider) QueryInstances(ctx context.Context, q InstanceQuery) (InstancePage, error) {
	const op = "QueryInstances"
	l, err := newInstanceListing(op, q)
	if err != nil {
		return InstancePage{}, err
	}
	l.and(liveRetention, p.retainNowParam())
	r := &instancePageRead{p: p, l: l}
	page, err := r.page(ctx)
	if err != nil {
		return InstancePage{}, asOperation(op, err)
	}
	return page, nil
}

// instanceListFields are what a listing reads of an instance document:
// what InstanceInfo holds but the output, and the parent, for the deletion
// check.
const instanceListFields = "c.instance, c.pk, c.name, c.version, c.currentExec, c.status, c.createdAt, c.updatedAt, c.parent, c.parked, c.startMsg"

// storedStatuses are the statuses an instance document holds.
var storedStatuses = []InstanceStatus{StatusRunning, StatusCompleted, StatusFailed, StatusContinuedAsNew}

// namelessDoc selects the instance documents no ack named: queued starts
// among them, told apart by a point read (the store indexes no field that
// tells them).
const namelessDoc = "NOT IS_DEFINED(c.name)"

// instanceListing is a validated InstanceQuery.
type instanceListing struct {
	where  string // the filters, without the position
	params []QueryParameter
	size   int
	cursor *instanceCursor
	upper  *int64 // ms: the newest createdAt the page may hold
	// nameMatches is the Name filter, for the queued starts the query
	// cannot match by name.
	nameMatches func(string) bool
}

func newInstanceListing(op string, q InstanceQuery) (instanceListing, error) {
	l := instanceListing{
		where:  "c.type = @type AND NOT IS_DEFINED(c.deleting)",
		params: []QueryParameter{{Name: "@type", Value: docInstance}},
		size:   q.PageSize,
	}
	switch {
	case q.PageSize == 0:
		l.size = DefaultInstancePageSize
	case q.PageSize < 0 || q.PageSize > MaxInstancePageSize:
		return l, refuse(op, fmt.Sprintf("PageSize %d: want 0 (for %d) to %d", q.PageSize, DefaultInstancePageSize, MaxInstancePageSize), ErrInvalidInput)
	}
	if err := l.filterStatuses(op, q); err != nil {
		return l, err
	}
	if err := l.filterName(op, q.Name); err != nil {
		return l, err
	}
	if err := l.filterCreated(op, q); err != nil {
		return l, err
	}
	l.filterEnded(q.EndedAfter)
	return l, nil
}

func (l *instanceListing) and(cond string, params ...QueryParameter) {
	l.where += " AND " + cond
	l.params = append(l.params, params...)
}

func (l *instanceListing) filterStatuses(op string, q InstanceQuery) error {
	if len(q.Statuses) > 0 {
		var names []string
		var params []QueryParameter
		queued := false
		for i, s := range q.Statuses {
			if s == StatusQueued {
				queued = true
				continue
			}
			if !slices.Contains(storedStatuses, s) {
				return refuse(op, fmt.Sprintf("status %q: want one of Running, Completed, Failed, ContinuedAsNew, Queued", s), ErrInvalidInput)
			}
			names = append(names, fmt.Sprintf("@status%d", i))
			params = append(params, QueryParameter{Name: names[len(names)-1], Value: s})
		}
		l.and(statusCondition(names, queued), params...)
	}
	if q.Parked {
		l.and("IS_DEFINED(c.parked) AND c.status = @running", QueryParameter{Name: "@running", Value: StatusRunning})
	}
	return nil
}

// statusCondition keeps the stored statuses named by the parameters, and
// the nameless documents (the queued starts among them) when queued.
func statusCondition(names []string, queued bool) string {
	stored := "c.status IN (" + strings.Join(names, ", ") + ")"
	switch {
	case !queued:
		return stored
	case len(names) == 0:
		return namelessDoc
	}
	return "(" + stored + " OR " + namelessDoc + ")"
}

// filterName keeps the instances of the name, and the nameless documents,
// whose queued starts are matched by name once read (nameMatches).
func (l *instanceListing) filterName(op, name string) error {
	prefix, isPrefix := strings.CutSuffix(name, "*")
	switch {
	case strings.Contains(prefix, "*"):
		return refuse(op, fmt.Sprintf("Name %q: '*' may only end it", name), ErrInvalidInput)
	case isPrefix && prefix != "":
		l.and("(STARTSWITH(c.name, @prefix) OR "+namelessDoc+")", QueryParameter{Name: "@prefix", Value: prefix})
		l.nameMatches = func(n string) bool { return strings.HasPrefix(n, prefix) }
	case !isPrefix && name != "":
		l.and("(c.name = @name OR "+namelessDoc+")", QueryParameter{Name: "@name", Value: name})
		l.nameMatches = func(n string) bool { return n == name }
	}
	return nil
}

// filterCreated bounds createdAt by the query's times and its position.
func (l *instanceListing) filterCreated(op string, q InstanceQuery) error {
	after, before := q.CreatedAfter, q.CreatedBefore
	if !after.IsZero() && !before.IsZero() && after.After(before) {
		return refuse(op, fmt.Sprintf("CreatedAfter %s is after CreatedBefore %s",
			after.UTC().Format(time.RFC3339Nano), before.UTC().Format(time.RFC3339Nano)), ErrInvalidInput)
	}
	if !after.IsZero() {
		l.and("c.createdAt > @after", QueryParameter{Name: "@after", Value: after.UnixMilli()})
	}
	if !before.IsZero() {
		newest := ceilMilli(before) - 1
		l.upper = &newest
	}
	if q.ContinuationToken == "" {
		return nil
	}
	c, err := decodeInstanceCursor(q.ContinuationToken)
	if err != nil {
		return refuse(op, "", fmt.Errorf("ContinuationToken %w: %w", err, ErrInvalidInput))
	}
	l.cursor = &c
	if l.upper == nil || c.At < *l.upper {
		l.upper = &c.At
	}
	return nil
}

// filterEnded keeps the instances whose current execution ended Completed
// or Failed at or after after, when it is set.
func (l *instanceListing) filterEnded(after time.Time) {
	if after.IsZero() {
		return
	}
	l.and("c.completedAt >= @endedAfter AND (c.status = @endedCompleted OR c.status = @endedFailed)",
		QueryParameter{Name: "@endedAfter", Value: after.UnixMilli()},
		QueryParameter{Name: "@endedCompleted", Value: StatusCompleted}, QueryParameter{Name: "@endedFailed", Value: StatusFailed})
}

// ceilMilli is t in milliseconds, rounded up.
func ceilMilli(t time.Time) int64 {
	ms := t.UnixMilli()
	if time.UnixMilli(ms).Before(t) {
		ms++
	}
	return ms
}

// pageQuery is the query each range answers for a page: its newest
// matches, one more than the page holds, so that a range's answer says
// whether the range holds more.
func (l instanceListing) pageQuery() (string, []QueryParameter) {
	where, params := l.where, slices.Clone(l.params)
	if l.upper != nil {
		where += " AND c.createdAt <= @upper"
		params = append(params, QueryParameter{Name: "@upper", Value: *l.upper})
	}
	params = append(params, QueryParameter{Name: "@top", Value: l.size + 1})
	return "SELECT TOP @top " + instanceListFields + " FROM c WHERE " + where + " ORDER BY c.createdAt DESC", params
}

// tieQuery is every match created in the millisecond at.
func (l instanceListing) tieQuery(at int64) (string, []QueryParameter) {
	params := append(slices.Clone(l.params), QueryParameter{Name: "@at", Value: at})
	return "SELECT " + instanceListFields + " FROM c WHERE " + l.where + " AND c.createdAt = @at", params
}

// unread leaves out the rows an earlier page listed: those of the
// cursor's millisecond at or above its instance.
func (l instanceListing) unread(rows []*instanceDoc) []*instanceDoc {
	if l.cursor == nil || l.cursor.Instance == "" {
		return rows
	}
	var out []*instanceDoc
	for _, r := range rows {
		if r.CreatedAt != l.cursor.At || r.Instance < l.cursor.Instance {
			out = append(out, r)
		}
	}
	return out
}

// instanceCursor is where a page ended, in the listing's order
// (createdAt, instance), descending. The next page lists the rows created
// before At, and those created in At whose instance is below Instance;
// every row of At when Instance is "" (no instance id is empty).
type instanceCursor struct {
	Version  int    `json:"v"`
	At       int64  `json:"at"`
	Instance string `json:"i,omitempty"`
}

const instanceCursorVersion = 1

var errForeignCursor = errors.New("was not given by QueryInstances")

// malformedCursor is a token that does not decode. Its message leaves out
// the decoder's, which names byte offsets and Go types the caller never
// wrote; the decoder's error stays reachable with errors.As.
type malformedCursor struct{ err error }

func (e malformedCursor) Error() string { return "is malformed" }
func (e malformedCursor) Unwrap() error { return e.err }

func (c instanceCursor) encode() string {
	c.Version = instanceCursorVersion
	raw, _ := json.Marshal(c) // a struct of an int and a string always encodes
	return base64.RawURLEncoding.EncodeToString(raw)
}

func decodeInstanceCursor(token string) (instanceCursor, error) {
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return instanceCursor{}, malformedCursor{err}
	}
	var c struct {
		Version *int   `json:"v"`
		At      *int64 `json:"at"`
		I       string `json:"i"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return instanceCursor{}, malformedCursor{err}
	}
	if c.Version == nil || *c.Version != instanceCursorVersion || c.At == nil {
		return instanceCursor{}, errForeignCursor
	}
	return instanceCursor{At: *c.At, Instance: c.I}, nil
}

// rangeAnswer is one range's newest matches, newest first by createdAt (in
// no order within one millisecond); full when the range gave all it was
// asked for, so that it may hold more.
type rangeAnswer struct {
	rows []*instanceDoc
	full bool
}

// instancePageRead reads one page: the ranges' answers, the rare checks,
// and what they cost.
type instancePageRead struct {
	p      *CosmosProvider
	l      instanceListing
	charge float64
	// marked are the instances a deletion marked, nil until read.
	marked map[string]bool
	// ancestors are the instance documents read for the deletion check,
	// nil for one that does not exist.
	ancestors map[string]*instanceDoc
}

// page merges the ranges' answers. The rule that keeps it exact: a range
// whose answer is full was cut at its oldest row's millisecond, so it may
// hold more rows of that millisecond than it gave, and older ones. Let cut
// be the newest such millisecond over the full ranges: above cut every
// range's rows are all known, and are listed in (createdAt, instance)
// order, descending. When those do not fill the page, each full range cut
// at cut is asked for every row of that millisecond (readTies), so that
// millisecond is known whole too, and listed; nothing older is, as the
// ranges asked again may hold older rows than any answer shows. So a page
// never ends inside a millisecond it knows only in part, and the cursor
// can skip the rows listed by instance id, whatever order the server gave
// ties in.
func (r *instancePageRead) page(ctx context.Context) (InstancePage, error) {
	answers, err := r.readRanges(ctx)
	if err != nil {
		return InstancePage{}, err
	}
	cut, isCut := newestCut(answers)
	var rows []*instanceDoc
	for _, a := range answers {
		rows = append(rows, r.l.unread(a.rows)...)
	}
	if isCut {
		rows = slices.DeleteFunc(rows, func(d *instanceDoc) bool { return d.CreatedAt <= cut })
		if len(rows) < r.l.size {
			ties, err := r.readTies(ctx, answers, cut)
			if err != nil {
				return InstancePage{}, err
			}
			rows = append(rows, r.l.unread(ties)...)
		}
	}
	sort.Slice(rows, func(i, j int) bool { return newerRow(rows[i], rows[j]) })
	return r.fill(ctx, rows, isCut, cut)
}

func newerRow(a, b *instanceDoc) bool {
	if a.CreatedAt != b.CreatedAt {
		return a.CreatedAt > b.CreatedAt
	}
	return a.Instance > b.Instance
}

// newestCut is the newest millisecond at which a full range's answer ends.
func newestCut(answers map[string]rangeAnswer) (int64, bool) {
	var cut int64
	found := false
	for _, a := range answers {
		if a.full && (!found || a.rows[len(a.rows)-1].CreatedAt > cut) {
			cut, found = a.rows[len(a.rows)-1].CreatedAt, true
		}
	}
	return cut, found
}

// fill lists rows in order until the page is full, leaving out those a
// deletion hides, and places the cursor after the last row it passed.
func (r *instancePageRead) fill(ctx context.Context, rows []*instanceDoc, isCut bool, cut int64) (InstancePage, error) {
	page := InstancePage{Instances: []InstanceInfo{}}
	passed := 0
	for passed < len(rows) && len(page.Instances) < r.l.size {
		row := rows[passed]
		passed++
		info, listed, err := r.listed(ctx, row)
		if err != nil {
			return InstancePage{}, err
		}
		if listed {
			page.Instances = append(page.Instances, info)
		}
	}
	page.RequestCharge = r.charge
	if next, more := nextCursor(rows, passed, isCut, cut); more {
		page.ContinuationToken = next.encode()
	}
	return page, nil
}

// listed describes row as the page lists it; false when the page passes
// over it: a deletion hides it, or it is a nameless document recording no
// queued start of the name asked for.
func (r *instancePageRead) listed(ctx context.Context, row *instanceDoc) (InstanceInfo, bool, error) {
	info := instanceInfoOf(row)
	if !row.exists() {
		queued, err := r.queuedStart(ctx, row)
		if err != nil || queued == nil {
			return InstanceInfo{}, false, err
		}
		if r.l.nameMatches != nil && !r.l.nameMatches(queued.start.Orchestration) {
			return InstanceInfo{}, false, nil
		}
		info = queued.info()
		// Listed where the query ordered it: by its document's creation.
		info.CreatedAt, info.UpdatedAt = uint64(row.CreatedAt), uint64(row.UpdatedAt)
	}
	hidden, err := r.hiddenByDeletion(ctx, row)
	if err != nil || hidden {
		return InstanceInfo{}, false, err
	}
	return info, true, nil
}

// queuedStart reads the start a nameless row records: nil when it records
// none, or one no longer queued. One point read, from the session.
func (r *instancePageRead) queuedStart(ctx context.Context, row *instanceDoc) (*queuedStart, error) {
	if row.StartMsg == "" {
		return nil, nil
	}
	resp, err := r.p.container.ReadItem(ctx, NewPartitionKeyString(row.PK), row.StartMsg, nil)
	r.charge += resp.RequestCharge
	if IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return decodeQueuedStart(row.Instance, row.StartMsg, resp.Value)
}

// nextCursor is where the page after the first passed rows starts; false
// when nothing is left. Every row of a millisecond rows holds is known
// (page), so the cursor takes the last row's whole millisecond unless the
// next row shares it.
func nextCursor(rows []*instanceDoc, passed int, isCut bool, cut int64) (instanceCursor, bool) {
	switch {
	case passed == len(rows) && !isCut:
		return instanceCursor{}, false // every range gave all it holds
	case passed == 0:
		return instanceCursor{At: cut - 1}, true // the cut millisecond was all listed before
	case passed < len(rows) && rows[passed].CreatedAt == rows[passed-1].CreatedAt:
		last := rows[passed-1]
		return instanceCursor{At: last.CreatedAt, Instance: last.Instance}, true
	default:
		return instanceCursor{At: rows[passed-1].CreatedAt - 1}, true
	}
}

// readRanges asks every range for its newest matches.
func (r *instancePageRead) readRanges(ctx context.Context) (map[string]rangeAnswer, error) {
	text, params := r.l.pageQuery()
	byRange, err := r.p.container.QueryItemsPerRange(ctx, text, params, &QueryOptions{MaxItemCount: int32(r.l.size + 1)})
	if err != nil {
		return nil, err
	}
	answers := make(map[string]rangeAnswer, len(byRange))
	for id, res := range byRange {
		r.charge += res.RequestCharge
		rows, err := decodeInstanceRows(res.Items)
		if err != nil {
			return nil, err
		}
		answers[id] = rangeAnswer{rows: rows, full: len(rows) > r.l.size}
	}
	return answers, nil
}

// readTies is every row created in the millisecond at: those the answers
// hold, and those of each full range cut at it, asked again (every range,
// when one of those is gone since).
func (r *instancePageRead) readTies(ctx context.Context, answers map[string]rangeAnswer, at int64) ([]*instanceDoc, error) {
	byInstance := map[string]*instanceDoc{}
	keep := func(rows []*instanceDoc) {
		for _, d := range rows {
			if d.CreatedAt == at {
				byInstance[d.Instance] = d
			}
		}
	}
	for _, a := range answers {
		keep(a.rows)
	}
	text, params := r.l.tieQuery(at)
	for id, a := range answers {
		if !a.full || a.rows[len(a.rows)-1].CreatedAt != at {
			continue
		}
		res, err := r.p.container.QueryItems(ctx, text, params, &QueryOptions{PartitionKeyRangeID: id, MaxItemCount: -1})
		if isGoneRangeError(err) {
			rows, err := r.readTiesEverywhere(ctx, text, params)
			keep(rows)
			return mapValues(byInstance), err
		}
		if err != nil {
			return nil, err
		}
		r.charge += res.RequestCharge
		rows, err := decodeInstanceRows(res.Items)
		if err != nil {
			return nil, err
		}
		keep(rows)
	}
	return mapValues(byInstance), nil
}

func (r *instancePageRead) readTiesEverywhere(ctx context.Context, text string, params []QueryParameter) ([]*instanceDoc, error) {
	byRange, err := r.p.container.QueryItemsPerRange(ctx, text, params, &QueryOptions{MaxItemCount: -1})
	if err != nil {
		return nil, err
	}
	var rows []*instanceDoc
	for _, res := range byRange {
		r.charge += res.RequestCharge
		decoded, err := decodeInstanceRows(res.Items)
		if err != nil {
			return nil, err
		}
		rows = append(rows, decoded...)
	}
	return rows, nil
}

func mapValues(m map[string]*instanceDoc) []*instanceDoc {
	out := make([]*instanceDoc, 0, len(m))
	for _, d := range m {
		out = append(out, d)
	}
	return out
}

func decodeInstanceRows(items []json.RawMessage) ([]*instanceDoc, error) {
	rows := make([]*instanceDoc, 0, len(items))
	for _, raw := range items {
		var d instanceDoc
		if err := json.Unmarshal(raw, &d); err != nil {
			return nil, fmt.Errorf("decode instance row: %w", err)
		}
		rows = append(rows, &d)
	}
	return rows, nil
}

// hiddenByDeletion says a deletion reaches row through an ancestor (a
// marked row itself is left out by the query). Only a sub-orchestration
// can be so hidden, and only while some instance is marked: the marked
// instances are listed once per page, and the ancestors read only when
// there are some.
func (r *instancePageRead) hiddenByDeletion(ctx context.Context, row *instanceDoc) (bool, error) {
	if row.Parent == nil {
		return false, nil
	}
	if r.marked == nil {
		if err := r.readMarked(ctx); err != nil {
			return false, err
		}
	}
	if len(r.marked) == 0 {
		return false, nil
	}
	seen := map[string]bool{row.Instance: true}
	for parent := row.Parent; parent != nil && !seen[*parent]; {
		if r.marked[*parent] {
			return true, nil
		}
		seen[*parent] = true
		doc, err := r.ancestor(ctx, *parent)
		if err != nil || doc == nil {
			return false, err
		}
		if doc.Deleting != "" {
			return true, nil // marked since the list was read
		}
		parent = doc.Parent
	}
	return false, nil
}

// readMarked lists the instances a deletion marked: a filter query across
// partitions, usually answered empty.
func (r *instancePageRead) readMarked(ctx context.Context) error {
	res, err := r.p.container.QueryItems(ctx, "SELECT VALUE c.instance FROM c WHERE c.type = @type AND IS_DEFINED(c.deleting)",
		[]QueryParameter{{Name: "@type", Value: docInstance}}, nil)
	if err != nil {
		return err
	}
	r.charge += res.RequestCharge
	r.marked = make(map[string]bool, len(res.Items))
	for _, raw := range res.Items {
		var id string
		if err := json.Unmarshal(raw, &id); err != nil {
			return fmt.Errorf("decode marked instance id: %w", err)
		}
		r.marked[id] = true
	}
	return nil
}

// ancestor reads an instance document once per page; nil when none.
func (r *instancePageRead) ancestor(ctx context.Context, instance string) (*instanceDoc, error) {
	if doc, ok := r.ancestors[instance]; ok {
		return doc, nil
	}
	resp, err := r.p.container.ReadItem(ctx, partitionKey(instance), instanceDocID, nil)
	r.charge += resp.RequestCharge
	doc, err := decodeInstanceRead(resp, err)
	if err != nil {
		return nil, err
	}
	if r.ancestors == nil {
		r.ancestors = map[string]*instanceDoc{}
	}
	r.ancestors[instance] = doc
	return doc, nil
}
