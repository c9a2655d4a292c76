package providertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/memprovider"
)

// withoutExclusiveStarts is a factory of providers that hide the optional
// cdb.ExclusiveStarter: only cdb.Provider's methods are seen.
type withoutExclusiveStarts struct{}

func (withoutExclusiveStarts) NewProvider(t *testing.T, _ ProviderOptions) cdb.Provider {
	p := memprovider.New(memprovider.Options{})
	t.Cleanup(func() { _ = p.Close() })
	return struct{ cdb.Provider }{p}
}

func (withoutExclusiveStarts) LockTimeout() time.Duration { return time.Second }

func (withoutExclusiveStarts) CorruptInstanceHistory(context.Context, cdb.Provider, string) error {
	return nil
}

func (withoutExclusiveStarts) MaxAttemptCount(context.Context, cdb.Provider, string) (uint32, error) {
	return 0, nil
}

// A provider without the capability skips the module's tests rather than
// failing them.
func TestExclusiveStartsSkipOnAProviderWithoutTheCapability(t *testing.T) {
	skipped := false
	t.Run("free id", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		TestAStartOfAFreeIDIsEnqueued(t, withoutExclusiveStarts{})
	})
	assert.True(t, skipped)
}
