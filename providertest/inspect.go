package providertest

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// Reads the tests check a store's state with; where duroxide reads "not
// there" from any error, only the cdb sentinel for it does here, so a
// broken read cannot pass for an absent instance.

// Admin returns p's ProviderAdmin, failing the test clearly if p has none.
func Admin(t *testing.T, p cdb.Provider) cdb.ProviderAdmin {
	t.Helper()
	admin, ok := p.Admin()
	require.True(t, ok, "this test needs the provider's ProviderAdmin (Admin() returned false)")
	return admin
}

// readOrEmpty is instance's history, empty when the instance is not there.
func readOrEmpty(ctx context.Context, t *testing.T, p cdb.Provider, instance string) []cdb.Event {
	t.Helper()
	events, err := p.Read(ctx, instance)
	if isNotFound(t, err, "Read", instance) {
		return nil
	}
	return events
}

// instanceExists reports whether GetInstanceInfo finds instance, so a
// broken GetInstanceInfo cannot pass for a deletion.
func instanceExists(ctx context.Context, t *testing.T, admin cdb.ProviderAdmin, instance string) bool {
	t.Helper()
	_, err := admin.GetInstanceInfo(ctx, instance)
	return !isNotFound(t, err, "GetInstanceInfo", instance)
}

// isNotFound reports whether err, from method op on instance, says the
// instance is not there (cdb.ErrInstanceNotFound); any other error fails
// the test.
func isNotFound(t *testing.T, err error, op, instance string) bool {
	t.Helper()
	if errors.Is(err, cdb.ErrInstanceNotFound) {
		return true
	}
	require.NoError(t, err, "%s(%s): only not-found means absent", op, instance)
	return false
}
