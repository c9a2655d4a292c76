package cdb_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// A status is a typed string whose JSON is duroxide's bare string.
func TestInstanceStatusIsTypedWithDuroxideSpelling(t *testing.T) {
	info := cdb.InstanceInfo{InstanceID: "i", Status: cdb.StatusContinuedAsNew}
	raw, err := json.Marshal(info)
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"status":"ContinuedAsNew"`)
	for status, spelling := range map[cdb.InstanceStatus]string{
		cdb.StatusRunning: "Running", cdb.StatusCompleted: "Completed", cdb.StatusFailed: "Failed",
		cdb.StatusContinuedAsNew: "ContinuedAsNew", cdb.StatusUnknown: "Unknown",
	} {
		assert.Equal(t, spelling, string(status))
	}
}

func TestInstanceStatusIsTerminal(t *testing.T) {
	assert.False(t, cdb.StatusRunning.IsTerminal())
	assert.False(t, cdb.StatusUnknown.IsTerminal())
	assert.True(t, cdb.StatusCompleted.IsTerminal())
	assert.True(t, cdb.StatusFailed.IsTerminal())
	assert.True(t, cdb.StatusContinuedAsNew.IsTerminal())
}

func TestParseInstanceStatusIgnoresCase(t *testing.T) {
	s, ok := cdb.ParseInstanceStatus("continuedasnew")
	assert.True(t, ok)
	assert.Equal(t, cdb.StatusContinuedAsNew, s)
	s, ok = cdb.ParseInstanceStatus("RUNNING")
	assert.True(t, ok)
	assert.Equal(t, cdb.StatusRunning, s)
	s, ok = cdb.ParseInstanceStatus("queued")
	assert.True(t, ok, "the listings select queued starts by it")
	assert.Equal(t, cdb.StatusQueued, s)
	_, ok = cdb.ParseInstanceStatus("Cancelled")
	assert.False(t, ok, "duroxide stores a cancelled orchestration as Failed")
}
