package cdb

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// TokenCredential supplies Microsoft Entra ID (AAD) access tokens for the
// Cosmos DB data plane. It is an interface so that azidentity, or anything
// else, can be plugged in without this module depending on it. Token is called
// before every attempt; implementations cache and refresh as they see fit.
type TokenCredential interface {
	// Token returns a bearer token for the Cosmos DB data plane, fresh
	// enough for the request about to be sent; it is called per attempt.
	Token(ctx context.Context) (string, error)
}

// authorizer produces the Authorization header value of one attempt.
type authorizer interface {
	authorize(ctx context.Context, verb, resourceType, resourceLink, date string) (string, error)
}

// masterKey signs requests with the account's master key.
// It is only ever held by pointer so that printing a Client shows an address,
// never the key bytes; String and GoString cover direct printing.
type masterKey struct {
	key []byte // base64-decoded
}

// newMasterKey decodes and checks a base64 master key. Its errors describe
// the problem without ever echoing the key.
func newMasterKey(encoded string) (*masterKey, error) {
	if strings.TrimSpace(encoded) == "" {
		return nil, invalidConfig("key", "invalid key: empty")
	}
	key, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		// The decoder's message names only an offset, but say less anyway;
		// the cause stays reachable without being shown.
		refusal := invalidConfig("key", "invalid key: not valid standard base64 (%d characters)", len(encoded))
		refusal.Cause = err
		return nil, refusal
	}
	if len(key) == 0 {
		return nil, invalidConfig("key", "invalid key: empty after base64 decoding")
	}
	return &masterKey{key: key}, nil
}

func (k *masterKey) String() string   { return "masterKey(redacted)" }
func (k *masterKey) GoString() string { return "masterKey(redacted)" }

func (k *masterKey) authorize(_ context.Context, verb, resourceType, resourceLink, date string) (string, error) {
	sig := k.signature(verb, resourceType, resourceLink, date)
	return url.QueryEscape("type=master&ver=1.0&sig=" + sig), nil
}

// signature is the base64 HMAC-SHA256 of the string to sign. resourceLink is
// the unescaped link; a RID-based link must already be lowercased (see
// ridLink).
func (k *masterKey) signature(verb, resourceType, resourceLink, date string) string {
	mac := hmac.New(sha256.New, k.key)
	mac.Write([]byte(stringToSign(verb, resourceType, resourceLink, date)))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// stringToSign is the signed payload: verb, resource type and date lowercased,
// the resource link exactly as given (name-based links keep their case), and
// an empty last line.
func stringToSign(verb, resourceType, resourceLink, date string) string {
	return strings.ToLower(verb) + "\n" +
		strings.ToLower(resourceType) + "\n" +
		resourceLink + "\n" +
		strings.ToLower(date) + "\n" +
		"" + "\n"
}

// ridLink is the signing form of a RID-based resource link: the service
// compares RIDs case-insensitively and signs them lowercased. Name-based
// links must not go through here, their case is significant.
func ridLink(link string) string { return strings.ToLower(link) }

// aadToken signs requests with an Entra ID token.
type aadToken struct {
	cred TokenCredential
}

func (a aadToken) authorize(ctx context.Context, _, _, _, _ string) (string, error) {
	tok, err := a.cred.Token(ctx)
	if err != nil {
		return "", fmt.Errorf("cdb: acquiring an Entra ID token: %w", err)
	}
	if tok == "" {
		return "", errors.New("cdb: acquiring an Entra ID token: empty token")
	}
	// Sent unescaped, as the azcosmos SDK does.
	return "type=aad&ver=1.0&sig=" + tok, nil
}

// resourceRef names what a request addresses, in the two forms the protocol
// needs: the link that is signed (raw ids) and the URL path (escaped ids).
type resourceRef struct {
	resourceType string // "", "dbs", "colls", "docs", "pkranges"
	link         string // signed; no leading or trailing slash, ids raw
	path         string // URL path, ids path-escaped per segment
}

// pathOf joins raw segments into an unescaped link and an escaped URL path.
func pathOf(segments ...string) (link, path string) {
	escaped := make([]string, len(segments))
	for i, s := range segments {
		escaped[i] = url.PathEscape(s)
	}
	return strings.Join(segments, "/"), "/" + strings.Join(escaped, "/")
}

// The resource type and link of each operation, per the table in A.1.

func accountRef() resourceRef { return resourceRef{resourceType: "", link: "", path: "/"} }

func databasesFeedRef() resourceRef { return resourceRef{resourceType: "dbs", link: "", path: "/dbs"} }

func databaseRef(db string) resourceRef {
	link, path := pathOf("dbs", db)
	return resourceRef{resourceType: "dbs", link: link, path: path}
}

func containersFeedRef(db string) resourceRef {
	link, path := pathOf("dbs", db)
	return resourceRef{resourceType: "colls", link: link, path: path + "/colls"}
}

func containerRef(db, coll string) resourceRef {
	link, path := pathOf("dbs", db, "colls", coll)
	return resourceRef{resourceType: "colls", link: link, path: path}
}

func documentsFeedRef(db, coll string) resourceRef {
	link, path := pathOf("dbs", db, "colls", coll)
	return resourceRef{resourceType: "docs", link: link, path: path + "/docs"}
}

func documentRef(db, coll, id string) resourceRef {
	link, path := pathOf("dbs", db, "colls", coll, "docs", id)
	return resourceRef{resourceType: "docs", link: link, path: path}
}

func pkRangesRef(db, coll string) resourceRef {
	link, path := pathOf("dbs", db, "colls", coll)
	return resourceRef{resourceType: "pkranges", link: link, path: path + "/pkranges"}
}
