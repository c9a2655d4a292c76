package fakecosmos

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/http"
	"sort"
	"strconv"
)

// epkSpaceEnd bounds the effective-partition-key space. Keys are written as
// 8 hex digits, so keeping them below 0xFF000000 keeps every key sorting
// below "FF", the space's end on the wire.
const epkSpaceEnd uint64 = 0xFF000000

// pkRange is a physical partition: the effective keys [lo, hi).
type pkRange struct {
	id      string
	lo, hi  uint64
	parents []string
	etag    string
	ts      int64
	lsn     int64 // committed writes; children start from their parent's
}

func formatEPK(v uint64) string { return fmt.Sprintf("%08X", v) }

func (r *pkRange) minInclusive() string {
	if r.lo == 0 {
		return ""
	}
	return formatEPK(r.lo)
}

func (r *pkRange) maxExclusive() string {
	if r.hi >= epkSpaceEnd {
		return "FF"
	}
	return formatEPK(r.hi)
}

// effectivePartitionKey hashes a partition key value's canonical form. Any
// well-distributed stable hash serves (the service uses MurmurHash3); this
// is SHA-256's first 32 bits scaled into [0, epkSpaceEnd).
func effectivePartitionKey(canonical string) uint64 {
	sum := sha256.Sum256([]byte(canonical))
	return uint64(binary.BigEndian.Uint32(sum[:4])) * epkSpaceEnd >> 32
}

// initialRanges splits the space evenly into n ranges with ids "0".."n-1".
func initialRanges(n int, ts int64, etag func(int64) string) []*pkRange {
	ranges := make([]*pkRange, n)
	for i := range ranges {
		ranges[i] = &pkRange{
			id:      strconv.Itoa(i),
			lo:      epkSpaceEnd * uint64(i) / uint64(n),
			hi:      epkSpaceEnd * uint64(i+1) / uint64(n),
			parents: []string{},
			etag:    etag(ts),
			ts:      ts,
		}
	}
	return ranges
}

// rangeByID finds a current range; nil if it never existed or was split.
// Call with c.mu held.
func (c *container) rangeByID(id string) *pkRange {
	for _, r := range c.ranges {
		if r.id == id {
			return r
		}
	}
	return nil
}

// rangeFor is the range holding an effective key. Call with c.mu held.
func (c *container) rangeFor(epk uint64) *pkRange {
	i := sort.Search(len(c.ranges), func(i int) bool { return c.ranges[i].hi > epk })
	if i == len(c.ranges) {
		return c.ranges[len(c.ranges)-1]
	}
	return c.ranges[i]
}

func (c *container) rangeResource(r *pkRange, index int) map[string]any {
	return map[string]any{
		"_rid":               c.rid,
		"id":                 r.id,
		"_etag":              r.etag,
		"minInclusive":       r.minInclusive(),
		"maxExclusive":       r.maxExclusive(),
		"ridPrefix":          index,
		"_self":              c.selfLink() + "pkranges/" + r.id + "/",
		"throughputFraction": float64(r.hi-r.lo) / float64(epkSpaceEnd),
		"status":             "online",
		"parents":            r.parents,
		"_ts":                r.ts,
	}
}

func (s *Server) readPartitionKeyRanges(q *request) (*result, error) {
	c, err := s.lookupContainer(q.route)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	list := make([]map[string]any, len(c.ranges))
	for i, r := range c.ranges {
		list[i] = c.rangeResource(r, i)
	}
	body := encodeJSON(map[string]any{"_rid": c.rid, "PartitionKeyRanges": list, "_count": len(list)})
	h := http.Header{}
	h.Set(hdrItemCount, strconv.Itoa(len(list)))
	return &result{status: http.StatusOK, body: body, etag: c.etag, charge: chargeMetadata, header: h}, nil
}

// SplitPartitionKeyRanges splits every range of the container in two, as
// the service does when a partition grows. The children get new ids and
// list their parent in `parents`; requests naming a parent's id then answer
// 410 with substatus 1002 until the client re-reads the ranges.
func (s *Server) SplitPartitionKeyRanges(database, containerID string) error {
	c, err := s.lookupContainer(route{database: database, container: containerID})
	if err != nil {
		return fmt.Errorf("fakecosmos: split %s/%s: %w", database, containerID, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := s.now().Unix()
	next := make([]*pkRange, 0, 2*len(c.ranges))
	for _, r := range c.ranges {
		if r.hi-r.lo < 2 {
			return fmt.Errorf("fakecosmos: split %s/%s: range %s is too small to split", database, containerID, r.id)
		}
	}
	for _, r := range c.ranges {
		mid := r.lo + (r.hi-r.lo)/2
		parents := append(append([]string{}, r.parents...), r.id)
		for _, bounds := range [][2]uint64{{r.lo, mid}, {mid, r.hi}} {
			next = append(next, &pkRange{
				id: strconv.Itoa(c.nextRangeID), lo: bounds[0], hi: bounds[1],
				parents: parents, etag: s.ids.etag(ts), ts: ts, lsn: r.lsn,
			})
			c.nextRangeID++
		}
	}
	c.ranges = next
	return nil
}
