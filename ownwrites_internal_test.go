package cdb

import (
	"testing"
	"time"
)

// A process that keeps changing its workers' tag filters does not make
// ownWrites remember every filter it ever fetched with.
func TestOwnWritesForgetsTagFiltersNoFetchUses(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	o := newOwnWrites("p", time.Second, func() time.Time { return now })
	for _, tag := range []string{"gpu", "cpu", "io"} {
		f, err := TagsFilter(tag)
		if err != nil {
			t.Fatal(err)
		}
		o.workFetch(f)()
	}
	now = now.Add(forgetFetchesAfter + time.Second)
	done := o.workFetch(DefaultOnlyFilter())
	defer done()
	untagged := ActivityExecute{Instance: "i", ExecutionID: 1, ID: 1, Name: "A"}
	if got := o.workWriter(untagged, now.UnixMilli()); got != "p" {
		t.Fatalf("writer %q of an item the running fetch matches, want p", got)
	}
	if len(o.byTags) != 1 {
		t.Fatalf("%d tag filters remembered, want the one in use", len(o.byTags))
	}
}
