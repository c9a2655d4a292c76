package main

import (
	"time"

	"github.com/duroxide-go/cdb"
)

// The application's RU/s and 429/s in `cdb top` come from the totals each
// process publishes with its process lease renewal (cdb.ProcessTotals,
// Config.ProcessLeases): cumulative counts and the time the process read
// them. A rate is the difference of a process's last two readings top has
// seen, over their read times: a renewal runs every third of a lease
// (5s by default), so comparing only consecutive samples would drop a
// process whenever no renewal fell between them. Each process's rate is
// then as old as its last renewal.

// processRates are the application's rates, summed over the live processes
// whose last two readings make one.
type processRates struct {
	// Covered counts the live processes summed; Publishing those that
	// publish totals at all (builds before it publish none).
	Covered            int      `json:"covered"`
	Publishing         int      `json:"publishing"`
	RUPerSecond        *float64 `json:"ru_per_second"`        // null when none is covered
	ThrottlesPerSecond *float64 `json:"throttles_per_second"` // 429 answers; null when none is covered
}

// processReadings are the last two distinct totals top has read of each
// live process that publishes them, by process id.
type processReadings map[string]readingPair

type readingPair struct {
	prev, cur *cdb.ProcessTotals // prev nil until a second reading
}

// next folds a sample's membership in: a reading read later than the last
// one shifts it to prev; processes no longer live, or without totals, drop
// out.
func (r processReadings) next(members map[string]cdb.ProcessLeaseMember, now time.Time) processReadings {
	out := processReadings{}
	for id, m := range members {
		if !m.Until.After(now) || m.Totals == nil {
			continue
		}
		pair := r[id]
		if pair.cur == nil || m.Totals.ReadAt.After(pair.cur.ReadAt) {
			pair = readingPair{prev: pair.cur, cur: m.Totals}
		}
		out[id] = pair
	}
	return out
}

// rates sums each process's Δtotal/Δread-time. A total that went down is
// a restart between the readings: that process is left out until its next
// renewal.
func (r processReadings) rates() processRates {
	rates := processRates{Publishing: len(r)}
	var ru, throttles float64
	for _, pair := range r {
		if pair.prev == nil || restarted(*pair.prev, *pair.cur) {
			continue
		}
		seconds := pair.cur.ReadAt.Sub(pair.prev.ReadAt).Seconds()
		ru += (pair.cur.RequestCharge - pair.prev.RequestCharge) / seconds
		throttles += float64(pair.cur.Throttles-pair.prev.Throttles) / seconds
		rates.Covered++
	}
	if rates.Covered > 0 {
		rates.RUPerSecond, rates.ThrottlesPerSecond = &ru, &throttles
	}
	return rates
}

func restarted(prev, cur cdb.ProcessTotals) bool {
	return cur.RequestCharge < prev.RequestCharge || cur.Throttles < prev.Throttles || cur.Requests < prev.Requests
}
