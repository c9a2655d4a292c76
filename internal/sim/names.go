package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"unicode/utf8"
)

// Derived names stay bounded (bounded-names, rule R18). Cosmos DB refuses a
// document id over 255 characters, and a name built from another name grows
// with every generation unless something bounds it: a chained turn's lock
// token is made from its ack's, an eagerly locked item's from the commit's,
// a completion's id from its worker lock's, a turn's message and staged
// part ids from its ack's. A hold of chained turns that lasts hundreds of
// turns (the long sequences) shows whether they stay bounded. The
// transports show every request, body included, to this check before
// anything else happens to it (whatever fault it then meets, and whether
// or not the account accepts it): every document id it names (in its path,
// a batch operation, a written document) must be at most
// maxDocumentIDLength characters, and every lock token (a lockToken or
// lastAck field, a patch that sets /lockToken, a query's @token) at most
// maxTokenLength. The workload's instance ids are short and the provider
// encodes long ones (R6), so an id over the limit is one the provider
// derived.
const (
	maxDocumentIDLength = 255
	maxTokenLength      = 128
)

// invBoundedNames: every document id and lock token on the wire is
// bounded.
const invBoundedNames = "bounded-names"

// boundedNames checks the names on the wire and keeps the longest seen.
type boundedNames struct {
	mu            sync.Mutex
	longestID     int
	longestToken  int
	longIDs       int // ids over the limit, in all
	longTokens    int // tokens over the limit, in all
	reported      map[string]bool
	reportedCount int
	violations    []Violation
	requests      int
	outgrew       map[string]bool // partitions a name over the id limit was sent for
}

// boundedNamesReportLimit bounds the violations reported per run: one
// defect makes thousands of long names.
const boundedNamesReportLimit = 6

func newBoundedNames() *boundedNames {
	return &boundedNames{reported: map[string]bool{}, outgrew: map[string]bool{}}
}

// outgrown says a name over the id limit (255) was sent for partition pk:
// a token that long makes ids over it.
func (b *boundedNames) outgrown(pk string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.outgrew[pk]
}

// hook is a node transport's hook for the requests it is given.
func (b *boundedNames) hook(node string) func(req *http.Request, body []byte) {
	return func(req *http.Request, body []byte) { b.observe(node, req, body) }
}

// Where names sit in a request body: the text before the value, and what
// the value is.
var namePatterns = []struct {
	before []byte
	token  bool
	field  string
}{
	{[]byte(`"id":"`), false, "id"},
	{[]byte(`"lockToken":"`), true, "lockToken"},
	{[]byte(`"lastAck":"`), true, "lastAck"},
	{[]byte(`"path":"/lockToken","value":"`), true, "patch /lockToken"},
	{[]byte(`"name":"@token","value":"`), true, "query @token"},
}

// observe checks one request of node.
func (b *boundedNames) observe(node string, req *http.Request, body []byte) {
	op := operationOf(req)
	pk := partitionKeyOf(req)
	var found []nameSeen
	if id, ok := pathDocumentID(req); ok {
		found = append(found, nameSeen{field: "path id", value: id})
	}
	for _, p := range namePatterns {
		for rest := body; ; {
			i := bytes.Index(rest, p.before)
			if i < 0 {
				break
			}
			rest = rest[i+len(p.before):]
			raw, n := jsonStringBody(rest)
			rest = rest[n:]
			found = append(found, nameSeen{field: p.field, token: p.token, raw: raw})
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.requests++
	for _, f := range found {
		length := f.length()
		limit := maxDocumentIDLength
		if f.token {
			limit = maxTokenLength
			b.longestToken = max(b.longestToken, length)
		} else {
			b.longestID = max(b.longestID, length)
		}
		if length > maxDocumentIDLength {
			b.outgrew[pk] = true
		}
		if length <= limit {
			continue
		}
		if f.token {
			b.longTokens++
		} else {
			b.longIDs++
		}
		what := "document id"
		if f.token {
			what = "lock token"
		}
		key := node + "|" + what + "|" + f.field
		if b.reported[key] || b.reportedCount >= boundedNamesReportLimit {
			continue
		}
		b.reported[key] = true
		b.reportedCount++
		b.violations = append(b.violations, Violation{Invariant: invBoundedNames, Instance: pk,
			Detail: fmt.Sprintf("%s sent a %s (%s) of %d characters, over %d, in a %s of partition %q: %s", node, what, f.field, length, limit, op, pk, clipName(f.text()))})
	}
}

// nameSeen is one name a request carries: its value, or its raw JSON
// string body (escapes undecoded).
type nameSeen struct {
	field string
	token bool
	value string
	raw   []byte
}

func (n nameSeen) text() string {
	if n.raw == nil {
		return n.value
	}
	var s string
	if json.Unmarshal(append(append([]byte{'"'}, n.raw...), '"'), &s) != nil {
		return string(n.raw)
	}
	return s
}

// length counts characters, as Cosmos DB does; a raw JSON string is decoded
// only when it might be over a limit (its escapes make it look longer).
func (n nameSeen) length() int {
	if n.raw != nil && len(n.raw) <= maxTokenLength {
		return utf8.RuneCount(n.raw)
	}
	return utf8.RuneCountInString(n.text())
}

// jsonStringBody reads a JSON string's body up to its closing quote (not
// included) and says how many bytes it and the quote take.
func jsonStringBody(b []byte) ([]byte, int) {
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return b[:i], i + 1
		}
	}
	return b, len(b)
}

// pathDocumentID is the document id a request's path names (…/docs/{id}).
func pathDocumentID(req *http.Request) (string, bool) {
	segments := strings.Split(strings.Trim(req.URL.EscapedPath(), "/"), "/")
	n := len(segments)
	if n < 2 || segments[n-2] != "docs" {
		return "", false
	}
	id, err := url.PathUnescape(segments[n-1])
	if err != nil {
		return segments[n-1], true
	}
	return id, true
}

func clipName(s string) string {
	if len(s) > 96 {
		return s[:48] + "…" + s[len(s)-40:]
	}
	return s
}

// check reports the first long names (a few per run: one defect makes
// many).
func (b *boundedNames) check(v *violations) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, x := range b.violations {
		v.add(x.Invariant, x.Instance, x.Detail)
	}
}

// summary is the counts, for the report.
func (b *boundedNames) summary() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Sprintf("requests=%d longest-id=%d longest-token=%d ids-over-%d=%d tokens-over-%d=%d",
		b.requests, b.longestID, b.longestToken, maxDocumentIDLength, b.longIDs, maxTokenLength, b.longTokens)
}
