package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

const stuckReason = `schedule mismatch at event 2: history has activity "Reserve", the code scheduled activity "Charge"`

// parkedFixture is operatorFixture's account with "busy" parked once for
// an hour by a runtime whose code diverged.
func parkedFixture(t *testing.T) (endpoint, key string) {
	t.Helper()
	fx, key := operatorFixture(t)
	ctx := context.Background()
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: fx.account.Client(), ShortPolling: true})
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "busy", Name: "approve", Data: "{}"}, 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Equal(t, "busy", item.Instance)
	require.NoError(t, p.ParkOrchestrationItem(ctx, token, time.Hour, stuckReason))
	return fx.endpoint, key
}

func TestBinaryShowsAParkedInstance(t *testing.T) {
	endpoint, key := parkedFixture(t)
	conn := []string{"-endpoint", endpoint, "-key", key}

	code, stdout, stderr := cli(append(append([]string{"show"}, conn...), "busy")...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "status     Running")
	assert.Regexp(t, `parked     since \S+, 1 parks, next retry \S+`, stdout)
	assert.Contains(t, unwrapped(stdout), "reason "+stuckReason)

	code, stdout, stderr = cli(append(append([]string{"show"}, conn...), "done")...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, stdout, "parked")

	code, stdout, stderr = cli(append(append([]string{"show", "-o", "json"}, conn...), "busy")...).run(t)
	require.Equal(t, 0, code, stderr)
	var show struct {
		Status string `json:"status"`
		Parked *struct {
			Reason  string    `json:"reason"`
			Since   time.Time `json:"since"`
			Count   uint32    `json:"count"`
			RetryAt time.Time `json:"retry_at"`
		} `json:"parked"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &show), stdout)
	assert.Equal(t, "Running", show.Status)
	require.NotNil(t, show.Parked, stdout)
	assert.Equal(t, stuckReason, show.Parked.Reason)
	assert.EqualValues(t, 1, show.Parked.Count)
	assert.Equal(t, time.Hour, show.Parked.RetryAt.Sub(show.Parked.Since))

	code, stdout, stderr = cli(append([]string{"instances"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `busy\s+Running \(parked\)`, stdout)
	assert.Regexp(t, `done\s+Completed\s+TestOrch`, stdout)

	code, stdout, stderr = cli(append([]string{"instances", "-o", "json"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	var list struct {
		Instances []struct {
			InstanceID string          `json:"instance_id"`
			Parked     json.RawMessage `json:"parked"`
		} `json:"instances"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &list), stdout)
	parked := map[string]string{}
	for _, i := range list.Instances {
		parked[i.InstanceID] = string(i.Parked)
	}
	assert.Equal(t, "null", parked["done"])
	assert.Contains(t, parked["busy"], `"count": 1`)
}

func TestBinaryListsOnlyParkedInstancesWithStatusParked(t *testing.T) {
	endpoint, key := parkedFixture(t)
	conn := []string{"-endpoint", endpoint, "-key", key}

	code, stdout, stderr := cli(append([]string{"instances", "-status", "parked", "-o", "json"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	var list struct {
		Instances []struct {
			InstanceID string `json:"instance_id"`
		} `json:"instances"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &list), stdout)
	require.Len(t, list.Instances, 1, stdout)
	assert.Equal(t, "busy", list.Instances[0].InstanceID)

	code, stdout, stderr = cli(append([]string{"instances", "-status", "Parked,Failed"}, conn...)...).run(t)
	assert.Equal(t, 2, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, `"Parked" stands alone: a parked instance is Running`)
}

// cdb resume makes a parked turn due now: the next fetch takes it, an hour
// before the park's retry time; what it cannot resume it refuses, changing
// nothing.
func TestBinaryResumeMakesAParkedTurnDueNow(t *testing.T) {
	fx, key := operatorFixture(t)
	ctx := context.Background()
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: fx.account.Client(), ShortPolling: true})
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "busy", Name: "approve", Data: "{}"}, 0))
	_, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NoError(t, p.ParkOrchestrationItem(ctx, token, time.Hour, stuckReason))
	conn := []string{"-endpoint", fx.endpoint, "-key", key}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"resume", "nobdy"}, "cdb resume: instance \"nobdy\" not found: nothing resumed\n"},
		{[]string{"resume", "done"}, "cdb resume: instance \"done\" is not parked: nothing resumed\n"},
	} {
		code, stdout, stderr := cli(append(c.args, conn...)...).run(t)
		assert.Equal(t, 1, code, "cdb %v", c.args)
		assert.Empty(t, stdout, "cdb %v", c.args)
		assert.Equal(t, c.want, stderr, "cdb %v", c.args)
	}

	code, stdout, stderr := cli(append([]string{"resume", "busy"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `^resumed parked instance busy: 1 message\(s\) due now instead of at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(parked 1 time\(s\): schedule mismatch at event 2: history has activity "Reserve", the code scheduled activity "Charge"\)\n$`, stdout)
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "due now, not in an hour")
	assert.Equal(t, []cdb.WorkItem{cdb.ExternalRaisedMessage{Instance: "busy", Name: "approve", Data: "{}"}}, item.Messages)

	// The runtime that fetched it holds its lock now.
	code, stdout, stderr = cli(append([]string{"resume", "busy"}, conn...)...).run(t)
	assert.Equal(t, 1, code)
	assert.Empty(t, stdout)
	assert.Equal(t, "cdb resume: instance \"busy\" is locked by a runtime, which is running its turn now: nothing resumed\n", stderr)

	require.NoError(t, p.ParkOrchestrationItem(ctx, token, time.Hour, stuckReason))
	code, stdout, stderr = cli(append([]string{"resume", "busy", "-o", "json"}, conn...)...).run(t)
	require.Equal(t, 0, code, stderr)
	var resumed map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &resumed), stdout)
	assert.Equal(t, "busy", resumed["instance_id"])
	assert.EqualValues(t, 1, resumed["messages"])
	assert.EqualValues(t, 2, resumed["count"], "parked twice in a row")
	assert.Equal(t, stuckReason, resumed["reason"])
	assert.NotEmpty(t, resumed["retry_at"])
}
