package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
)

// Own writes (stamp-honoured): with process leases a queue item may name
// its writer, and the other processes leave it to the writer for a poll
// interval. The stamp is advice, and advice that outlives its author (a
// writer that never fetches that item: a client, a process whose filter
// or share does not cover it, an instance it cannot lock) makes every such
// item wait a poll interval for nobody. So a writer must take most of what
// it stamps: the transports see each stamped item created and who consumes
// it, and at the end a writer that left more than half of at least
// stampMinSample stamped items to others while it was up is a violation.
// (A busy writer leaves some to others after the grace; that is what the
// grace is for, and it stays well under half.)
const (
	stampMinSample = 12
	stampMaxShare  = 0.5
)

type stampKey struct{ pk, id string }

// stamps follows stamped queue items from creation to consumption.
type stamps struct {
	mu      sync.Mutex
	open    map[stampKey]string // stamped item → writer
	own     map[string]int      // writer → stamped items it consumed itself
	others  map[string]int      // writer → stamped items others consumed while it was up
	crashed func(node string) bool
}

func newStamps(crashed func(string) bool) *stamps {
	return &stamps{open: map[stampKey]string{}, own: map[string]int{}, others: map[string]int{}, crashed: crashed}
}

// observe reads one request of node that the account carried out.
func (s *stamps) observe(node string, req *http.Request, body []byte, status int) {
	pk := partitionKeyOf(req)
	documentWrites(req, body, status, func(doc json.RawMessage) { s.created(pk, doc) },
		func(id string) { s.consumed(node, stampKey{pk, id}) })
}

func (s *stamps) created(pk string, body json.RawMessage) {
	var doc struct {
		ID     string `json:"id"`
		Type   string `json:"type"`
		Writer string `json:"writer"`
	}
	if json.Unmarshal(body, &doc) != nil || doc.Writer == "" || doc.Type != "msg" && doc.Type != "work" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open[stampKey{pk, doc.ID}] = doc.Writer
}

func (s *stamps) consumed(node string, key stampKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	writer, ok := s.open[key]
	if !ok {
		return
	}
	delete(s.open, key)
	switch {
	case writer == node:
		s.own[writer]++
	case !s.crashed(writer):
		s.others[writer]++
	}
}

// check reports the writers whose stamps others mostly honoured for
// nothing.
func (s *stamps) check(v *violations, describe func(node string) string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range writersLeavingMost(s.own, s.others, stampMinSample, stampMaxShare) {
		total := s.own[w] + s.others[w]
		v.add(invStampHonoured, "", fmt.Sprintf("%s stamped %d queue items as its own and took %d itself: %d waited up to a poll interval for a writer that did not take them (%s)",
			w, total, s.own[w], s.others[w], describe(w)))
	}
}

// writersLeavingMost are the writers (sorted) that left more than maxShare
// of at least minSample of their items to others: own and others count
// the items each writer took itself and those others took.
func writersLeavingMost(own, others map[string]int, minSample int, maxShare float64) []string {
	var writers []string
	for w, n := range others {
		if total := own[w] + n; total >= minSample && float64(n) > maxShare*float64(total) {
			writers = append(writers, w)
		}
	}
	sort.Strings(writers)
	return writers
}

// summary is the per-writer counts, for the report.
func (s *stamps) summary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string]int{}
	for w, n := range s.own {
		m[w+".own"] = n
	}
	for w, n := range s.others {
		m[w+".others"] = n
	}
	return counts(m)
}

// docIDOf is the document id a single-document request names: the last
// segment of its path.
func docIDOf(req *http.Request) string {
	segments := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	return segments[len(segments)-1]
}

// partitionKeyOf is the request's partition key value ("" when none).
func partitionKeyOf(req *http.Request) string {
	var values []string
	if json.Unmarshal([]byte(req.Header.Get("x-ms-documentdb-partitionkey")), &values) != nil || len(values) == 0 {
		return ""
	}
	return values[0]
}
