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
// (cdb.NewFakeAccount) whose clocks, the account's and the provider's, are
// clock. It polls an idle queue every 10ms, so what an Advance makes due is
// taken within that, and it is closed when tb ends.
func NewProvider(tb testing.TB, clock *Clock) *cdb.CosmosProvider {
	tb.Helper()
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{Now: clock.Now})
	p, err := cdb.NewProvider(context.Background(), clock.Config(cdb.Config{
		Client:       acct.Client(),
		PollInterval: pollInterval,
	}))
	if err != nil {
		tb.Fatalf("durabletest: new provider: %v", err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}
