package providertest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// customStatusTests is duroxide's provider_validation/custom_status.rs:
// CustomStatusUpdated events in an ack's history delta set or clear the
// instance's custom status and bump its version, and GetCustomStatus reports
// it only when the version is newer than the caller's.
func customStatusTests() []Test {
	return []Test{
		{Name: "TestCustomStatusSet", Run: testCustomStatusSet},
		{Name: "TestCustomStatusClear", Run: testCustomStatusClear},
		{Name: "TestCustomStatusNonePreserves", Run: testCustomStatusNonePreserves},
		{Name: "TestCustomStatusVersionIncrements", Run: testCustomStatusVersionIncrements},
		{Name: "TestCustomStatusPollingNoChange", Run: testCustomStatusPollingNoChange},
		{Name: "TestCustomStatusNonexistentInstance", Run: testCustomStatusNonexistentInstance},
		{Name: "TestCustomStatusDefaultOnNewInstance", Run: testCustomStatusDefaultOnNewInstance},
	}
}

// csTurn is custom_status.rs's poke-then-ack_with_metadata: enqueue an
// ExternalRaised "poke" for instance, fetch it (30s lock) and ack execution 1
// with delta and default metadata.
func csTurn(ctx context.Context, t *testing.T, p cdb.Provider, instance string, delta []cdb.Event) {
	t.Helper()
	require.NoError(t, p.EnqueueForOrchestrator(ctx,
		cdb.ExternalRaisedMessage{Instance: instance, Name: "poke", Data: "{}"}, 0))
	item, token, _, err := p.FetchOrchestrationItem(ctx, lockLong, noPoll, nil)
	require.NoError(t, err)
	require.NotNil(t, item, "expected orchestration item")
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, delta, nil, nil, cdb.ExecutionMetadata{}, nil))
}

// csStatusEvent is a CustomStatusUpdated event (nil status = clear).
func csStatusEvent(instance string, eventID uint64, status *string) []cdb.Event {
	return []cdb.Event{b2Event(eventID, instance, 1, cdb.CustomStatusUpdated{Status: status})}
}

// csGet is GetCustomStatus(instance, 0), which must report a change.
func csGet(ctx context.Context, t *testing.T, p cdb.Provider, instance string) (*string, uint64) {
	t.Helper()
	status, version, changed, err := p.GetCustomStatus(ctx, instance, 0)
	require.NoError(t, err)
	require.True(t, changed, "expected custom_status to be present")
	return status, version
}

func testCustomStatusSet(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "cs-set")

	csTurn(ctx, t, p, "cs-set", csStatusEvent("cs-set", 100, ptr("progress")))

	status, version := csGet(ctx, t, p, "cs-set")
	require.Equal(t, ptr("progress"), status)
	require.Equal(t, uint64(1), version)
}

func testCustomStatusClear(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "cs-clear")

	csTurn(ctx, t, p, "cs-clear", csStatusEvent("cs-clear", 100, ptr("temp")))
	status, _ := csGet(ctx, t, p, "cs-clear")
	require.Equal(t, ptr("temp"), status)

	csTurn(ctx, t, p, "cs-clear", csStatusEvent("cs-clear", 101, nil))
	status, version, changed, err := p.GetCustomStatus(ctx, "cs-clear", 0)
	require.NoError(t, err)
	require.True(t, changed, "version changed, so should return Some")
	require.Nil(t, status, "custom_status should be NULL after clear")
	require.Equal(t, uint64(2), version, "version should be 2 after set + clear")
}

func testCustomStatusNonePreserves(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "cs-noop")

	csTurn(ctx, t, p, "cs-noop", csStatusEvent("cs-noop", 100, ptr("keep-me")))
	// A turn without a CustomStatusUpdated event leaves the status alone.
	csTurn(ctx, t, p, "cs-noop", nil)

	status, version := csGet(ctx, t, p, "cs-noop")
	require.Equal(t, ptr("keep-me"), status, "None should not modify existing value")
	require.Equal(t, uint64(1), version, "version should not increment on None")
}

func testCustomStatusVersionIncrements(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "cs-ver")

	csTurn(ctx, t, p, "cs-ver", csStatusEvent("cs-ver", 100, ptr("a")))
	_, v1 := csGet(ctx, t, p, "cs-ver")
	require.Equal(t, uint64(1), v1)

	csTurn(ctx, t, p, "cs-ver", csStatusEvent("cs-ver", 101, ptr("b")))
	_, v2 := csGet(ctx, t, p, "cs-ver")
	require.Equal(t, uint64(2), v2)

	csTurn(ctx, t, p, "cs-ver", csStatusEvent("cs-ver", 102, nil))
	status, v3 := csGet(ctx, t, p, "cs-ver")
	require.Equal(t, uint64(3), v3)
	require.Nil(t, status)
}

func testCustomStatusPollingNoChange(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "cs-poll")

	csTurn(ctx, t, p, "cs-poll", csStatusEvent("cs-poll", 100, ptr("v1")))

	_, _, changed, err := p.GetCustomStatus(ctx, "cs-poll", 1)
	require.NoError(t, err)
	require.False(t, changed, "no change since version 1")

	_, _, changed, err = p.GetCustomStatus(ctx, "cs-poll", 0)
	require.NoError(t, err)
	require.True(t, changed, "version 1 > 0")
}

func testCustomStatusNonexistentInstance(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})

	_, _, changed, err := p.GetCustomStatus(ctx, "does-not-exist", 0)
	require.NoError(t, err)
	require.False(t, changed)
}

func testCustomStatusDefaultOnNewInstance(t *testing.T, f Factory) {
	ctx := testContext(t)
	p := f.NewProvider(t, ProviderOptions{})
	CreateInstance(ctx, t, p, "cs-default")

	_, _, changed, err := p.GetCustomStatus(ctx, "cs-default", 0)
	require.NoError(t, err)
	require.False(t, changed, "fresh instance has version 0, not > 0")
}
