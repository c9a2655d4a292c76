package fakecosmos

import (
	"math"
	"strconv"
)

// The request-unit model documented in the package comment. It is
// deterministic so that tests and benchmarks can compare RU figures.
const (
	chargeMetadata      = 1.0
	chargeRefusal       = 1.0
	chargeWriteBase     = 5.2
	chargeWritePerKB    = 1.2
	chargeWritePerTerm  = 0.1
	chargeReadPerKB     = 1.0
	chargeDelete        = 5.0
	chargeQueryBase     = 2.3
	chargeQueryPerDoc   = 0.05
	chargeQueryPerKBOut = 0.5
)

// startedKB is ceil(bytes/1024), at least 1.
func startedKB(bytes int) float64 {
	if bytes <= 0 {
		return 1
	}
	return math.Ceil(float64(bytes) / 1024)
}

func readCharge(docBytes int) float64 { return chargeReadPerKB * startedKB(docBytes) }

// writeCharge prices storing d: its size and the index entries it adds
// (indexedTerms), so that an opt-in indexing policy makes writes cheaper.
// Call with c.mu held.
func (c *container) writeCharge(d *document) float64 {
	return chargeWriteBase + chargeWritePerKB*startedKB(len(d.raw)) + chargeWritePerTerm*float64(c.index.indexedTerms(d.body))
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
