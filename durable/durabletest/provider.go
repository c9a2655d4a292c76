package durabletest

import (
	"context"
	"testing"
	"time"

	"github.com/duroxide-go/cdb"
)

// pollInterval is how often the test provider looks at an idle queue: an
// Advance is seen within it.
const pollInterval = 10 * time.Millisecond

// NewProvider returns a Cosmos DB provider on a new in-memory account
// (NewAccount) whose clocks, the account's and the provider's, are clock.
// It polls an idle queue every 10ms, so what an Advance makes due is taken
// within that, and it is closed when tb ends.
func NewProvider(tb testing.TB, clock *Clock) *cdb.CosmosProvider {
	tb.Helper()
	return NewProviderOn(tb, clock, NewAccount(clock))
}

// NewAccount returns a new in-memory Cosmos DB account on clock, for
// providers (NewProviderOn) that share it as processes share a container.
func NewAccount(clock *Clock) *cdb.FakeAccount {
	return cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
}

// NewProviderOn returns a provider on account, as NewProvider's: another
// process on the same store. A test stops a process as a deploy does, with
// its runtime's Shutdown. It crashes one with a Shutdown whose context is
// already cancelled (its work in flight is abandoned where it stands and
// that work's locks are left to expire), then runs the next process on
// the same account: what the first held comes back once
// its locks expire, which an Advance past the lock timeouts brings about
// at once.
func NewProviderOn(tb testing.TB, clock *Clock, account *cdb.FakeAccount) *cdb.CosmosProvider {
	tb.Helper()
	p, err := cdb.NewProvider(context.Background(), clock.Config(cdb.Config{
		Client:       account.Client(),
		PollInterval: pollInterval,
	}))
	if err != nil {
		tb.Fatalf("durabletest: new provider: %v", err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}
