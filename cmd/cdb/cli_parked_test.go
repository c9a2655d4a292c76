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
