package cdb_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/memprovider"
	"github.com/duroxide-go/cdb/providertest"
)

// endWatching is a provider that tells orchestration ends, and how many
// watches it holds.
type endWatching struct {
	name string
	new  func(t *testing.T) (cdb.Provider, cdb.OrchestrationEndWatcher, func() int)
}

func endWatchingProviders() []endWatching {
	return []endWatching{
		{name: "cosmos", new: func(t *testing.T) (cdb.Provider, cdb.OrchestrationEndWatcher, func() int) {
			p := newRulesProvider(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{}), cdb.Config{})
			return p, p, p.EndWatchesForTest
		}},
		{name: "memory", new: func(t *testing.T) (cdb.Provider, cdb.OrchestrationEndWatcher, func() int) {
			p := memprovider.New(memprovider.Options{})
			t.Cleanup(func() { _ = p.Close() })
			return p, p, p.EndWatches
		}},
	}
}

// isClosed says whether ended was closed, without waiting.
func isClosed(ended <-chan struct{}) bool {
	select {
	case <-ended:
		return true
	default:
		return false
	}
}

// statusMetadata is a TestOrch turn's metadata setting status.
func statusMetadata(status cdb.InstanceStatus) cdb.ExecutionMetadata {
	md := providertest.TestOrchMetadata()
	md.Status = &status
	output := "out"
	md.Output = &output
	return md
}

// nextTurn fetches p's next orchestration item (within 10 s), its lock
// token.
func nextTurn(ctx context.Context, t *testing.T, p cdb.Provider, instance string) string {
	t.Helper()
	var token string
	require.Eventually(t, func() bool {
		item, tok, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		if item == nil {
			return false
		}
		require.Equal(t, instance, item.Instance)
		token = tok
		return true
	}, 10*time.Second, 10*time.Millisecond, "a turn of %s", instance)
	return token
}

// A watch of an instance's end fires when a turn the provider commits
// leaves the instance Completed or Failed, and not for a turn that leaves
// it Running or ContinuedAsNew, nor for another instance's end; stopped
// and fired watches are let go.
func TestAWatchOfAnOrchestrationsEndFiresOnTheCommitThatEndsIt(t *testing.T) {
	for _, pc := range endWatchingProviders() {
		t.Run(pc.name, func(t *testing.T) {
			ctx := rulesContext(t)
			p, watcher, watches := pc.new(t)
			ended := map[string]<-chan struct{}{}
			var stops []func()
			for _, instance := range []string{"completes", "fails", "continues", "never-started"} {
				ch, stop := watcher.WatchOrchestrationEnd(instance)
				ended[instance], stops = ch, append(stops, stop)
			}
			require.Equal(t, 4, watches())

			require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("completes"), 0))
			token := nextTurn(ctx, t, p, "completes")
			require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("completes", 1)}, nil, nil, providertest.TestOrchMetadata(), nil))
			assert.False(t, isClosed(ended["completes"]), "a turn that leaves the instance Running ends nothing")

			require.NoError(t, p.EnqueueForOrchestrator(ctx, cdb.ExternalRaisedMessage{Instance: "completes", Name: "go", Data: "now"}, 0))
			token = nextTurn(ctx, t, p, "completes")
			require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, nil, nil, nil, statusMetadata(cdb.StatusCompleted), nil))
			assert.True(t, isClosed(ended["completes"]), "the turn that completes the instance fires its watch")
			assert.False(t, isClosed(ended["fails"]), "another instance's end fires no watch of this one")

			for instance, status := range map[string]cdb.InstanceStatus{"fails": cdb.StatusFailed, "continues": cdb.StatusContinuedAsNew} {
				require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem(instance), 0))
				token := nextTurn(ctx, t, p, instance)
				require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent(instance, 1)}, nil, nil, statusMetadata(status), nil))
			}
			assert.True(t, isClosed(ended["fails"]), "the turn that fails the instance fires its watch")
			assert.False(t, isClosed(ended["continues"]), "an instance continued as new goes on: its watch waits")
			assert.Equal(t, 2, watches(), "the fired watches are let go; the waiting ones are held")

			for _, stop := range stops {
				stop()
			}
			assert.Zero(t, watches(), "stopped watches are let go")
			assert.False(t, isClosed(ended["never-started"]))
		})
	}
}

// The status a provider reports for a watch its commit closed is the one a
// status read after the commit finds (output and custom status), until the
// watch is stopped; an output stored apart from the instance document is
// not reported (the caller reads it).
func TestTheEndedStatusIsWhatAReadAfterTheCommitFinds(t *testing.T) {
	for _, pc := range endWatchingProviders() {
		t.Run(pc.name, func(t *testing.T) {
			ctx := rulesContext(t)
			p, watcher, _ := pc.new(t)
			reporter := watcher.(cdb.OrchestrationEndReporter)
			ended, stop := watcher.WatchOrchestrationEnd("told")
			_, unreported := reporter.EndedStatus(ended)
			assert.False(t, unreported, "nothing to report before the end")

			require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("told"), 0))
			token := nextTurn(ctx, t, p, "told")
			custom := "almost"
			events := []cdb.Event{providertest.StartedEvent("told", 1),
				{EventID: 2, InstanceID: "told", ExecutionID: 1, DuroxideVersion: "0.1.29", Kind: cdb.CustomStatusUpdated{Status: &custom}}}
			md := statusMetadata(cdb.StatusCompleted)
			require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, events, nil, nil, md, nil))
			require.True(t, isClosed(ended))
			got, ok := reporter.EndedStatus(ended)
			require.True(t, ok)
			assert.Equal(t, cdb.StatusCompleted, got.Status)
			assert.Equal(t, "out", *got.Output)
			assert.Equal(t, "almost", *got.CustomStatus)
			if reader, ok := p.(cdb.StatusReader); ok {
				read, err := reader.ReadOrchestrationStatus(ctx, "told")
				require.NoError(t, err)
				assert.Equal(t, read, got, "what a read after the commit finds")
			}
			stop()
			_, kept := reporter.EndedStatus(ended)
			assert.False(t, kept, "let go with its watch")
		})
	}
}

// An output too large for the instance document is stored apart: the end
// is told, its status is not (the waiter reads it).
func TestTheEndedStatusOfALargeOutputIsNotReported(t *testing.T) {
	ctx := rulesContext(t)
	p := newRulesProvider(t, cdb.NewFakeAccount(cdb.FakeAccountOptions{}), cdb.Config{})
	ended, stop := p.WatchOrchestrationEnd("large")
	defer stop()
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("large"), 0))
	token := nextTurn(ctx, t, p, "large")
	md := statusMetadata(cdb.StatusCompleted)
	large := `"` + strings.Repeat("x", 100*1024) + `"`
	md.Output = &large
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("large", 1)}, nil, nil, md, nil))
	require.True(t, isClosed(ended), "the end is told")
	_, ok := p.EndedStatus(ended)
	assert.False(t, ok, "its output is stored apart: the waiter reads it")
}

// A provider holds an instance (cdb.OrchestrationHolder) from the fetch
// that locks it until its ack, its abandon or its lock's expiry, and only
// that instance; another process on the same account never holds it.
func TestAProviderHoldsAnInstanceFromItsFetchUntilItsLockEnds(t *testing.T) {
	ctx := rulesContext(t)
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	clock := newTestClock()
	p := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, PollInterval: 10 * time.Millisecond, Now: clock.Now})
	other := newRulesProvider(t, acct, cdb.Config{ShortPolling: true, Now: clock.Now})
	require.NoError(t, p.EnqueueForOrchestrator(ctx, providertest.StartItem("held"), 0))
	assert.False(t, p.HoldsOrchestration("held"), "queued, not locked")

	fetch := func() string {
		t.Helper()
		item, token, _, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		require.NoError(t, err)
		require.NotNil(t, item)
		return token
	}
	token := fetch()
	assert.True(t, p.HoldsOrchestration("held"), "locked by the fetch")
	assert.False(t, p.HoldsOrchestration("other"), "another instance")
	assert.False(t, other.HoldsOrchestration("held"), "another process")
	require.NoError(t, p.AbandonOrchestrationItem(ctx, token, 0, true))
	assert.False(t, p.HoldsOrchestration("held"), "given back")

	fetch()
	assert.True(t, p.HoldsOrchestration("held"))
	clock.Advance(time.Minute)
	assert.False(t, p.HoldsOrchestration("held"), "past its lock's expiry by this process's clock")

	clock.Advance(20 * time.Millisecond) // past the poll window
	token = fetch()
	assert.True(t, p.HoldsOrchestration("held"), "locked again")
	require.NoError(t, p.AckOrchestrationItem(ctx, token, 1, []cdb.Event{providertest.StartedEvent("held", 1)}, nil, nil, providertest.TestOrchMetadata(), nil))
	assert.False(t, p.HoldsOrchestration("held"), "acked")
}
