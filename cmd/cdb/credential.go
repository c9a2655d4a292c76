package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/joho/godotenv"

	"github.com/duroxide-go/cdb"
)

// How the CLI signs its requests: with the master key, or with a Microsoft
// Entra ID token, which an account that disables key authentication
// (disableLocalAuth) requires. The token comes from the Azure CLI's
// signed-in identity or, for a pipeline that already holds one, from the
// environment. The module does not depend on azidentity: the Azure CLI is
// run as a program.

// The -auth values, and the variables that give them.
const (
	authKey      = "key"   // the master key (-key, COSMOS_KEY)
	authAzureCLI = "azcli" // az account get-access-token
	authToken    = "token" // the bearer token in COSMOS_ACCESS_TOKEN

	envAuth        = "COSMOS_AUTH"
	envAccessToken = "COSMOS_ACCESS_TOKEN"
)

// authHelp is the -auth flag's usage text.
const authHelp = "how to sign: key, azcli (the Azure CLI's signed-in identity, Entra ID) or token " +
	"(an Entra ID token in $" + envAccessToken + ") (default $" + envAuth + " or key)"

// dotEnvLookup reads a variable as cdb.ConfigFromEnv does: the
// environment, then a .env file in the working directory.
func dotEnvLookup() (func(string) string, error) {
	file, err := godotenv.Read(".env")
	if errors.Is(err, os.ErrNotExist) {
		file, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read .env: %w", err)
	}
	return func(name string) string {
		if v, ok := os.LookupEnv(name); ok {
			return v
		}
		return file[name]
	}, nil
}

// applyAuth makes cfg sign as method says: it keeps the key, or replaces
// it with an Entra ID credential. lookup reads the environment.
func applyAuth(cfg *cdb.Config, method string, lookup func(string) string) error {
	switch method {
	case authKey:
		if cfg.Key == "" {
			return usageError{msg: "no key: set " + cdb.EnvKey + " or pass -key (or sign with Entra ID: -auth azcli)"}
		}
		return nil
	case authAzureCLI:
		cred, err := newAzureCLICredential(cfg.Endpoint)
		if err != nil {
			return err
		}
		cfg.Key, cfg.ClientOptions.Credential = "", cred
		return nil
	case authToken:
		token := strings.TrimSpace(lookup(envAccessToken))
		if token == "" {
			return usageError{msg: "-auth token signs with the Entra ID token in " + envAccessToken + ", which is not set"}
		}
		cfg.Key, cfg.ClientOptions.Credential = "", staticToken{token: token}
		return nil
	}
	return usageError{msg: fmt.Sprintf("-auth (%s) must be key, azcli or token, got %q", envAuth, method)}
}

// signedWithWhat names cfg's credential in a sentence.
func signedWithWhat(cfg cdb.Config) string {
	if cfg.ClientOptions.Credential != nil {
		return "an Entra ID token"
	}
	return "the master key"
}

// staticToken is a bearer token given whole: it is used until the service
// refuses it. It prints as redacted.
type staticToken struct{ token string }

func (s staticToken) Token(context.Context) (string, error) { return s.token, nil }

func (s staticToken) String() string   { return "staticToken(redacted)" }
func (s staticToken) GoString() string { return "staticToken(redacted)" }

// azureCLIRefreshMargin is how long before its expiry a token is replaced,
// as azcore's bearer token policy does: a request signed just before the
// expiry must still be accepted when it arrives.
const azureCLIRefreshMargin = 5 * time.Minute

// azureCLITimeout bounds one run of az, as azidentity's AzureCLICredential
// bounds it: a wedged az must not hang a command.
const azureCLITimeout = 10 * time.Second

// cosmosFallbackResource is the resource the SDKs ask for when the
// account's own is refused as unknown (AADSTS500011), as the .NET SDK's
// scope provider does.
const cosmosFallbackResource = "https://cosmos.azure.com"

// azureCLICredential is the Azure CLI's signed-in identity: it runs
// `az account get-access-token` for the account's data-plane resource
// (https://<account host>, the scope azcosmos asks for without its
// "/.default") and keeps the token until azureCLIRefreshMargin before it
// expires. One az runs at a time; a caller waits for it only as long as
// its context lets it. The token is never printed.
type azureCLICredential struct {
	az       string // the az executable
	resource string
	now      func() time.Time
	// turn is held by the caller that reads or refreshes the token.
	turn    chan struct{}
	token   string
	expires time.Time
}

// newAzureCLICredential is the Azure CLI credential for endpoint's
// account. A missing az is said now, not at the first request.
func newAzureCLICredential(endpoint string) (*azureCLICredential, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Hostname() == "" {
		return nil, usageError{msg: "-auth azcli needs the account's endpoint as a URL, https://<account>.documents.azure.com:443/"}
	}
	az, err := exec.LookPath("az")
	if err != nil {
		return nil, usageError{msg: azureCLIMissing}
	}
	return &azureCLICredential{az: az, resource: "https://" + u.Hostname(), now: time.Now, turn: make(chan struct{}, 1)}, nil
}

// azureCLIMissing is what a missing az means and what to do.
const azureCLIMissing = `-auth azcli runs the Azure CLI, but "az" is not on PATH: ` +
	`install it (https://aka.ms/installazurecli) and run "az login", or sign with -auth key or -auth token`

func (c *azureCLICredential) String() string   { return "azureCLICredential(" + c.resource + ")" }
func (c *azureCLICredential) GoString() string { return c.String() }

// Token is the cached token, or a new one from az when it is missing or
// expires within azureCLIRefreshMargin.
func (c *azureCLICredential) Token(ctx context.Context) (string, error) {
	select {
	case c.turn <- struct{}{}:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	defer func() { <-c.turn }()
	if c.token != "" && c.now().Add(azureCLIRefreshMargin).Before(c.expires) {
		return c.token, nil
	}
	token, expires, err := c.fetch(ctx, c.resource)
	var refused azureCLIRefusal
	if errors.As(err, &refused) && refused.unknownResource() && c.resource != cosmosFallbackResource {
		c.resource = cosmosFallbackResource
		token, expires, err = c.fetch(ctx, c.resource)
	}
	if err != nil {
		return "", err
	}
	c.token, c.expires = token, expires
	return token, nil
}

// fetch runs az for a token of resource and reads its answer.
func (c *azureCLICredential) fetch(ctx context.Context, resource string) (token string, expires time.Time, err error) {
	ctx, cancel := context.WithTimeout(ctx, azureCLITimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.az, "account", "get-access-token", "--output", "json", "--resource", resource)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	switch {
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist):
		return "", time.Time{}, azureCLIError{msg: azureCLIMissing}
	case err != nil && ctx.Err() != nil:
		return "", time.Time{}, fmt.Errorf("az account get-access-token did not answer: %w", context.Cause(ctx))
	case err != nil:
		return "", time.Time{}, azureCLIRefusal{stderr: stderr.String()}
	}
	return parseAzureCLIToken(out, c.now)
}

// azureCLIToken is what `az account get-access-token -o json` prints, the
// fields this reads of it. ExpiresOnUnix (az 2.54 and later) is POSIX
// seconds; ExpiresOn is the local time without a zone, or RFC 3339 in
// Cloud Shell.
type azureCLIToken struct {
	AccessToken   string          `json:"accessToken"`
	ExpiresOn     string          `json:"expiresOn"`
	ExpiresOnUnix json.RawMessage `json:"expires_on"`
}

// parseAzureCLIToken reads az's answer. Its errors never quote the answer,
// which holds the token.
func parseAzureCLIToken(out []byte, now func() time.Time) (string, time.Time, error) {
	var t azureCLIToken
	if err := json.Unmarshal(out, &t); err != nil || t.AccessToken == "" {
		return "", time.Time{}, errors.New("az account get-access-token printed no accessToken in JSON: check the Azure CLI (az version)")
	}
	expires, ok := azureCLIExpiry(t)
	if !ok {
		// Without an expiry the token is used once: the next request
		// asks az again, which answers from its own cache.
		expires = now()
	}
	return t.AccessToken, expires, nil
}

// azureCLIExpiry is the token's expiry: expires_on when az gives it (a
// number, or a number in a string), else expiresOn.
func azureCLIExpiry(t azureCLIToken) (time.Time, bool) {
	if unix, err := strconv.ParseInt(strings.Trim(string(t.ExpiresOnUnix), `"`), 10, 64); err == nil {
		return time.Unix(unix, 0), true
	}
	if at, err := time.Parse(time.RFC3339, t.ExpiresOn); err == nil {
		return at, true
	}
	if at, err := time.ParseInLocation("2006-01-02 15:04:05.999999", t.ExpiresOn, time.Local); err == nil {
		return at, true
	}
	return time.Time{}, false
}

// azureCLIError is the Azure CLI failing the CLI's way: a sentence that
// says what to run, and nothing of az's output but its first error line.
type azureCLIError struct{ msg string }

func (e azureCLIError) Error() string { return e.msg }

// azureCLIRefusal is az exiting with an error: not signed in, or signed in
// where the account's resource is unknown or refused.
type azureCLIRefusal struct{ stderr string }

func (e azureCLIRefusal) Error() string {
	if strings.Contains(e.stderr, "az login") {
		return `the Azure CLI is not signed in: run "az login" (or sign with -auth key or -auth token)`
	}
	return "az account get-access-token failed: " + firstErrorLine(e.stderr)
}

// unknownResource reports Entra ID refusing the account's resource as one
// it does not know (AADSTS500011), after which the SDKs ask for the
// general Cosmos DB resource.
func (e azureCLIRefusal) unknownResource() bool { return strings.Contains(e.stderr, "AADSTS500011") }

// firstErrorLine is az's first line that says something, cut to a line's
// length.
func firstErrorLine(stderr string) string {
	for _, line := range strings.Split(stderr, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return fitWidth(line, 200)
		}
	}
	return "no message"
}

// credentialProblem is the Azure CLI's failure behind err, when it is one,
// with nothing of the request around it: its sentence already says what
// to do. It is nil for any other error.
func credentialProblem(err error) error {
	var missing azureCLIError
	if errors.As(err, &missing) {
		return missing
	}
	var refused azureCLIRefusal
	if errors.As(err, &refused) {
		return refused
	}
	return nil
}

// subStatusLocalAuthDisabled is the substatus of a 401 to a master key on
// an account that disables key authentication (disableLocalAuth).
const subStatusLocalAuthDisabled = 5202

// keysDisabled reports a 401 because the account takes no keys at all: it
// answers "Local Authorization is disabled. Use an AAD token to authorize
// all requests.", with substatus 5202 (or, from some gateways, none).
func keysDisabled(err error) bool {
	var ce *cdb.CosmosError
	return errors.As(err, &ce) && ce.StatusCode == 401 &&
		(ce.SubStatusCode == subStatusLocalAuthDisabled || strings.Contains(ce.Message, "Local Authorization is disabled"))
}

// signWithEntraID is what to do about keysDisabled.
const signWithEntraID = "sign with Entra ID: -auth azcli (after az login) or -auth token (" + envAccessToken + "), or " + envAuth + "=azcli"

// Substatus codes of a 403 from Cosmos DB's data-plane role-based access
// control, named as the SDKs name them: the identity has no role that
// allows the request.
const (
	subStatusRBACUnauthorizedMetadataRequest      = 5301
	subStatusRBACUnauthorizedNameBasedDataRequest = 5302
	subStatusRBACUnauthorizedRIDBasedDataRequest  = 5303
	subStatusRBACRequestWasNotAuthorized          = 5400
)

// lacksDataPlaneRole reports a 403 because the Entra ID identity has no
// data-plane role that allows the request.
func lacksDataPlaneRole(err error) bool {
	var ce *cdb.CosmosError
	if !errors.As(err, &ce) || ce.StatusCode != 403 {
		return false
	}
	switch ce.SubStatusCode {
	case subStatusRBACUnauthorizedMetadataRequest, subStatusRBACUnauthorizedNameBasedDataRequest,
		subStatusRBACUnauthorizedRIDBasedDataRequest, subStatusRBACRequestWasNotAuthorized:
		return true
	}
	return false
}

// refusedTokenAction is what to do about a 401 to an Entra ID token.
const refusedTokenAction = "sign in again (az login, for -auth azcli) or give " + envAccessToken +
	" (-auth token) a fresh token for this account, https://<account>.documents.azure.com/.default; check this machine's clock"

// assignDataPlaneRole is what to do about lacksDataPlaneRole.
const assignDataPlaneRole = `give the identity the data-plane role "Cosmos DB Built-in Data Contributor": ` +
	`az cosmosdb sql role assignment create --account-name ACCOUNT --resource-group GROUP ` +
	`--role-definition-id 00000000-0000-0000-0000-000000000002 --principal-id "$(az ad signed-in-user show --query id -o tsv)" --scope / ` +
	`(Azure roles such as Owner or Contributor grant no data access)`
