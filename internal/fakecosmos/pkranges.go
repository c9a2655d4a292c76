package fakecosmos

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/bits"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/duroxide-go/cdb/internal/epk"
)

// pkRange is a physical partition: the keys whose EPK position (see
// partitionKeyDef.epkPosition) lies in [lo, hi).
type pkRange struct {
	id      string
	lo, hi  uint64
	parents []string
	etag    string
	ts      int64
	lsn     int64 // committed writes; children start from their parent's
}

// epkPosition places a key in its container's EPK space: a uint64 that
// sorts against every range bound the fake writes (formatBound) as the
// key's EPK string sorts against that bound, which is how the SDKs pick a
// key's range.
//
//   - V2: the EPK's first 8 bytes. EPKs are below "4000...", so the space is
//     [0, 2^62) and a bound is the position as 16 hex digits padded with
//     zeros to a full 32-digit EPK.
//   - V1: the 32-bit hash, which leads the EPK (the value's encoding only
//     follows it), so the space is [0, 2^32) and a bound is the hash's
//     number encoding, as the service writes V1 bounds ("05C1D...").
func (d partitionKeyDef) epkPosition(pk pkValue) uint64 {
	if d.Version == 2 {
		return binary.BigEndian.Uint64(epk.V2(pk.value)[:8])
	}
	return uint64(epk.V1Hash(pk.value))
}

// epkSpaceEnd is where the container's EPK positions end (exclusive).
func (d partitionKeyDef) epkSpaceEnd() uint64 {
	if d.Version == 2 {
		return 1 << 62
	}
	return 1 << 32
}

// formatBound writes a range bound at a position: "" at the start, "FF" at
// the end, else an EPK prefix in the container's version.
func (d partitionKeyDef) formatBound(pos uint64) string {
	switch {
	case pos == 0:
		return ""
	case pos >= d.epkSpaceEnd():
		return "FF"
	case d.Version == 2:
		return fmt.Sprintf("%016X0000000000000000", pos)
	}
	return strings.ToUpper(hex.EncodeToString(epk.EncodeNumber(float64(pos))))
}

// epkPosition is the position of pk in the container. c.partitionKey is
// fixed at creation, so c.mu need not be held.
func (c *container) epkPosition(pk pkValue) uint64 {
	return c.partitionKey.epkPosition(pk)
}

func (c *container) minInclusive(r *pkRange) string { return c.partitionKey.formatBound(r.lo) }

func (c *container) maxExclusive(r *pkRange) string { return c.partitionKey.formatBound(r.hi) }

// initialRanges splits the space [0, end) evenly into n ranges with ids
// "0".."n-1", so keys spread over them as the hash spreads.
func initialRanges(n int, end uint64, ts int64, etag func(int64) string) []*pkRange {
	ranges := make([]*pkRange, n)
	for i := range ranges {
		ranges[i] = &pkRange{
			id:      strconv.Itoa(i),
			lo:      splitPoint(end, i, n),
			hi:      splitPoint(end, i+1, n),
			parents: []string{},
			etag:    etag(ts),
			ts:      ts,
		}
	}
	return ranges
}

// splitPoint is i/n of the way through [0, end), without overflowing.
func splitPoint(end uint64, i, n int) uint64 {
	hi, lo := bits.Mul64(end, uint64(i))
	q, _ := bits.Div64(hi, lo, uint64(n))
	return q
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

// rangeFor is the range holding an EPK position. Call with c.mu held.
func (c *container) rangeFor(pos uint64) *pkRange {
	i := sort.Search(len(c.ranges), func(i int) bool { return c.ranges[i].hi > pos })
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
		"minInclusive":       c.minInclusive(r),
		"maxExclusive":       c.maxExclusive(r),
		"ridPrefix":          index,
		"_self":              c.selfLink() + "pkranges/" + r.id + "/",
		"throughputFraction": float64(r.hi-r.lo) / float64(c.partitionKey.epkSpaceEnd()),
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
	listed := c.listedRanges()
	list := make([]map[string]any, len(listed))
	for i, r := range listed {
		list[i] = c.rangeResource(r, i)
	}
	body := encodeJSON(map[string]any{"_rid": c.rid, "PartitionKeyRanges": list, "_count": len(list)})
	h := http.Header{}
	h.Set(hdrItemCount, strconv.Itoa(len(list)))
	return &result{status: http.StatusOK, body: body, etag: c.etag, charge: chargeMetadata, header: h}, nil
}

// SplitOptions shows what a real split does for a while after it.
type SplitOptions struct {
	// ListParentsFor is how many reads of the range list still list the
	// split ranges beside their children, as the service may.
	ListParentsFor int
	// CompletingFor is how many requests aimed at a child's range id (or
	// at a key in it) answer 410 with substatus 1007 (completing split)
	// before the children serve.
	CompletingFor int
}

// SplitPartitionKeyRanges splits every range of the container in two, as
// the service does when a partition grows. The children get new ids and
// list their parent in `parents`; requests naming a parent's id then answer
// 410 with substatus 1002 until the client re-reads the ranges.
func (s *Server) SplitPartitionKeyRanges(database, containerID string) error {
	return s.SplitPartitionKeyRangesWith(database, containerID, SplitOptions{})
}

// SplitPartitionKeyRangesWith is SplitPartitionKeyRanges with the window
// o describes.
func (s *Server) SplitPartitionKeyRangesWith(database, containerID string, o SplitOptions) error {
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
	c.retired, c.listRetiredFor = c.ranges, o.ListParentsFor
	c.completingFor = o.CompletingFor
	c.ranges = next
	return nil
}

// listedRanges is what a read of the range list shows: the current ranges,
// and the split ones beside them while the split is being listed. Call with
// c.mu held.
func (c *container) listedRanges() []*pkRange {
	if c.listRetiredFor <= 0 {
		return c.ranges
	}
	c.listRetiredFor--
	return append(slices.Clone(c.retired), c.ranges...)
}

// splitCompleting spends one answer of a split's completing window. Call
// with c.mu held.
func (c *container) splitCompleting() error {
	if c.completingFor <= 0 {
		return nil
	}
	c.completingFor--
	return newSubError(http.StatusGone, subStatusCompletingSplit, "The split of the partition is completing; retry the request.")
}
