package cdb_test

import (
	"context"
	"encoding/pem"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
	"github.com/duroxide-go/cdb/internal/hostspeed"
)

// inDir runs the rest of the test with dir as the working directory (where
// ConfigFromEnv looks for .env). Tests using it must not run in parallel.
func inDir(t *testing.T, dir string) {
	t.Helper()
	old, err := os.Getwd()
	require.NoError(t, err)
	require.NoError(t, os.Chdir(dir))
	t.Cleanup(func() { _ = os.Chdir(old) })
}

// unsetEnv removes the variables for the rest of the test and restores them
// afterwards.
func unsetEnv(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		t.Setenv(name, "") // registers the restore
		require.NoError(t, os.Unsetenv(name))
	}
}

var cosmosEnv = []string{cdb.EnvEndpoint, cdb.EnvKey, cdb.EnvDatabase, cdb.EnvContainer, cdb.EnvSkipTLS, cdb.EnvCAFile}

func writeDotEnv(t *testing.T, dir, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".env"), []byte(content), 0o600))
}

// A .env file is read, not exported: a password kept there for another
// program must not reach this process's environment (and its children's).
func TestConfigFromEnvReadsDotEnvWithoutExportingIt(t *testing.T) {
	dir := t.TempDir()
	writeDotEnv(t, dir, "SOME_SECRET=hunter2\n"+
		"COSMOS_ENDPOINT=https://file.documents.azure.com:443/\n"+
		"COSMOS_KEY=ZmlsZWtleQ==\n"+
		"COSMOS_DATABASE=filedb\n"+
		"COSMOS_CONTAINER=filecontainer\n"+
		"COSMOS_CA_FILE=/from/the/file.pem\n")
	inDir(t, dir)
	unsetEnv(t, append([]string{"SOME_SECRET"}, cosmosEnv...)...)

	cfg, err := cdb.ConfigFromEnv()
	require.NoError(t, err)

	for _, name := range append([]string{"SOME_SECRET"}, cosmosEnv...) {
		v, set := os.LookupEnv(name)
		assert.False(t, set, "%s was exported into the environment as %q", name, v)
	}
	assert.Equal(t, "https://file.documents.azure.com:443/", cfg.Endpoint)
	assert.Equal(t, "ZmlsZWtleQ==", cfg.Key)
	assert.Equal(t, "filedb", cfg.Database)
	assert.Equal(t, "filecontainer", cfg.Container)
	assert.Equal(t, "/from/the/file.pem", cfg.ClientOptions.TLS.CAFile)
}

func TestConfigFromEnvPrefersTheEnvironmentToDotEnv(t *testing.T) {
	dir := t.TempDir()
	writeDotEnv(t, dir, "COSMOS_ENDPOINT=https://file.documents.azure.com:443/\nCOSMOS_DATABASE=filedb\nCOSMOS_KEY=ZmlsZWtleQ==\n")
	inDir(t, dir)
	unsetEnv(t, cosmosEnv...)
	t.Setenv(cdb.EnvDatabase, "envdb")
	t.Setenv(cdb.EnvEndpoint, "https://env.documents.azure.com:443/")

	cfg, err := cdb.ConfigFromEnv()
	require.NoError(t, err)
	assert.Equal(t, "https://env.documents.azure.com:443/", cfg.Endpoint, "the environment wins")
	assert.Equal(t, "envdb", cfg.Database, "the environment wins")
	assert.Equal(t, "ZmlsZWtleQ==", cfg.Key, "the file fills what the environment leaves unset")
}

func TestConfigFromEnvWithoutDotEnvReadsTheEnvironment(t *testing.T) {
	inDir(t, t.TempDir())
	unsetEnv(t, cosmosEnv...)
	_, err := cdb.ConfigFromEnv()
	assert.ErrorContains(t, err, cdb.EnvEndpoint+" is not set")
	assert.ErrorIs(t, err, cdb.ErrEndpointNotSet, "a program falls back to the in-memory account on this error only")

	t.Setenv(cdb.EnvEndpoint, "https://127.0.0.1:8081/")
	t.Setenv(cdb.EnvSkipTLS, "true")
	cfg, err := cdb.ConfigFromEnv()
	require.NoError(t, err)
	assert.Equal(t, "https://127.0.0.1:8081/", cfg.Endpoint)
	assert.True(t, cfg.ClientOptions.TLS.InsecureSkipVerify)
}

func TestConfigFromEnvRefusesAnUnreadableDotEnv(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, ".env"), 0o700)) // a directory cannot be read as a file
	inDir(t, dir)
	_, err := cdb.ConfigFromEnv()
	assert.ErrorContains(t, err, ".env")
	assert.NotErrorIs(t, err, cdb.ErrEndpointNotSet, "a broken .env is not the absence of an account")
}

// COSMOS_CA_FILE makes a server with a private certificate (the Microsoft
// emulator's) trusted without turning verification off.
func TestConfigFromEnvCAFileTrustsTheEmulatorsCertificate(t *testing.T) {
	acct := cdb.NewFakeAccount(cdb.FakeAccountOptions{})
	srv := httptest.NewUnstartedServer(acct.Handler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected, not news
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "emulator.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))

	inDir(t, t.TempDir())
	unsetEnv(t, cosmosEnv...)
	t.Setenv(cdb.EnvEndpoint, srv.URL)
	t.Setenv(cdb.EnvKey, acct.Key())
	ctx, cancel := context.WithTimeout(context.Background(), hostspeed.Scale(time.Minute))
	defer cancel()

	cfg, err := cdb.ConfigFromEnv()
	require.NoError(t, err)
	_, err = cdb.NewProvider(ctx, cfg)
	require.Error(t, err, "without the CA file the certificate is not trusted")
	assert.ErrorContains(t, err, "certificate")

	t.Setenv(cdb.EnvCAFile, caFile)
	cfg, err = cdb.ConfigFromEnv()
	require.NoError(t, err)
	p, err := cdb.NewProvider(ctx, cfg)
	require.NoError(t, err)
	defer p.Close()
	_, err = p.Container().Read(ctx)
	assert.NoError(t, err)
}
