package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/duroxide-go/cdb"
)

// `cdb instances` pages through the instances newest first. The provider's
// management API lists ids (all of them, or those of one status) and
// describes one instance at a time; it has no server-side filter by name or
// age and no paging. So the listing is read as ids, the status filter is
// applied to them, and only the page's candidates are read one by one,
// at most -scan of them, where the name and age filters are applied.

// instanceLister is the part of the provider's management API the listing
// uses.
type instanceLister interface {
	ListInstances(ctx context.Context) ([]string, error)
	ListInstancesByStatus(ctx context.Context, status cdb.InstanceStatus) ([]string, error)
	GetInstanceInfo(ctx context.Context, instance string) (cdb.InstanceInfo, error)
}

// instanceQuery is one page of `cdb instances`.
type instanceQuery struct {
	statuses             statusList
	name                 namePattern
	olderThan, newerThan age
	limit, scan          int
	after                string    // the last instance of the previous page
	now                  time.Time // what the ages are measured from
}

// readsEachCandidate reports whether a filter needs each candidate's info
// to decide, so that the number of matches is not known without reading
// them all.
func (q instanceQuery) readsEachCandidate() bool {
	return q.name != "" || q.olderThan > 0 || q.newerThan > 0 || q.statuses.parkedOnly()
}

// errCursorGone is the error of an -after instance that is not listed.
var errCursorGone = errors.New("not listed (deleted since?): start again without -after")

// page lists one page: the ids newest first, the status filter on them, the
// cursor, the -older-than start found by bisection, then the candidates read
// one by one until the page is full, -scan were read or -newer-than ends
// the listing.
func (q instanceQuery) page(ctx context.Context, l instanceLister) (instancesJSON, error) {
	ids, err := l.ListInstances(ctx)
	if err != nil {
		return instancesJSON{}, err
	}
	rest := ids
	if q.after != "" {
		at := indexOf(ids, q.after)
		if at < 0 {
			return instancesJSON{}, fmt.Errorf("-after: instance %q %w", q.after, errCursorGone)
		}
		rest = ids[at+1:]
	}
	keep, err := q.statuses.members(ctx, l)
	if err != nil {
		return instancesJSON{}, err
	}
	list := instancesJSON{Instances: []instanceJSON{}}
	if !q.readsEachCandidate() {
		total := len(filterIDs(ids, keep))
		list.Total = &total
	}
	candidates := filterIDs(rest, keep)
	if q.olderThan > 0 {
		first, err := firstCreatedBefore(ctx, l, candidates, q.now.Add(-time.Duration(q.olderThan)))
		if err != nil {
			return instancesJSON{}, err
		}
		candidates = candidates[first:]
	}
	return list, q.fill(ctx, l, candidates, &list)
}

// fill reads candidates into the page until it is full, -scan were read,
// or -newer-than ends the listing; list.Next is set when there may be more.
func (q instanceQuery) fill(ctx context.Context, l instanceLister, candidates []string, list *instancesJSON) error {
	newest := q.now.Add(-time.Duration(q.newerThan))
	for i, id := range candidates {
		if list.Scanned == q.scan || len(list.Instances) == q.limit {
			next := candidates[i-1]
			list.Next = &next
			return nil
		}
		info, err := l.GetInstanceInfo(ctx, id)
		list.Scanned++
		if errors.Is(err, cdb.ErrInstanceNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return fmt.Errorf("instance %q: %w", id, err)
		}
		if q.newerThan > 0 && createdAt(info).Before(newest) {
			return nil // newest first: every later one is older still
		}
		if q.name.matches(info.OrchestrationName) && (!q.statuses.parkedOnly() || info.Parked != nil) {
			list.Instances = append(list.Instances, instanceToJSON(info))
		}
	}
	return nil
}

func createdAt(info cdb.InstanceInfo) time.Time { return time.UnixMilli(int64(info.CreatedAt)) }

// firstCreatedBefore finds, by bisection over ids (newest first), the
// first one created before cutoff: a few reads however many are newer. An
// id deleted meanwhile is stepped over.
func firstCreatedBefore(ctx context.Context, l instanceLister, ids []string, cutoff time.Time) (int, error) {
	lo, hi := 0, len(ids)
	for lo < hi {
		mid := lo + (hi-lo)/2
		at, info, found, err := firstLive(ctx, l, ids, mid, hi)
		if err != nil {
			return 0, err
		}
		switch {
		case !found:
			hi = mid // none left in [mid, hi): the scan steps over them
		case createdAt(info).Before(cutoff):
			hi = mid
		default:
			lo = at + 1
		}
	}
	return lo, nil
}

// firstLive reads ids[from:to] until one still exists.
func firstLive(ctx context.Context, l instanceLister, ids []string, from, to int) (int, cdb.InstanceInfo, bool, error) {
	for i := from; i < to; i++ {
		info, err := l.GetInstanceInfo(ctx, ids[i])
		if errors.Is(err, cdb.ErrInstanceNotFound) {
			continue
		}
		if err != nil {
			return 0, cdb.InstanceInfo{}, false, fmt.Errorf("instance %q: %w", ids[i], err)
		}
		return i, info, true, nil
	}
	return 0, cdb.InstanceInfo{}, false, nil
}

func indexOf(ids []string, id string) int {
	for i, v := range ids {
		if v == id {
			return i
		}
	}
	return -1
}

// filterIDs keeps the ids in keep, in order; a nil keep keeps every one.
func filterIDs(ids []string, keep map[string]bool) []string {
	if keep == nil {
		return ids
	}
	var out []string
	for _, id := range ids {
		if keep[id] {
			out = append(out, id)
		}
	}
	return out
}

// listedStatus is an instance's status in the listing, marked when it is
// parked.
func listedStatus(i instanceJSON) string {
	if i.Parked != nil {
		return i.Status + " (parked)"
	}
	return i.Status
}

// statusList is the -status flag: a comma-separated list of the statuses an
// instance's current execution can have, in any case.
type statusList []cdb.InstanceStatus

// statusParked is -status Parked: running instances a runtime parked
// (cdb.ParkedInfo). The store lists no such status, so it is the Running
// listing with each candidate read, as -name is.
const statusParked cdb.InstanceStatus = "Parked"

// knownStatuses are the statuses the provider stores, and Parked.
func knownStatuses() []string {
	return []string{string(cdb.StatusRunning), string(cdb.StatusCompleted), string(cdb.StatusFailed), string(cdb.StatusContinuedAsNew), string(statusParked)}
}

// parkedOnly says -status asks for parked instances.
func (s statusList) parkedOnly() bool { return len(s) == 1 && s[0] == statusParked }

func (s *statusList) String() string {
	names := make([]string, len(*s))
	for i, st := range *s {
		names[i] = string(st)
	}
	return strings.Join(names, ",")
}

func (s *statusList) Set(v string) error {
	*s = nil
	for _, part := range strings.Split(v, ",") {
		st, err := parseStatus(strings.TrimSpace(part))
		if err != nil {
			return err
		}
		*s = append(*s, st)
	}
	if len(*s) > 1 && slices.Contains(*s, statusParked) {
		return errors.New(`"Parked" stands alone: a parked instance is Running`)
	}
	return nil
}

func parseStatus(v string) (cdb.InstanceStatus, error) {
	for _, known := range knownStatuses() {
		if strings.EqualFold(v, known) {
			return cdb.InstanceStatus(known), nil
		}
	}
	return "", fmt.Errorf("%q is not one of %s", v, strings.Join(knownStatuses(), ", "))
}

// members is the set of instances with one of the statuses, one listing
// per status; nil when no status was asked for.
func (s statusList) members(ctx context.Context, l instanceLister) (map[string]bool, error) {
	if len(s) == 0 {
		return nil, nil
	}
	keep := map[string]bool{}
	for _, st := range s {
		if st == statusParked {
			st = cdb.StatusRunning // each candidate is read for its park (fill)
		}
		ids, err := l.ListInstancesByStatus(ctx, st)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			keep[id] = true
		}
	}
	return keep, nil
}

// namePattern is the -name flag: an orchestration name, or a pattern with
// * and ? (path.Match's syntax).
type namePattern string

func (n *namePattern) String() string { return string(*n) }

func (n *namePattern) Set(v string) error {
	if _, err := path.Match(v, ""); err != nil {
		return fmt.Errorf("%q is not a name pattern: %w", v, err)
	}
	*n = namePattern(v)
	return nil
}

func (n namePattern) matches(name string) bool {
	if n == "" {
		return true
	}
	ok, _ := path.Match(string(n), name)
	return ok
}

// age is -older-than and -newer-than: a positive duration.
type age time.Duration

func (a *age) String() string { return time.Duration(*a).String() }

func (a *age) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return errors.New("not a duration (e.g. 90s, 30m, 24h)")
	}
	if d <= 0 {
		return fmt.Errorf("must be positive, got %s", d)
	}
	*a = age(d)
	return nil
}

func runInstances(ctx context.Context, argv []string, stdout, stderr io.Writer) error {
	q := instanceQuery{}
	limit, scan := positiveInt(100), positiveInt(1000)
	var format outputFormat
	return operatorCommand("instances", func(fs *flag.FlagSet) {
		fs.Var(&q.statuses, "status", "only instances whose current execution has one of these `statuses`, comma-separated: "+
			strings.Join(knownStatuses(), ", ")+" (any case)")
		fs.Var(&q.name, "name", "only instances of this orchestration `name`; * and ? match any characters and one (ProcessOrder, Process*)")
		fs.Var(&q.olderThan, "older-than", "only instances created more than this `duration` ago (e.g. 1h)")
		fs.Var(&q.newerThan, "newer-than", "only instances created less than this `duration` ago (e.g. 15m)")
		fs.Var(&limit, "limit", "at most `n` instances on the page")
		fs.StringVar(&q.after, "after", "", "the page after this `instance` (the previous page's last; text and json print it as next)")
		fs.Var(&scan, "scan", "read at most `n` instances for the page (-name and the ages are checked on each one read)")
		registerOutput(fs, &format)
	}, 0, func(ctx context.Context, p *cdb.CosmosProvider, endpoint string, _ []string, out io.Writer) error {
		q.limit, q.scan, q.now = int(limit), int(scan), time.Now()
		list, err := q.page(ctx, p)
		if err != nil {
			return describe(endpoint, err)
		}
		if format == formatJSON {
			return writeJSON(out, list)
		}
		return printInstances(out, list)
	})(ctx, argv, stdout, stderr)
}

func printInstances(out io.Writer, list instancesJSON) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tSTATUS\tORCHESTRATION\tEXECUTION\tCREATED")
	for _, i := range list.Instances {
		fmt.Fprintf(tw, "%s\t%s\t%s@%s\t%d\t%s\n", i.InstanceID, listedStatus(i), i.OrchestrationName, i.OrchestrationVersion,
			i.CurrentExecutionID, formatTime(i.CreatedAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(list.Instances) == 0 {
		fmt.Fprintln(out, "(no instances)")
	}
	switch {
	case list.Next != nil && list.Total != nil:
		fmt.Fprintf(out, "(%d of %d; next page: -after %s)\n", len(list.Instances), *list.Total, *list.Next)
	case list.Next != nil:
		fmt.Fprintf(out, "(%d read; next page: -after %s)\n", list.Scanned, *list.Next)
	}
	return nil
}
