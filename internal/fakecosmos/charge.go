package fakecosmos

import (
	"math"
	"strconv"
)

// The request-unit model documented in the package comment: Microsoft's
// documented charges (size curves, per indexed term, per patch operation,
// per query page), deterministic so that tests and benchmarks can compare
// RU figures.
const (
	chargeMetadata      = 1.0
	chargeRefusal       = 1.0
	chargeWritePerTerm  = 0.2 // each index entry a write adds or removes
	chargePatchPerOp    = 0.4 // a patch's surcharge per operation
	chargeQueryBase     = 2.3
	chargeQueryPerDoc   = 0.05
	chargeQueryPerKBOut = 0.1
)

// sizePoint is one row of the documented table of RU by item size: reading
// (Session or Eventual consistency) and writing an item of kb kilobytes.
type sizePoint struct{ kb, read, write float64 }

// sizeCurve is that table. Between two rows the charge is linear in the
// size; an item under 1 KB costs what 1 KB does; past the last row the last
// segment's slope continues (only system properties take a stored document
// past 2 MB).
var sizeCurve = [...]sizePoint{
	{1, 1.00, 4.95},
	{2, 1.04, 6.29},
	{4, 1.14, 6.67},
	{8, 1.33, 7.04},
	{16, 1.67, 9.52},
	{32, 2.19, 11.23},
	{64, 4.76, 22.67},
	{128, 9.95, 48.19},
	{256, 20.28, 98.29},
	{512, 40.95, 184.57},
	{1024, 145.90, 625.00},
	{2048, 291.80, 1250.00},
}

// onCurve interpolates the table at bytes, by what (read or write).
func onCurve(bytes int, what func(sizePoint) float64) float64 {
	kb := max(float64(bytes)/1024, sizeCurve[0].kb)
	i := 1
	for i < len(sizeCurve)-1 && kb > sizeCurve[i].kb {
		i++
	}
	lo, hi := sizeCurve[i-1], sizeCurve[i]
	return what(lo) + (what(hi)-what(lo))*(kb-lo.kb)/(hi.kb-lo.kb)
}

// readSizeCharge is R(size): a point read of a stored document of bytes.
func readSizeCharge(bytes int) float64 {
	return onCurve(bytes, func(p sizePoint) float64 { return p.read })
}

// writeSizeCharge is W(size): storing or removing a document of bytes,
// before its index entries.
func writeSizeCharge(bytes int) float64 {
	return onCurve(bytes, func(p sizePoint) float64 { return p.write })
}

// startedKB is ceil(bytes/1024), at least 1.
func startedKB(bytes int) float64 {
	if bytes <= 0 {
		return 1
	}
	return math.Ceil(float64(bytes) / 1024)
}

func readCharge(d *document) float64 { return readSizeCharge(len(d.raw)) }

// createCharge prices inserting d: its size and the index entries it adds
// (indexedTerms), so that an opt-in indexing policy makes writes cheaper.
// Call with c.mu held.
func (c *container) createCharge(d *document) float64 {
	return writeSizeCharge(len(d.raw)) + chargeWritePerTerm*float64(c.index.indexedTerms(d.body))
}

// replaceCharge prices overwriting prev with d (replace, or an upsert that
// finds the item) as the service documents it: deleting the old document
// and inserting the new one, plus the index entries that differ between
// them (changedTerms). Call with c.mu held.
func (c *container) replaceCharge(prev, d *document) float64 {
	return writeSizeCharge(len(prev.raw)) + writeSizeCharge(len(d.raw)) +
		chargeWritePerTerm*float64(c.index.changedTerms(prev.body, d.body))
}

// patchCharge is a replace's charge plus a surcharge per operation: a
// patch saves the client a read, not the service any work.
func (c *container) patchCharge(prev, d *document, ops int) float64 {
	return c.replaceCharge(prev, d) + chargePatchPerOp*float64(ops)
}

// deleteCharge prices removing prev: its size and the index entries it
// takes away. Call with c.mu held.
func (c *container) deleteCharge(prev *document) float64 {
	return writeSizeCharge(len(prev.raw)) + chargeWritePerTerm*float64(c.index.indexedTerms(prev.body))
}

// queryCharge prices one page: the documents evaluated (traversed in an
// index, or scanned) and the bytes returned.
func queryCharge(evaluated, returnedBytes int) float64 {
	c := chargeQueryBase + chargeQueryPerDoc*float64(evaluated)
	if returnedBytes > 0 {
		c += chargeQueryPerKBOut * startedKB(returnedBytes)
	}
	return c
}

func roundCharge(c float64) float64 { return math.Round(c*100) / 100 }

func formatCharge(c float64) string { return strconv.FormatFloat(roundCharge(c), 'f', -1, 64) }
