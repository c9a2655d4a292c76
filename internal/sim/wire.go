package sim

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"
)

// wireLog writes one line per request that mentions a text (an instance
// id) in its partition key, its body or its answer: what each node sent,
// what was injected, and what the account answered. It is how a violation
// the report names is traced to the requests that made it
// (-sim.wire=TEXT[,TEXT]).
type wireLog struct {
	mentions [][]byte
	mu       sync.Mutex
	out      io.Writer
}

// longString matches JSON string values long enough to clip.
var longString = regexp.MustCompile(`"[^"\\]{240,}"`)

func (w *wireLog) record(node, op string, req *http.Request, body []byte, fault string, resp *http.Response, respBody []byte, err error) {
	pk := req.Header.Get("x-ms-documentdb-partitionkey")
	if !w.mentioned([]byte(pk), body, respBody) {
		return
	}
	status := ""
	switch {
	case err != nil:
		status = "error: " + err.Error()
	case resp != nil:
		status = fmt.Sprintf("%d/%s", resp.StatusCode, resp.Header.Get("x-ms-substatus"))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Fprintf(w.out, "%s node=%s op=%s pk=%s fault=%q status=%s\n  req=%s\n  resp=%s\n",
		time.Now().Format("15:04:05.000000"), node, op, pk, fault, status, clipJSON(body), clipJSON(respBody))
}

// newWireLog journals to out the requests that mention any of the
// comma-separated texts.
func newWireLog(out io.Writer, mentions string) *wireLog {
	w := &wireLog{out: out}
	for _, m := range strings.Split(mentions, ",") {
		if m != "" {
			w.mentions = append(w.mentions, []byte(m))
		}
	}
	return w
}

func (w *wireLog) mentioned(parts ...[]byte) bool {
	for _, m := range w.mentions {
		for _, p := range parts {
			if bytes.Contains(p, m) {
				return true
			}
		}
	}
	return false
}

func clipJSON(b []byte) []byte {
	return longString.ReplaceAllFunc(b, func(s []byte) []byte { return append(append([]byte{}, s[:60]...), []byte(`…"`)...) })
}
