package cdb

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A chained turn that queries its partition holds its chain's completions
// (up to its room, 80) and finds others that came unclaimed meanwhile,
// older: the batch that claims what it keeps also releases the held ones
// it leaves out, and both must fit one batch. It keeps fewer of the
// unclaimed, the newest left for the next turn, rather than send a batch
// of more than 100 operations, which the store refuses.
func TestACompletedBatchClaimsNoMoreThanOneBatchCan(t *testing.T) {
	var visible []queueDoc
	var items []WorkItem
	held := map[string]bool{}
	add := func(id string, isHeld bool) {
		visible = append(visible, queueDoc{ID: id})
		items = append(items, ActivityCompletedMessage{Instance: "i", ExecutionID: 1, ID: uint64(len(items)), Result: "ok"})
		if isHeld {
			held[id] = true
		}
	}
	for i := range 70 {
		add(fmt.Sprintf("unclaimed-%d", i), false)
	}
	for i := range 60 {
		add(fmt.Sprintf("held-%d", i), true)
	}
	keep := claimableInOneBatch(continueAsNewFirst(items, chainTurnMessages), visible, items, held)

	claims, releases := 0, len(held)
	for _, i := range keep {
		if held[visible[i].ID] {
			releases--
		} else {
			claims++
		}
	}
	assert.LessOrEqual(t, claims+releases, MaxBatchOperations, "one batch")
	assert.Equal(t, 50, claims, "the oldest unclaimed, as many as fit")
	assert.Equal(t, 60-10, releases, "the held ones beyond the room go back")
	assert.Equal(t, visible[keep[claims-1]].ID, "unclaimed-49", "the newest unclaimed wait")

	few := claimableInOneBatch([]int{0, 1, 70}, visible, items, held)
	assert.Equal(t, []int{0, 1, 70}, few, "a batch that fits is kept whole")
}
