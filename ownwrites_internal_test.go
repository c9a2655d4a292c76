package cdb

import (
	"testing"
	"time"
)

func testOwnWrites(now *time.Time, stamps bool) *ownWrites {
	return newOwnWrites("p", time.Second, stamps, func() time.Time { return *now })
}

// A process that keeps changing its workers' tag filters does not make
// ownWrites remember every filter it ever fetched with: only the running
// fetches count.
func TestOwnWritesKeepsOnlyTheRunningFetches(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	o := testOwnWrites(&now, true)
	for _, tag := range []string{"gpu", "cpu", "io"} {
		f, err := TagsFilter(tag)
		if err != nil {
			t.Fatal(err)
		}
		o.workFetch(f)()
		o.orchestrationFetch(&DispatcherCapabilityFilter{SupportedDuroxideVersions: []SemverRange{{Max: SemanticVersion{Major: uint64(len(tag))}}}})()
	}
	done := o.workFetch(DefaultOnlyFilter())
	defer done()
	untagged := ActivityExecuteMessage{Instance: "i", ExecutionID: 1, ID: 1, Name: "A"}
	if got := o.workWriter(untagged, now.UnixMilli()); got != "p" {
		t.Fatalf("writer %q of an item the running fetch matches, want p", got)
	}
	if len(o.byTags) != 1 || len(o.orch) != 0 {
		t.Fatalf("%d tag filters and %d capability filters remembered, want the one worker fetch running", len(o.byTags), len(o.orch))
	}
}

// A fetch that ran and returned takes nothing announced after it: only a
// running fetch makes its process stamp.
func TestOwnWritesStampsOnlyForARunningFetch(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	o := testOwnWrites(&now, true)
	o.orchestrationFetch(nil)()
	o.workFetch(DefaultOnlyFilter())()
	act := ActivityExecuteMessage{Instance: "i", ExecutionID: 1, ID: 1, Name: "A"}
	if w := o.messageWriter(now.UnixMilli(), pinnedTo(nil)); w != "" {
		t.Fatalf("message stamped %q after the fetch returned", w)
	}
	if w := o.workWriter(act, now.UnixMilli()); w != "" {
		t.Fatalf("worker item stamped %q after the fetch returned", w)
	}
}

// A short-polling process never stamps: its fetches look at their share,
// not at the partition it announces.
func TestOwnWritesOfAShortPollingProcessAreNeverStamped(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	o := testOwnWrites(&now, false)
	defer o.orchestrationFetch(nil)()
	defer o.workFetch(DefaultOnlyFilter())()
	act := ActivityExecuteMessage{Instance: "i", ExecutionID: 1, ID: 1, Name: "A"}
	if w := o.messageWriter(now.UnixMilli(), pinnedTo(nil)); w != "" {
		t.Fatalf("message stamped %q by a short-polling process", w)
	}
	if w := o.workWriter(act, now.UnixMilli()); w != "" {
		t.Fatalf("worker item stamped %q by a short-polling process", w)
	}
}

// A message is stamped only when every running orchestration fetch admits
// the instance's pinned version, as the writer knows it.
func TestOwnWritesStampAMessageOnlyWhenTheFetchesAdmitItsInstancesPin(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	v1, v2 := SemanticVersion{Major: 1}, SemanticVersion{Major: 2}
	old := &DispatcherCapabilityFilter{SupportedDuroxideVersions: []SemverRange{{Min: v1, Max: SemanticVersion{Major: 1, Minor: 99}}}}
	p1, p2 := v1.PackedVersion(), v2.PackedVersion()
	cases := []struct {
		name    string
		filters []*DispatcherCapabilityFilter
		pin     instancePin
		want    string
	}{
		{"no fetch", nil, pinnedTo(nil), ""},
		{"unfiltered, unknown pin", []*DispatcherCapabilityFilter{nil}, unknownPin, "p"},
		{"filtered, unknown pin", []*DispatcherCapabilityFilter{old}, unknownPin, ""},
		{"filtered, not pinned", []*DispatcherCapabilityFilter{old}, pinnedTo(nil), "p"},
		{"filtered, pinned inside", []*DispatcherCapabilityFilter{old}, pinnedTo(&p1), "p"},
		{"filtered, pinned outside", []*DispatcherCapabilityFilter{old}, pinnedTo(&p2), ""},
		{"one of two fetches excludes the pin", []*DispatcherCapabilityFilter{nil, old}, pinnedTo(&p2), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := testOwnWrites(&now, true)
			for _, f := range c.filters {
				defer o.orchestrationFetch(f)()
			}
			if got := o.messageWriter(now.UnixMilli(), c.pin); got != c.want {
				t.Fatalf("stamp %q, want %q", got, c.want)
			}
		})
	}
}

// However many fresh stamped messages keep arriving, an instance is left
// to their writer only while its oldest waiting message is fresh.
func TestOwnWritesLeaveAnInstanceOnePollIntervalInAll(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	o := testOwnWrites(&now, true)
	start := now.UnixMilli()
	docs := []queueDoc{{VisibleAt: start, Writer: "a"}}
	if !o.leavesInstance(docs, start) {
		t.Fatal("a fresh message another process stamped is left to it")
	}
	for at := start + 300; at <= start+1500; at += 300 {
		docs = append(docs, queueDoc{VisibleAt: at, Writer: "a"})
		want := at-start < o.grace.Milliseconds()
		if got := o.leavesInstance(docs, at); got != want {
			t.Fatalf("%d ms after the first message: left to its writer %v, want %v", at-start, got, want)
		}
	}
	if o.leavesInstance([]queueDoc{{VisibleAt: start, Writer: "p"}}, start) {
		t.Fatal("a process leaves its own message alone")
	}
}

// A stamp goes into a document the batch writes, and only there.
func TestStampedBodyAddsTheWriter(t *testing.T) {
	body := []byte(`{"id":"m|1","type":"msg"}`)
	got := stampedBody(body, "proc-1")
	if string(got) != `{"writer":"proc-1","id":"m|1","type":"msg"}` {
		t.Fatalf("stamped body %s", got)
	}
	if len(got)-len(body) != stampBytes("proc-1") {
		t.Fatalf("stampBytes %d, the stamp adds %d", stampBytes("proc-1"), len(got)-len(body))
	}
	if string(stampedBody(body, "")) != string(body) {
		t.Fatal("no writer, no stamp")
	}
}
