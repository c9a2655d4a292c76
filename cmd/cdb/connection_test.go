package main

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/duroxide-go/cdb"
)

// unauthorizedMessage is a 401's message as Cosmos DB writes it: a first
// sentence, then the payload the server signed, then the request's details.
const unauthorizedMessage = `Message: {"Errors":["The input authorization token can't serve the request. ` +
	`The wrong key is being used or the expected payload is not built as per the protocol. ` +
	`For more info: https://aka.ms/cosmosdb-tsg-401. Server used the following payload to sign: ` +
	`'get\n\n\nthu, 04 dec 2026 05:15:06 gmt\n\n'"]}` + "\r\nActivityId: 41c56030-efcb-4b36-a3e3-42ce1270adda, " +
	`Request URI: /apps/0e2f/services/7a1c/partitions/9b3d/replicas/1p/, RequestStats: , SDK: Microsoft.Azure.Documents.Common/2.14.0`

// refusingEveryKey answers every request 401 with Cosmos DB's long message.
func refusingEveryKey(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("x-ms-activity-id", "41c56030-efcb-4b36-a3e3-42ce1270adda")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"code":"Unauthorized","message":` + jsonString(unauthorizedMessage) + `}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func jsonString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`)
	return `"` + r.Replace(s) + `"`
}

// A 401 prints what to check and the server's first sentence, not the
// payload the server echoes; the whole message stays in the error for code,
// and the key is printed nowhere.
func TestA401SaysTheKeyOrTheClockIsWrongInOneSentence(t *testing.T) {
	endpoint := refusingEveryKey(t)
	code, stdout, stderr := runCLI("metrics", "-endpoint", endpoint, "-key", fakeKey)
	assert.Equal(t, 1, code)
	assert.Empty(t, stdout)
	assert.Equal(t, "cdb metrics: "+endpoint+" refused the request's signature (401 Unauthorized): the key or this machine's clock is wrong; "+
		"check COSMOS_KEY or -key. The server said: \"The input authorization token can't serve the request.\" "+
		"(activity id 41c56030-efcb-4b36-a3e3-42ce1270adda)\n", stderr)
	assertNoKey(t, "cdb metrics", stdout, stderr)

	err := describe(endpoint, &cdb.CosmosError{Operation: "ReadAccount", StatusCode: http.StatusUnauthorized, Message: unauthorizedMessage})
	assert.NotContains(t, err.Error(), "payload")
	var ce *cdb.CosmosError
	require.True(t, errors.As(err, &ce), "the CosmosError stays behind the short text")
	assert.Equal(t, unauthorizedMessage, ce.Message)
}

// silentEndpoint accepts connections and never answers on them.
func silentEndpoint(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var held []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-accepted
		for _, c := range held {
			_ = c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

// An endpoint that accepts and never answers is noted on stderr while the
// command waits, and -connect-timeout bounds the wait.
func TestASilentEndpointIsNotedAndBoundedByConnectTimeout(t *testing.T) {
	endpoint := silentEndpoint(t)
	notice := "cdb: waiting for " + endpoint + ": no answer yet (giving up after 400ms; -connect-timeout to change)\n"
	for _, args := range [][]string{{"metrics"}, {"show", "order-1"}, {"doctor"}} {
		code, stdout, stderr := runCLI(append(args, "-endpoint", endpoint, "-key", fakeKey, "-connect-timeout", "400ms")...)
		assert.Equal(t, 1, code, "cdb %v", args)
		require.True(t, strings.HasPrefix(stderr, notice), "cdb %v: %q", args, stderr)
		if args[0] == "doctor" { // its connect step says it in its lines
			assert.Contains(t, unwrapped(stdout), "means: the endpoint did not answer within -connect-timeout")
			continue
		}
		assert.Contains(t, stderr, "no answer from "+endpoint+" in 400ms: check the endpoint and the network, or wait longer with -connect-timeout", "cdb %v", args)
	}
}
