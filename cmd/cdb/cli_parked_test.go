package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/providertest"
)

const stuckReason = `schedule mismatch at event 2: history has activity "Reserve", the code scheduled activity "Charge"`

// parkedFixture is an account with "stuck", parked once for an hour by a
// runtime whose code diverged, and "fine", running.
func parkedFixture(t *testing.T) (endpoint, key string) {
	t.Helper()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	srv := httptest.NewServer(acct.Handler())
	t.Cleanup(srv.Close)
	ctx := context.Background()
	p, err := cdb.NewProvider(ctx, cdb.Config{Client: acct.Client(), ShortPolling: true})
	require.NoError(t, err)
	defer p.Close()
	providertest.CreateInstance(ctx, t, p, "fine")
	providertest.CreateInstance(ctx, t, p, "stuck")
	require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "stuck", Name: "approve", Data: "{}"}, 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	require.NoError(t, err)
	require.Equal(t, "stuck", item.Instance)
	require.NoError(t, p.ParkOrchestrationItem(ctx, token, time.Hour, stuckReason))
	return srv.URL, acct.Key()
}

func TestBinaryShowsAParkedInstance(t *testing.T) {
	endpoint, key := parkedFixture(t)
	conn := []string{"-endpoint", endpoint, "-key", key}

	code, stdout, stderr := cli(append(append([]string{"show"}, conn...), "stuck")...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "status     Running")
	assert.Regexp(t, `parked     since \S+, 1 parks, next retry \S+`, stdout)
	assert.Contains(t, stdout, "reason   "+stuckReason)

	code, stdout, stderr = cli(append(append([]string{"show"}, conn...), "fine")...).run(t)
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, stdout, "parked")

	code, stdout, stderr = cli(append(append([]string{"show", "-o", "json"}, conn...), "stuck")...).run(t)
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
	assert.Regexp(t, `stuck\s+Running \(parked\)`, stdout)
	assert.Regexp(t, `fine\s+Running\s+TestOrch`, stdout)

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
	assert.Equal(t, "null", parked["fine"])
	assert.Contains(t, parked["stuck"], `"count": 1`)
}
