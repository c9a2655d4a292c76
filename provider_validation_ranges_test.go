package cdb_test

import (
	"testing"

	"github.com/duroxide-go/cdb/providertest"
)

// TestValidationOnSeveralRanges runs the suite again on containers with four
// partition key ranges, so every candidate query and count fans out per
// range and merges.
func TestValidationOnSeveralRanges(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the suite already ran on one range in TestValidation")
	}
	providertest.Run(t, fakeFactory{ranges: 4})
}
