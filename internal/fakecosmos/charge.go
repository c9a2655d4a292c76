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
	chargeWriteBase     = 5.5
	chargeWritePerKB    = 1.2
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

func writeCharge(docBytes int) float64 {
	return chargeWriteBase + chargeWritePerKB*startedKB(docBytes)
}

// queryCharge prices one page: the documents evaluated and the bytes
// returned.
func queryCharge(scanned, returnedBytes int) float64 {
	c := chargeQueryBase + chargeQueryPerDoc*float64(scanned)
	if returnedBytes > 0 {
		c += chargeQueryPerKBOut * startedKB(returnedBytes)
	}
	return c
}

func roundCharge(c float64) float64 { return math.Round(c*100) / 100 }

func formatCharge(c float64) string { return strconv.FormatFloat(roundCharge(c), 'f', -1, 64) }
