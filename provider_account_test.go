package cdb_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// accountRewriter answers the account read (GET /) with the fake's answer
// changed by edit, to present settings the fake account does not have.
type accountRewriter struct {
	next http.RoundTripper
	edit func(map[string]any)
}

func (a accountRewriter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := a.next.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || req.URL.Path != "/" {
		return resp, err
	}
	var account map[string]any
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(body, &account); err != nil {
		return nil, err
	}
	a.edit(account)
	edited, err := json.Marshal(account)
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(edited))
	resp.ContentLength = int64(len(edited))
	resp.Header.Del("Content-Length")
	return resp, nil
}

func providerOnAccountWith(t *testing.T, edit func(map[string]any)) (*cdb.CosmosProvider, error) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	client, err := cdb.NewClient(acct.Endpoint(), cdb.ClientOptions{Key: acct.Key(), Transport: accountRewriter{next: acct.Transport(), edit: edit}})
	require.NoError(t, err)
	p, err := cdb.NewProvider(containerTestContext(t), cdb.Config{Client: client, ShortPolling: true})
	if p != nil {
		t.Cleanup(func() { _ = p.Close() })
	}
	return p, err
}

func consistency(level string) func(map[string]any) {
	return func(account map[string]any) {
		account["userConsistencyPolicy"] = map[string]any{"defaultConsistencyLevel": level}
	}
}

// An account whose reads ignore session tokens, or whose locks could be
// taken in two regions at once, is refused at startup with what to change.
func TestNewProviderRefusesAnAccountItCannotRunOn(t *testing.T) {
	for _, tc := range []struct {
		name, says string
		edit       func(map[string]any)
	}{
		{"eventual consistency", "Eventual", consistency("Eventual")},
		{"consistent prefix", "ConsistentPrefix", consistency("ConsistentPrefix")},
		{"multi-region writes", "multi-region writes", func(a map[string]any) { a["enableMultipleWriteLocations"] = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := providerOnAccountWith(t, tc.edit)
			require.Error(t, err)
			assert.ErrorIs(t, err, cdb.ErrAccountUnsupported)
			assert.ErrorContains(t, err, tc.says)
			assert.ErrorContains(t, err, "docs/real-account.md")
		})
	}
}

func TestNewProviderRunsOnSessionOrStrongerConsistency(t *testing.T) {
	for _, level := range []string{"Session", "BoundedStaleness", "Strong"} {
		t.Run(level, func(t *testing.T) {
			_, err := providerOnAccountWith(t, consistency(level))
			require.NoError(t, err)
		})
	}
}
