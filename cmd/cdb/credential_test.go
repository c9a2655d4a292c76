package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/fakecosmos"
)

// entraToken is a recognisable Entra ID token that must never show up in
// output.
const entraToken = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.ENTRA-TOKEN-NEVER-PRINT-ME.c2ln"

func assertNoToken(t *testing.T, what string, outputs ...string) {
	t.Helper()
	for _, s := range outputs {
		assert.NotContains(t, s, "ENTRA-TOKEN", "%s prints the token", what)
	}
}

// appContainer creates the application's container with the key, as an
// identity with a control-plane role does before an application signs
// with Entra ID, which may not create it.
func appContainer(t *testing.T, endpoint, key string) {
	t.Helper()
	ctx := context.Background()
	cl, err := cdb.NewClient(endpoint, cdb.ClientOptions{Key: key})
	require.NoError(t, err)
	require.NoError(t, cl.EnsureDatabase(ctx, "duroxide"))
	cc, err := cl.NewContainer("duroxide", "duroxide")
	require.NoError(t, err)
	_, err = cc.Create(ctx, cdb.ProviderContainerProperties("duroxide"))
	require.NoError(t, err)
}

// The doctor signs with an Entra ID token (-auth token, or COSMOS_AUTH)
// on an emulator that accepts it: the account refuses the token metadata
// writes (403/5300), so bootstrap and the steps that write are skipped
// with that reason, the application's container is checked, the run
// passes and says "Entra ID". The key, set too, is not used.
func TestBinaryDoctorSignsWithAnEntraIDToken(t *testing.T) {
	endpoint, key, _, stop := startEmulator(t, "-aad-token", entraToken)
	defer stop()
	appContainer(t, endpoint, key)
	for name, auth := range map[string]binary{
		"flag":        cli("doctor", "-o", "json", "-auth", "token").with("COSMOS_KEY=" + fakeKey),
		"environment": cli("doctor", "-o", "json").with("COSMOS_AUTH=token"),
	} {
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := auth.with("COSMOS_ENDPOINT="+endpoint, "COSMOS_ACCESS_TOKEN="+entraToken).run(t)
			require.Equal(t, 0, code, stderr)
			r := parseDoctorReport(t, stdout)
			assert.Equal(t, "Entra ID", r.Auth)
			assert.Equal(t, "pass", r.step("connect").Result)
			assert.Contains(t, r.step("connect").Detail, "signed with an Entra ID token")
			boot := r.step("bootstrap")
			assert.Equal(t, "skip", boot.Result)
			assert.Equal(t, 403, boot.Status)
			assert.Equal(t, 5300, boot.Substatus, "the service's answer to a data-plane role's metadata write")
			assert.Contains(t, boot.Detail, "this credential may not create databases or containers: the account answered 403")
			app := r.step("app-container")
			assert.Equal(t, "pass", app.Result, app.Detail)
			require.NotNil(t, r.AppContainer)
			assert.Equal(t, "/pk", r.AppContainer.PartitionKey)
			// Reading the container's throughput writes nothing: it runs.
			assert.Equal(t, "pass", r.step("throughput").Result, r.step("throughput").Detail)
			for _, s := range r.Steps[3 : len(r.Steps)-1] {
				if s.Name == "throughput" {
					continue
				}
				assert.Equal(t, "skip", s.Result, s.Name)
				assert.Equal(t, "not run: "+metadataRefusedSkip, s.Detail, s.Name)
			}
			assert.Equal(t, "skip", r.step("cleanup").Result)
			assert.Zero(t, r.Failed)
			assertNoToken(t, "cdb doctor", stdout, stderr)
			assertNoKey(t, "cdb doctor", stdout, stderr)
		})
	}
}

// A token the account does not accept fails with the 401 sentence, in a
// token's words, and without the token: in a command and in the doctor.
func TestBinaryAWrongTokenSaysSoWithoutTheToken(t *testing.T) {
	endpoint, key, _, stop := startEmulator(t, "-aad-token", "the-right-one")
	defer stop()
	appContainer(t, endpoint, key)
	env := []string{"COSMOS_ENDPOINT=" + endpoint, "COSMOS_AUTH=token", "COSMOS_ACCESS_TOKEN=" + entraToken}

	code, stdout, stderr := cli("metrics").with(env...).run(t)
	assert.Equal(t, 1, code)
	assert.Empty(t, stdout)
	assert.Regexp(t, "^"+regexp.QuoteMeta("cdb metrics: "+endpoint+" refused the request's Entra ID token (401 Unauthorized): "+
		"it is expired or not for this account; check COSMOS_ACCESS_TOKEN (-auth token) or the Azure CLI's login (-auth azcli). "+
		`The server said: "The AAD token in the authorization header is not valid for this account."`)+
		` \(activity id [0-9a-f-]{36}\)\n$`, stderr)
	assertNoToken(t, "cdb metrics", stdout, stderr)

	code, stdout, stderr = cli("bench", "-duration", "1s").with(env...).run(t)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "cdb bench: "+endpoint+" refused the request's Entra ID token (401 Unauthorized)")
	assertNoToken(t, "cdb bench", stdout, stderr)

	code, stdout, stderr = cli("doctor", "-o", "json").with(env...).run(t)
	assert.Equal(t, 1, code, stderr)
	connect := parseDoctorReport(t, stdout).step("connect")
	assert.Equal(t, "fail", connect.Result)
	assert.Equal(t, 401, connect.Status)
	assert.Equal(t, "the account refused the Entra ID token", connect.Meaning)
	assert.Equal(t, refusedTokenAction, connect.Action)
	assertNoToken(t, "cdb doctor", stdout, stderr)
}

// An identity without a data-plane role is refused 403/5301 (the real
// service refuses even the account read): the doctor and the commands
// say which role to assign and how.
func TestBinarySaysWhichRoleAnIdentityWithoutOneNeeds(t *testing.T) {
	srv := fakecosmos.New(fakecosmos.Options{AADToken: entraToken})
	hs := httptest.NewServer(srv)
	defer hs.Close()
	srv.SetEndpoint(hs.URL + "/")
	srv.InjectFault(fakecosmos.Fault{Match: func(ri fakecosmos.RequestInfo) bool { return ri.Op == fakecosmos.OpReadAccount },
		Status: http.StatusForbidden, SubStatus: subStatusRBACUnauthorizedMetadataRequest})
	env := []string{"COSMOS_ENDPOINT=" + hs.URL, "COSMOS_AUTH=token", "COSMOS_ACCESS_TOKEN=" + entraToken}

	code, stdout, stderr := cli("doctor", "-o", "json").with(env...).run(t)
	assert.Equal(t, 1, code, stderr)
	connect := parseDoctorReport(t, stdout).step("connect")
	assert.Equal(t, "fail", connect.Result)
	assert.Equal(t, 5301, connect.Substatus)
	assert.Equal(t, "the account refused the Entra ID identity: it has no data-plane role that allows this request", connect.Meaning)
	assert.Equal(t, assignDataPlaneRole, connect.Action)
	assert.Contains(t, connect.Action, `"Cosmos DB Built-in Data Contributor": az cosmosdb sql role assignment create`)

	code, stdout, stderr = cli("metrics").with(env...).run(t)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "cdb metrics: "+hs.URL+" refused the request (403): the Entra ID identity has no data-plane role that allows it; "+assignDataPlaneRole)
	assertNoToken(t, "cdb", stdout, stderr)
}

// fakeAzureCLI writes an az into a new directory that answers
// `az account get-access-token` as the Azure CLI does: the token
// "<prefix>-<run>" (run counts its invocations, in the file "runs"),
// expiring at expiresOn (POSIX seconds), its arguments appended to the
// file "args". It returns the directory, for PATH.
func fakeAzureCLI(t *testing.T, prefix string, expiresOn time.Time) string {
	t.Helper()
	dir := t.TempDir()
	script := fmt.Sprintf(`#!/bin/sh
dir=%q
runs=$(( $(cat "$dir/runs" 2>/dev/null || echo 0) + 1 ))
echo "$runs" > "$dir/runs"
echo "$*" >> "$dir/args"
printf '{"accessToken": "%s-%%s", "expiresOn": "2099-01-01 00:00:00.000000", "expires_on": %d, "subscription": "s", "tenant": "t", "tokenType": "Bearer"}\n' "$runs"
`, dir, prefix, expiresOn.Unix())
	require.NoError(t, os.WriteFile(filepath.Join(dir, "az"), []byte(script), 0o755))
	return dir
}

// azRuns is how many times the fake az ran.
func azRuns(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "runs"))
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return n
}

// -auth azcli signs with the Azure CLI's token for the account's
// resource: az runs once for all of a command's requests.
func TestBinarySignsWithTheAzureCLIsToken(t *testing.T) {
	endpoint, key, _, stop := startEmulator(t, "-aad-token", entraToken+"-1")
	defer stop()
	appContainer(t, endpoint, key)
	az := fakeAzureCLI(t, entraToken, time.Now().Add(time.Hour))
	code, stdout, stderr := cli("metrics", "-auth", "azcli").with("COSMOS_ENDPOINT="+endpoint, "PATH="+az+":"+os.Getenv("PATH")).run(t)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "instances")
	assert.Equal(t, 1, azRuns(t, az), "one token for every request")
	args, err := os.ReadFile(filepath.Join(az, "args"))
	require.NoError(t, err)
	assert.Equal(t, "account get-access-token --output json --resource https://127.0.0.1\n", string(args))
	assertNoToken(t, "cdb metrics", stdout, stderr)
}

// The Azure CLI's token is kept until five minutes before it expires, then
// az runs again for a new one.
func TestAzureCLITokenIsCachedUntilItNearlyExpires(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	az := fakeAzureCLI(t, "token", now.Add(time.Hour))
	t.Setenv("PATH", az+":"+os.Getenv("PATH"))
	cred, err := newAzureCLICredential("https://myaccount.documents.azure.com:443/")
	require.NoError(t, err)
	cred.now = func() time.Time { return now }
	ctx := context.Background()

	for range 3 {
		token, err := cred.Token(ctx)
		require.NoError(t, err)
		assert.Equal(t, "token-1", token)
	}
	assert.Equal(t, 1, azRuns(t, az))

	now = now.Add(54 * time.Minute) // six minutes left: still good
	token, err := cred.Token(ctx)
	require.NoError(t, err)
	assert.Equal(t, "token-1", token)

	now = now.Add(2 * time.Minute) // four minutes left: refreshed
	token, err = cred.Token(ctx)
	require.NoError(t, err)
	assert.Equal(t, "token-2", token)
	assert.Equal(t, 2, azRuns(t, az))
	args, err := os.ReadFile(filepath.Join(az, "args"))
	require.NoError(t, err)
	assert.Equal(t, strings.Repeat("account get-access-token --output json --resource https://myaccount.documents.azure.com\n", 2), string(args),
		"the account's data-plane resource, without the port")
	assert.NotContains(t, fmt.Sprintf("%v %+v %#v", cred, cred, cred), "token-", "printing the credential shows no token")
}

// A caller that cannot wait for another's az run gets its context's
// error, not a hang.
func TestAzureCLITokenWaitsOnlyAsLongAsTheContext(t *testing.T) {
	az := fakeAzureCLI(t, "token", time.Now().Add(time.Hour))
	t.Setenv("PATH", az+":"+os.Getenv("PATH"))
	cred, err := newAzureCLICredential("https://myaccount.documents.azure.com:443/")
	require.NoError(t, err)
	cred.turn <- struct{}{} // another caller runs az
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = cred.Token(ctx)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, azRuns(t, az))
}

// az's expiry comes as expires_on (POSIX seconds, az 2.54 and later, as a
// number or a string) or, from older versions, expiresOn in local time or,
// from Cloud Shell, RFC 3339.
func TestAzureCLIExpiryFormats(t *testing.T) {
	local := time.Date(2026, 12, 4, 11, 30, 0, 0, time.Local)
	for name, tc := range map[string]struct {
		json string
		want time.Time
	}{
		"expires_on":           {`{"accessToken":"x","expiresOn":"2001-01-01 00:00:00.000000","expires_on":1796383800}`, time.Unix(1796383800, 0)},
		"expires_on as string": {`{"accessToken":"x","expires_on":"1796383800"}`, time.Unix(1796383800, 0)},
		"expiresOn, local":     {`{"accessToken":"x","expiresOn":"2026-12-04 11:30:00.000000"}`, local},
		"expiresOn, RFC 3339":  {`{"accessToken":"x","expiresOn":"2026-12-04T11:30:00Z"}`, time.Date(2026, 12, 4, 11, 30, 0, 0, time.UTC)},
	} {
		t.Run(name, func(t *testing.T) {
			token, expires, err := parseAzureCLIToken([]byte(tc.json), time.Now)
			require.NoError(t, err)
			assert.Equal(t, "x", token)
			assert.True(t, tc.want.Equal(expires), "%s, want %s", expires, tc.want)
		})
	}
	_, _, err := parseAzureCLIToken([]byte(`{"accessToken":"`+entraToken+`"`), time.Now)
	require.Error(t, err)
	assertNoToken(t, "a parse error", err.Error())
}

// Without az on PATH, -auth azcli is a configuration error (exit 2) that
// says in one sentence what to do; signed out, az's refusal is one
// sentence saying to run az login, and the doctor gives it as its action.
func TestBinarySaysWhatToRunWhenTheAzureCLIGivesNoToken(t *testing.T) {
	endpoint, _, _, stop := startEmulator(t, "-aad-token", entraToken)
	defer stop()
	code, stdout, stderr := cli("metrics", "-auth", "azcli").with("COSMOS_ENDPOINT="+endpoint, "PATH="+t.TempDir()).run(t)
	assert.Equal(t, 2, code)
	assert.Empty(t, stdout)
	assert.Equal(t, `cdb metrics: -auth azcli runs the Azure CLI, but "az" is not on PATH: install it (https://aka.ms/installazurecli) `+
		`and run "az login", or sign with -auth key or -auth token`, strings.SplitN(stderr, "\n", 2)[0])

	signedOut := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(signedOut, "az"),
		[]byte("#!/bin/sh\necho \"ERROR: Please run 'az login' to setup account.\" >&2\nexit 1\n"), 0o755))
	env := []string{"COSMOS_ENDPOINT=" + endpoint, "COSMOS_AUTH=azcli", "PATH=" + signedOut + ":" + os.Getenv("PATH")}
	code, stdout, stderr = cli("metrics").with(env...).run(t)
	assert.Equal(t, 1, code)
	assert.Empty(t, stdout)
	assert.Equal(t, "cdb metrics: the Azure CLI is not signed in: run \"az login\" (or sign with -auth key or -auth token)\n", stderr)

	code, stdout, stderr = cli("doctor", "-o", "json").with(env...).run(t)
	assert.Equal(t, 1, code, stderr)
	connect := parseDoctorReport(t, stdout).step("connect")
	assert.Equal(t, "fail", connect.Result)
	assert.Equal(t, "the client has no Entra ID token to sign with", connect.Meaning)
	assert.Equal(t, `the Azure CLI is not signed in: run "az login" (or sign with -auth key or -auth token)`, connect.Action)
}

// -auth takes key, azcli or token, and -auth token needs the token.
func TestBinaryRefusesAnUnknownAuthAndAMissingToken(t *testing.T) {
	code, _, stderr := cli("metrics", "-auth", "password", "-endpoint", "http://127.0.0.1:1").run(t)
	assert.Equal(t, 2, code)
	assert.Equal(t, `cdb metrics: -auth (COSMOS_AUTH) must be key, azcli or token, got "password"`, strings.SplitN(stderr, "\n", 2)[0])
	code, _, stderr = cli("metrics", "-auth", "token", "-endpoint", "http://127.0.0.1:1").run(t)
	assert.Equal(t, 2, code)
	assert.Equal(t, "cdb metrics: -auth token signs with the Entra ID token in COSMOS_ACCESS_TOKEN, which is not set", strings.SplitN(stderr, "\n", 2)[0])
}

// bench's processes are handed the key, not a token: -processes with
// Entra ID is refused before anything runs.
func TestBinaryBenchProcessesRefuseEntraID(t *testing.T) {
	endpoint, _, _, stop := startEmulator(t, "-aad-token", entraToken)
	defer stop()
	code, _, stderr := cli("bench", "-processes", "2", "-duration", "1s").
		with("COSMOS_ENDPOINT="+endpoint, "COSMOS_AUTH=token", "COSMOS_ACCESS_TOKEN="+entraToken).run(t)
	assert.Equal(t, 2, code, stderr)
	assert.Equal(t, "cdb bench: -processes signs with the key only (COSMOS_KEY); Entra ID (-auth) signs one process: leave -processes out",
		strings.SplitN(stderr, "\n", 2)[0])
	assertNoToken(t, "cdb bench", stderr)
}

// An account that disables key authentication answers a key 401/5202:
// the commands and the doctor say to sign with Entra ID, not that the key
// is wrong.
func TestBinarySaysToSignWithEntraIDWhereKeysAreDisabled(t *testing.T) {
	srv := fakecosmos.New(fakecosmos.Options{})
	hs := httptest.NewServer(srv)
	defer hs.Close()
	srv.SetEndpoint(hs.URL + "/")
	srv.InjectFault(fakecosmos.Fault{Status: http.StatusUnauthorized, SubStatus: subStatusLocalAuthDisabled})
	env := []string{"COSMOS_ENDPOINT=" + hs.URL, "COSMOS_KEY=" + srv.Key()}

	code, _, stderr := cli("metrics").with(env...).run(t)
	assert.Equal(t, 1, code)
	assert.Regexp(t, "^"+regexp.QuoteMeta("cdb metrics: "+hs.URL+" refused the key (401 Unauthorized): the account disables key authentication "+
		"(disableLocalAuth); sign with Entra ID: -auth azcli (after az login) or -auth token (COSMOS_ACCESS_TOKEN), or COSMOS_AUTH=azcli."), stderr)

	code, stdout, stderr := cli("doctor", "-o", "json").with(env...).run(t)
	assert.Equal(t, 1, code, stderr)
	connect := parseDoctorReport(t, stdout).step("connect")
	assert.Equal(t, 5202, connect.Substatus)
	assert.Equal(t, "the account disables key authentication (disableLocalAuth): it takes Entra ID tokens only", connect.Meaning)
	assert.Equal(t, signWithEntraID, connect.Action)
}

// The demo creates a container of its own: with Entra ID it says so and
// sends nothing.
func TestBinaryDemoOnAnAccountNeedsTheKey(t *testing.T) {
	code, _, stderr := cli("demo").with("COSMOS_ENDPOINT="+closedEndpoint(t), "COSMOS_AUTH=azcli").run(t)
	assert.Equal(t, 2, code, stderr)
	assert.Equal(t, "cdb demo: the demo creates a container of its own, which Entra ID (COSMOS_AUTH=azcli) may not: run it with the key (COSMOS_AUTH=key)",
		strings.SplitN(stderr, "\n", 2)[0])
}

// The help says how to sign with Entra ID: the overview, and every command
// that reaches an account.
func TestBinaryHelpNamesTheAuthFlagAndItsVariables(t *testing.T) {
	_, stdout, _ := cli("help").run(t)
	assert.Contains(t, stdout, "-auth azcli")
	assert.Contains(t, stdout, "COSMOS_AUTH")
	for _, name := range []string{"doctor", "metrics", "show", "ui", "top", "bench"} {
		code, stdout, stderr := cli(name, "-h").run(t)
		require.Equal(t, 0, code, stderr)
		assert.Contains(t, unwrapped(stdout), "-auth string how to sign: key, azcli", name)
		assert.Contains(t, unwrapped(stdout), "$COSMOS_ACCESS_TOKEN", name)
		assert.Contains(t, unwrapped(stdout), "$COSMOS_AUTH", name)
	}
}

// Where Entra ID does not know the account's own resource (AADSTS500011),
// the credential asks for the general Cosmos DB resource, as the .NET
// SDK does, and keeps asking for it; any other failure of az is its first
// line.
func TestAzureCLIFallsBackToTheCosmosResource(t *testing.T) {
	dir := t.TempDir()
	script := `#!/bin/sh
echo "$*" >> "` + dir + `/args"
case "$*" in
*documents.azure.com*) echo "ERROR: AADSTS500011: The resource principal named https://myaccount.documents.azure.com was not found in the tenant." >&2; exit 1;;
*cosmos.azure.com*) echo '{"accessToken": "general", "expires_on": 4102444800}';;
*) printf '\nERROR: something else broke\nmore detail\n' >&2; exit 1;;
esac
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "az"), []byte(script), 0o755))
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	cred, err := newAzureCLICredential("https://myaccount.documents.azure.com:443/")
	require.NoError(t, err)
	for range 2 {
		token, err := cred.Token(context.Background())
		require.NoError(t, err)
		assert.Equal(t, "general", token)
	}
	args, err := os.ReadFile(filepath.Join(dir, "args"))
	require.NoError(t, err)
	assert.Equal(t, "account get-access-token --output json --resource https://myaccount.documents.azure.com\n"+
		"account get-access-token --output json --resource https://cosmos.azure.com\n", string(args))

	other, err := newAzureCLICredential("https://other.example:443/")
	require.NoError(t, err)
	_, err = other.Token(context.Background())
	assert.EqualError(t, err, "az account get-access-token failed: ERROR: something else broke")
}

// Requests that need a token at once share one run of az.
func TestAzureCLITokenIsFetchedOnceForConcurrentRequests(t *testing.T) {
	az := fakeAzureCLI(t, "token", time.Now().Add(time.Hour))
	t.Setenv("PATH", az+":"+os.Getenv("PATH"))
	cred, err := newAzureCLICredential("https://myaccount.documents.azure.com:443/")
	require.NoError(t, err)
	tokens := make(chan string, 8)
	for range cap(tokens) {
		go func() {
			token, err := cred.Token(context.Background())
			assert.NoError(t, err)
			tokens <- token
		}()
	}
	for range cap(tokens) {
		assert.Equal(t, "token-1", <-tokens)
	}
	assert.Equal(t, 1, azRuns(t, az))
}
