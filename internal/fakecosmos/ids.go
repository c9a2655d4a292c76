package fakecosmos

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"sync/atomic"
)

// idSource hands out resource ids (_rid), etags and activity ids.
type idSource struct {
	next atomic.Uint64 // monotonic; makes every rid and etag distinct
	salt uint16        // differs between Servers, so their etags differ too
}

func newIDSource() idSource {
	b := randomBytes(2)
	return idSource{salt: binary.BigEndian.Uint16(b)}
}

// etag is a quoted opaque string shaped like the service's
// ("\"0000abcd-0000-0000-0000-5f1e2d3c0000\""); the counter makes it new on
// every write, so a stale etag never matches again.
func (g *idSource) etag(unixSeconds int64) string {
	n := g.next.Add(1)
	return fmt.Sprintf("\"%08x-%04x-0000-0000-%08x0000\"", uint32(n), g.salt, uint32(unixSeconds))
}

// activityID is a random GUID, as the service puts in x-ms-activity-id.
func (g *idSource) activityID() string {
	b := randomBytes(16)
	b[6] = (b[6] & 0x0f) | 0x40
	b[8] = (b[8] & 0x3f) | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// The service's rids nest: a database's is 4 bytes, a container's extends
// it by 4 and a document's by 8 more, all base64 with '/' written as '-' so
// that a rid is a valid path segment.

func (g *idSource) databaseRID() (string, []byte) {
	raw := binary.BigEndian.AppendUint32(nil, uint32(g.next.Add(1)))
	return encodeRID(raw), raw
}

func (g *idSource) containerRID(parent []byte) (string, []byte) {
	raw := binary.BigEndian.AppendUint32(append([]byte(nil), parent...), uint32(g.next.Add(1))|0x80000000)
	return encodeRID(raw), raw
}

func (g *idSource) documentRID(parent []byte) string {
	raw := binary.BigEndian.AppendUint64(append([]byte(nil), parent...), g.next.Add(1))
	return encodeRID(raw)
}

func encodeRID(raw []byte) string {
	return strings.ReplaceAll(base64.StdEncoding.EncodeToString(raw), "/", "-")
}
