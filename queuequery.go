package cdb

// The candidate query: the oldest visible, unlocked items of a queue, per
// partition key range, ranked and grouped by instance.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Queue names, for leases and logs.
const (
	queueOrchestrator = "orchestrator"
	queueWorker       = "worker"
)

// candidateQuery finds the oldest visible, unlocked items of one queue. It
// runs once per partition key range (ORDER BY and TOP are allowed there; the
// gateway refuses them across partitions), reading at most CandidatesPerRange
// documents per range whatever the backlog.
type candidateQuery struct {
	docType string
	pk      string // set: this partition alone, one request
	index   queueIndex
	now     int64    // ms: what is visible and unlocked as of then
	slots   []int    // nil: every slot
	skip    []string // partition keys not to return (held or contended)
	where   []string // extra conditions
	params  []QueryParameter
	// headOnly selects the fields ranking and claiming need, not the
	// item: a worker item's claim returns the whole document anyway, and
	// an activity's input may be megabytes.
	headOnly bool
}

// queueHeadFields are what a worker candidate query returns of each item.
const queueHeadFields = "c.id, c.pk, c.type, c.instance, c.slot, c.visibleAt, c.seq, c.lockToken, c.lockedUntil, c.attempts, " +
	"c.exec, c.activity, c.session, c.sessionKey, c.tag, c.orch, c._etag, LENGTH(c.item) AS itemLength"

func (q candidateQuery) text() string {
	var b strings.Builder
	fields := "*"
	if q.headOnly {
		fields = queueHeadFields
	}
	b.WriteString("SELECT TOP @top " + fields + " FROM c WHERE c.type = @type AND " + visibleCondition + " AND c.lockedUntil <= @expired")
	if q.slots != nil {
		b.WriteString(" AND ARRAY_CONTAINS(@slots, c.slot)")
	}
	if len(q.skip) > 0 {
		b.WriteString(" AND NOT ARRAY_CONTAINS(@skip, c.pk)")
	}
	for _, w := range q.where {
		b.WriteString(" AND (")
		b.WriteString(w)
		b.WriteString(")")
	}
	b.WriteString(q.index.orderBy())
	return b.String()
}

// visibleCondition selects the queue items visible to a fetch: those due
// by its clock (@now), and immediate ones up to its horizon (@visible,
// visibleHorizon), never an item with a due time before it.
const visibleCondition = "(c.visibleAt <= @now OR (c.visibleAt <= @visible AND c.seqVisible = true))"

// queueTime places a queue item: when it becomes visible, and its seq.
type queueTime struct {
	visibleAt int64 // ms
	seq       int64
	immediate bool // visible from its seq's millisecond (queueDoc.SeqVisible), not at a due time
}

// immediateAt places an item visible at once: at visibleAt, the writer's
// clock or its seq's millisecond (sequencedVisibleAt).
func immediateAt(visibleAt, seq int64) queueTime {
	return queueTime{visibleAt: visibleAt, seq: seq, immediate: true}
}

// dueAt places an item that must not be served before due.
func dueAt(due, seq int64) queueTime { return queueTime{visibleAt: due, seq: seq} }

// setDue adds to ops what makes the queue item d visible at due again (an
// abandon, a set-aside): a due time, so no fetch serves it before, and no
// writer's to take any more: a stamp says its writer takes the item as it
// writes it (ownwrites.go), and would otherwise hold the others off again
// from due on, for a process that does not look for it.
func setDue(ops *PatchOperations, d queueDoc, due int64) {
	ops.AppendSet("/visibleAt", due)
	if d.SeqVisible {
		ops.AppendRemove("/seqVisible")
	}
	if d.Writer != "" {
		ops.AppendRemove("/writer")
	}
}

// run returns the candidates of every range, oldest first.
func (p *CosmosProvider) runCandidateQuery(ctx context.Context, q candidateQuery) ([]queueDoc, error) {
	q.index = p.queueIndex.get()
	now := cmp.Or(q.now, p.nowMs())
	params := append([]QueryParameter{
		{Name: "@top", Value: p.cfg.CandidatesPerRange},
		{Name: "@type", Value: q.docType},
		{Name: "@now", Value: now},
		{Name: "@visible", Value: p.visibleHorizon(now)},
		{Name: "@expired", Value: p.expiredBy(now)},
	}, q.params...)
	if q.slots != nil {
		params = append(params, QueryParameter{Name: "@slots", Value: q.slots})
	}
	if len(q.skip) > 0 {
		params = append(params, QueryParameter{Name: "@skip", Value: q.skip})
	}
	var byRange map[string]QueryResult
	if q.pk != "" {
		key := NewPartitionKeyString(q.pk)
		res, err := p.container.QueryItems(ctx, q.text(), params, &QueryOptions{PartitionKey: &key, MaxItemCount: int32(p.cfg.CandidatesPerRange)})
		if err != nil {
			return nil, err
		}
		byRange = map[string]QueryResult{q.pk: res}
	} else {
		var err error
		if byRange, err = p.container.QueryItemsPerRange(ctx, q.text(), params, &QueryOptions{MaxItemCount: int32(p.cfg.CandidatesPerRange)}); err != nil {
			return nil, err
		}
	}
	var docs []queueDoc
	for _, res := range byRange {
		for _, raw := range res.Items {
			var d queueDoc
			if err := json.Unmarshal(raw, &d); err != nil {
				return nil, fmt.Errorf("decode queue item: %w", err)
			}
			docs = append(docs, d)
		}
	}
	sortQueueDocs(docs)
	return docs, nil
}

// sortQueueDocs orders queue items as the queue serves them.
func sortQueueDocs(docs []queueDoc) {
	sort.SliceStable(docs, func(i, j int) bool {
		if docs[i].VisibleAt != docs[j].VisibleAt {
			return docs[i].VisibleAt < docs[j].VisibleAt
		}
		return docs[i].Seq < docs[j].Seq
	})
}

// instanceGroup is one instance's candidates, oldest first.
type instanceGroup struct {
	pk   string
	docs []queueDoc
}

// parked says some of the group's candidates are parked messages.
func (g instanceGroup) parked() bool {
	return slices.ContainsFunc(g.docs, func(d queueDoc) bool { return d.HeldFrom != 0 })
}

// groupByInstance keeps the instances in the order of their oldest item.
func groupByInstance(docs []queueDoc) []instanceGroup {
	index := map[string]int{}
	var groups []instanceGroup
	for _, d := range docs {
		i, ok := index[d.PK]
		if !ok {
			i = len(groups)
			index[d.PK] = i
			groups = append(groups, instanceGroup{pk: d.PK})
		}
		groups[i].docs = append(groups[i].docs, d)
	}
	return groups
}

const (
	outcomeEmpty pollOutcome = iota // no candidates at all
	outcomeBusy                     // candidates, none of which could be taken now
	outcomeFound                    // work taken
)

// orchestration is the orchestration name the group's messages carry, ""
// when none of their writers knew it.
func (g instanceGroup) orchestration() string {
	for _, d := range g.docs {
		if d.Orch != "" {
			return d.Orch
		}
	}
	return ""
}
