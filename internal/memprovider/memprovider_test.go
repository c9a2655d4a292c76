package memprovider_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/hostspeed"
	"github.com/duroxide-go/cdb/internal/memprovider"
	"github.com/duroxide-go/cdb/providertest"
)

// factory runs the validation suite against fresh in-memory stores.
type factory struct{}

func (factory) NewProvider(t *testing.T, o providertest.ProviderOptions) cdb.Provider {
	p := memprovider.New(memprovider.Options{LongPolling: o.LongPolling})
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// LockTimeout is duroxide's 1 s, longer in proportion on a slow host
// (internal/hostspeed).
func (factory) LockTimeout() time.Duration { return hostspeed.Scale(time.Second) }

func memory(p cdb.Provider) (*memprovider.Provider, error) {
	mp, ok := p.(*memprovider.Provider)
	if !ok {
		return nil, fmt.Errorf("provider is a %T, not a *memprovider.Provider", p)
	}
	return mp, nil
}

func (factory) CorruptInstanceHistory(_ context.Context, p cdb.Provider, instance string) error {
	mp, err := memory(p)
	if err != nil {
		return err
	}
	mp.CorruptInstanceHistory(instance)
	return nil
}

func (factory) MaxAttemptCount(_ context.Context, p cdb.Provider, instance string) (uint32, error) {
	mp, err := memory(p)
	if err != nil {
		return 0, err
	}
	return mp.MaxAttemptCount(instance), nil
}

func TestValidation(t *testing.T) { providertest.Run(t, factory{}) }

func TestErrorConditions(t *testing.T) {
	providertest.RunModule(t, factory{}, providertest.ErrorConditions())
}

func TestParkRecording(t *testing.T) {
	providertest.RunModule(t, factory{}, providertest.ParkRecording())
}

func TestExclusiveStarts(t *testing.T) {
	providertest.RunModule(t, factory{}, providertest.ExclusiveStarts())
}

func TestTraceCarrying(t *testing.T) {
	providertest.RunModule(t, factory{}, providertest.TraceCarrying())
}

func TestVisibleAtReporting(t *testing.T) {
	providertest.RunModule(t, factory{}, providertest.VisibleAtReporting())
}
