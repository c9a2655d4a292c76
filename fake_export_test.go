package cdb

import "github.com/duroxide-go/cdb/internal/fakecosmos"

// CheckQueryIndexForTest makes a serve every query page as a walk of the
// whole scope and compare it with the page its value index gives; the
// function it returns reports the first difference (nil: none). Tests of
// package cdb_test use it so that the provider's own queries show the
// index changes no answer, continuation or charge.
func CheckQueryIndexForTest(a *FakeAccount) (mismatch func() error) {
	a.srv.SetQueryIndexMode(fakecosmos.QueryIndexChecked)
	return a.srv.QueryIndexMismatch
}

// UnindexedFiltersForTest is every path a query on a filtered without an
// index, with the first such query.
func UnindexedFiltersForTest(a *FakeAccount) map[string]string { return a.srv.UnindexedFilters() }
