package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/duroxide-go/cdb"
)

// `cdb instances` reads one page of the provider's instance listing
// (cdb.CosmosProvider.QueryInstances), newest first: -status, the ages and
// -name go to the store, which reads a page as one query per partition key
// range. A -name pattern the store cannot match (anything but a name, or a
// prefix ending in '*') goes to it as its literal prefix, and is matched
// here on the instances the page read: such a page may come back short of
// -limit, with a next.

// instancePager is the part of the provider the listing uses.
type instancePager interface {
	QueryInstances(ctx context.Context, q cdb.InstanceQuery) (cdb.InstancePage, error)
}

// instanceQuery is one page of `cdb instances`.
type instanceQuery struct {
	statuses             statusList
	name                 namePattern
	olderThan, newerThan age
	limit                int
	after                string    // the previous page's next
	now                  time.Time // what the ages are measured from
}

// providerQuery is the provider's query for the page.
func (q instanceQuery) providerQuery() (cdb.InstanceQuery, error) {
	if q.olderThan > 0 && q.newerThan > 0 && q.olderThan > q.newerThan {
		return cdb.InstanceQuery{}, usageError{msg: fmt.Sprintf("-older-than %s and -newer-than %s select nothing", time.Duration(q.olderThan), time.Duration(q.newerThan))}
	}
	pq := cdb.InstanceQuery{Name: q.name.stored(), PageSize: q.limit, ContinuationToken: q.after}
	if q.statuses.parkedOnly() {
		pq.Parked = true
	} else {
		pq.Statuses = q.statuses
	}
	if q.olderThan > 0 {
		pq.CreatedBefore = q.now.Add(-time.Duration(q.olderThan))
	}
	if q.newerThan > 0 {
		pq.CreatedAfter = q.now.Add(-time.Duration(q.newerThan))
	}
	return pq, nil
}

// page reads the page and matches -name on it where the store could not.
func (q instanceQuery) page(ctx context.Context, l instancePager) (instancesJSON, error) {
	pq, err := q.providerQuery()
	if err != nil {
		return instancesJSON{}, err
	}
	page, err := l.QueryInstances(ctx, pq)
	if q.after != "" && errors.Is(err, cdb.ErrInvalidInput) {
		return instancesJSON{}, usageError{msg: fmt.Sprintf("-after: %q is not a next page cdb instances printed (%v)", q.after, err), cause: err}
	}
	if err != nil {
		return instancesJSON{}, err
	}
	list := instancesJSON{Instances: []instanceJSON{}, Scanned: len(page.Instances)}
	for _, info := range page.Instances {
		if q.name.matchesRead(info.OrchestrationName) {
			list.Instances = append(list.Instances, instanceToJSON(info))
		}
	}
	if page.ContinuationToken != "" {
		list.Next = &page.ContinuationToken
	}
	return list, nil
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
// (cdb.ParkedInfo, cdb.InstanceQuery.Parked).
const statusParked cdb.InstanceStatus = "Parked"

// knownStatuses are the statuses the provider stores, Queued (a start
// not run yet) and Parked.
func knownStatuses() []string {
	return []string{string(cdb.StatusRunning), string(cdb.StatusCompleted), string(cdb.StatusFailed), string(cdb.StatusContinuedAsNew),
		string(cdb.StatusQueued), string(statusParked)}
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

// stored is what of the pattern the store matches: the pattern itself when
// it is a name or a prefix ending in '*'; else the literal prefix before its
// first wildcard, as a prefix, or nothing when it starts with one.
func (n namePattern) stored() string {
	s := string(n)
	wild := strings.IndexAny(s, `*?[\`)
	switch {
	case wild < 0, wild == len(s)-1 && s[wild] == '*':
		return s
	case wild == 0:
		return ""
	default:
		return s[:wild] + "*"
	}
}

// matchesRead says whether an instance the store listed matches the
// pattern: always when the store matched the whole pattern.
func (n namePattern) matchesRead(name string) bool {
	if n.stored() == string(n) {
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
	limit := pageLimit(cdb.DefaultInstancePageSize)
	var format outputFormat
	return operatorCommand("instances", func(fs *flag.FlagSet) {
		fs.Var(&q.statuses, "status", "only instances whose current execution has one of these `statuses`, comma-separated: "+
			strings.Join(knownStatuses(), ", ")+" (any case)")
		fs.Var(&q.name, "name", "only instances of this orchestration `name`; * and ? match any characters and one (ProcessOrder, Process*). "+
			"A name or a prefix ending in * is matched by the store; any other pattern by its literal prefix there and whole here, "+
			"so its page may come back short of -limit")
		fs.Var(&q.olderThan, "older-than", "only instances created more than this `duration` ago (e.g. 1h)")
		fs.Var(&q.newerThan, "newer-than", "only instances created less than this `duration` ago (e.g. 15m)")
		fs.Var(&limit, "limit", fmt.Sprintf("at most `n` instances on the page (1 to %d)", cdb.MaxInstancePageSize))
		fs.StringVar(&q.after, "after", "", "the page after the one that printed this `next` (text and json print it)")
		registerOutput(fs, &format)
	}, 0, func(ctx context.Context, p *cdb.CosmosProvider, endpoint string, _ []string, out io.Writer) error {
		q.limit, q.now = int(limit), p.ServiceTime()
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

// pageLimit is -limit: a page size the provider takes.
type pageLimit int

func (n *pageLimit) String() string { return strconv.Itoa(int(*n)) }

func (n *pageLimit) Set(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("not a number")
	}
	if v < 1 || v > cdb.MaxInstancePageSize {
		return fmt.Errorf("must be 1 to %d, got %d", cdb.MaxInstancePageSize, v)
	}
	*n = pageLimit(v)
	return nil
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
	if list.Next != nil {
		fmt.Fprintf(out, "(%d read; next page: -after %s)\n", list.Scanned, *list.Next)
	}
	return nil
}
