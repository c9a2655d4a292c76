package cdb_test

import (
	"context"
	"crypto/x509"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/telemetrytest"
)

// A fake account's client takes telemetry like any other: the meter given
// through ClientWith counts the request the client sends.
func TestFakeAccountClientWithReportsToTheTelemetryGiven(t *testing.T) {
	rec := telemetrytest.NewRecorder()
	client, err := cdb.NewFakeAccount(cdb.FakeAccountOptions{}).ClientWith(cdb.ClientOptions{
		Telemetry: cdb.Telemetry{Meter: rec},
	})
	require.NoError(t, err)

	require.NoError(t, client.EnsureDatabase(context.Background(), "shop"))

	assert.Positive(t, rec.Sum("cdb.client.requests", nil), "the client's request counter saw the database's creation")
}

// The account supplies the key and the transport; options that would
// replace them are refused, naming them, rather than silently ignored.
func TestFakeAccountClientWithRefusesTheAccountsOwnOptions(t *testing.T) {
	account := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	_, err := account.ClientWith(cdb.ClientOptions{
		Key: account.Key(), Transport: account.Transport(), TLS: cdb.TLSOptions{RootCAs: x509.NewCertPool()},
	})
	require.ErrorIs(t, err, cdb.ErrInvalidClientConfig)
	assert.EqualError(t, err, "cdb: FakeAccount.ClientWith: Key, Transport, TLS: the fake account supplies its own key and in-process transport; leave these unset")
}
