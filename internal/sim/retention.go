package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/duroxide-go/cdb"
)

// Retention (Features.Retention): every node keeps finished instances for
// an hour (cdb.Config.Retention), so each finishing commit starts the
// retention's follow-up, which gives the instance's documents their TTLs
// while the run's faults, lost answers, crashes, deletions, restarts of
// the same ids and prunes go on around it. Nothing expires within a run;
// what is checked is that the follow-up stays where it belongs
// (retention-scoped): a document it gave a TTL (`retained`) is of a
// partition whose instance document is a finished instance's with a
// retention (never a running instance, nor a new life of the id that a
// deletion and a restart made meanwhile), and never a queue item (a
// message or an activity, which its consumer takes and deletes). The
// other checks see the rest: an instance whose document a retention batch
// touched still ends as it should (terminal-state), a restart of its id
// still runs (start-kept), a prune still deletes what it doomed.
const invRetentionScoped = "retention-scoped"

// retentionForRun is how long the nodes keep finished instances: longer
// than any run, so every check after it still reads them.
const retentionForRun = time.Hour

// checkRetention reads every document a retention gave its TTL and the
// instance documents of their partitions.
func checkRetention(ctx context.Context, v *violations, container *cdb.ContainerClient) (string, error) {
	res, err := container.QueryItems(ctx, "SELECT c.pk, c.id, c.type FROM c WHERE c.retained = true", nil, nil)
	if err != nil {
		return "", fmt.Errorf("list retained documents: %w", err)
	}
	byPK := map[string][]retainedDoc{}
	for _, raw := range res.Items {
		var d retainedDoc
		if err := json.Unmarshal(raw, &d); err != nil {
			return "", fmt.Errorf("decode a retained document: %w", err)
		}
		byPK[d.PK] = append(byPK[d.PK], d)
	}
	insts, err := container.QueryItems(ctx, "SELECT c.pk, c.status, c.retainUntil, c.ttl FROM c WHERE c.type = 'inst'", nil, nil)
	if err != nil {
		return "", fmt.Errorf("list instance documents: %w", err)
	}
	owners := map[string]retainedOwner{}
	retained, withTTL := 0, 0
	for _, raw := range insts.Items {
		var o retainedOwner
		if err := json.Unmarshal(raw, &o); err != nil {
			return "", fmt.Errorf("decode an instance document: %w", err)
		}
		owners[o.PK] = o
		if o.RetainUntil > 0 {
			retained++
		}
		if o.TTL > 0 {
			withTTL++
		}
	}
	pks := make([]string, 0, len(byPK))
	for pk := range byPK {
		pks = append(pks, pk)
	}
	sort.Strings(pks)
	docs := 0
	for _, pk := range pks {
		docs += len(byPK[pk])
		for _, d := range byPK[pk] {
			if d.Type == "msg" || d.Type == "work" {
				v.add(invRetentionScoped, pk, fmt.Sprintf("queue item %s was given a retention's TTL", d.ID))
			}
		}
		o, ok := owners[pk]
		if !ok {
			continue // a deletion is sweeping the partition (its instance document goes last)
		}
		if o.RetainUntil == 0 || (o.Status != "Completed" && o.Status != "Failed") {
			v.add(invRetentionScoped, pk, fmt.Sprintf("%d documents were given a retention's TTL (%s first) in a partition whose instance is %s without a retention",
				len(byPK[pk]), byPK[pk][0].ID, o.Status))
		}
	}
	return fmt.Sprintf("finished instances with a retention=%d, their instance documents with a TTL=%d, documents retained=%d in %d partitions",
		retained, withTTL, docs, len(pks)), nil
}

type retainedDoc struct {
	PK   string `json:"pk"`
	ID   string `json:"id"`
	Type string `json:"type"`
}

type retainedOwner struct {
	PK          string `json:"pk"`
	Status      string `json:"status"`
	RetainUntil int64  `json:"retainUntil"`
	TTL         int    `json:"ttl"`
}
