package durable

import (
	"strconv"
	"strings"

	"github.com/duroxide-go/cdb"
)

// This runtime's own replay rules, where it departs from duroxide's, are
// marked on an execution's start stamp as semantic-versioning build
// metadata: "0.1.32+cdb.1" is duroxide 0.1.32's rules with revision 1 of
// this runtime's. Build metadata takes no part in precedence, so version
// ranges (the providers' capability filters, duroxide's) see the duroxide
// version alone, while replay can still tell an execution started under
// this runtime's rules from one started by duroxide or by an earlier
// release, which keep the rules they were recorded under.
//
// Revisions:
//
//	1: WaitForEvent is buffered (events.go).

// cdbRulesMark names this runtime's revision in the build metadata.
const cdbRulesMark = "cdb"

// bufferedEventsSince is the first revision whose WaitForEvent receives
// events raised before it waited.
const bufferedEventsSince = 1

// rulesRevision is the revision of this runtime's rules a stamp carries:
// 0 for a stamp without one (duroxide, or this runtime before revision 1)
// or one that does not parse.
func rulesRevision(stamp string) int {
	v, err := cdb.ParseSemanticVersion(stamp)
	if err != nil {
		return 0
	}
	return revisionOf(v)
}

func revisionOf(v cdb.SemanticVersion) int {
	ids := strings.Split(v.Build, ".")
	for i := 0; i+1 < len(ids); i++ {
		if ids[i] != cdbRulesMark {
			continue
		}
		if n, err := strconv.Atoi(ids[i+1]); err == nil && n >= 0 {
			return n
		}
	}
	return 0
}

// bufferedEventsFor reports whether WaitForEvent buffers events in an
// execution whose start carries stamp. The rule builds on the queue-race
// rules (a dropped wait leaves matching at once), which every stamp that
// carries the revision has.
func bufferedEventsFor(stamp string) bool {
	return queueRaceRulesFor(stamp) && rulesRevision(stamp) >= bufferedEventsSince
}

// replaysPinned reports whether this runtime replays an execution pinned
// at pinned with the range r: the duroxide versions compare without build
// metadata, as the providers' filters compare them, and a revision of this
// runtime's rules newer than its own (a later release's execution, met
// during a rolling deploy) is left to the runtimes that know it.
func replaysPinned(r cdb.SemverRange, pinned cdb.SemanticVersion) bool {
	core := cdb.SemverRange{Min: withoutBuild(r.Min), Max: withoutBuild(r.Max)}
	return core.Contains(withoutBuild(pinned)) && revisionOf(pinned) <= revisionOf(duroxideSemver)
}

func withoutBuild(v cdb.SemanticVersion) cdb.SemanticVersion {
	v.Build = ""
	return v
}
