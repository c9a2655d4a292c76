package providertest

import (
	"context"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/cosmoshooks"
)

// ContainerHooks are the Factory's two fault-injection hooks for
// *cdb.CosmosProvider, done through the provider's container, so they work
// on any Cosmos DB the provider runs on (the in-memory account, an emulator
// or an account). A Factory of Cosmos DB providers embeds it; runtime tests
// use it to corrupt an instance's history.
type ContainerHooks struct{}

// CorruptInstanceHistory overwrites the stored events of instance with bytes
// that do not decode, as a damaged store would (cosmoshooks).
func (ContainerHooks) CorruptInstanceHistory(ctx context.Context, p cdb.Provider, instance string) error {
	return cosmoshooks.CorruptInstanceHistory(ctx, p, instance)
}

// MaxAttemptCount is the highest attempt count of instance's orchestrator
// messages (cosmoshooks).
func (ContainerHooks) MaxAttemptCount(ctx context.Context, p cdb.Provider, instance string) (uint32, error) {
	return cosmoshooks.MaxAttemptCount(ctx, p, instance)
}
