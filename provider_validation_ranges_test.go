package cdb_test

import (
	"testing"
	"time"

	"github.com/duroxide-go/cdb/providertest"
)

// TestValidationOnSeveralRanges runs the suite again on containers with four
// partition key ranges, so every candidate query and count fans out per
// range and merges; with a retention of a day, so finished instances get
// their TTLs (and the reconciler looks for those without) as the suite
// runs, and nothing of the contract changes for them before it ends.
func TestValidationOnSeveralRanges(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: the suite already ran on one range in TestValidation")
	}
	providertest.Run(t, fakeFactory{ranges: 4, retention: 24 * time.Hour})
}

// TestValidationUnderLatency runs the whole suite with 30 ms added per
// request: concurrent fetches must not herd onto the same instances and
// give up, a slow deletion must not be taken over by this process's own
// reconciler, and no test may lean on requests being instant.
func TestValidationUnderLatency(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: slow by design")
	}
	providertest.Run(t, fakeFactory{latency: 30 * time.Millisecond})
}
