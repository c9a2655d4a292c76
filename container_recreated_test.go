package cdb

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func isItemRead(r FakeRequest) bool { return r.Operation == "ReadItem" }

// itemReads counts the reads of one item among sent requests.
func itemReads(sent []string, id string) int {
	n := 0
	for _, s := range sent {
		if strings.HasPrefix(s, "GET ") && strings.HasSuffix(s, "/docs/"+id) {
			n++
		}
	}
	return n
}

// A 404/1024 (the container was created again under the same name) drops
// what the client kept of the old container and is retried once; the
// next read resolves the container's ranges afresh.
func TestARecreatedContainerIsForgottenAndRetriedOnce(t *testing.T) {
	acct := NewFakeAccount(FakeAccountOptions{})
	log := &hostLog{next: acct.Transport()}
	cc := newFakeContainer(t, acct, func(o *ClientOptions) { o.Transport = log })
	pk := NewPartitionKeyString("p")
	_, err := cc.CreateItem(testCtx(t), pk, itemJSON("a", "p", 1), nil)
	require.NoError(t, err)
	_, err = cc.ReadItem(testCtx(t), pk, "a", nil)
	require.NoError(t, err)
	_, resolved := cc.client.routing.definition(cc.sessionLink())
	require.True(t, resolved)
	log.take()

	acct.InjectFault(FakeFault{Match: isItemRead, Status: http.StatusNotFound, SubStatus: SubStatusContainerRecreated, Times: 1})
	_, err = cc.ReadItem(testCtx(t), pk, "a", nil)
	require.NoError(t, err)
	assert.Equal(t, 2, itemReads(log.take(), "a"), "the read and its one retry")
	_, resolved = cc.client.routing.definition(cc.sessionLink())
	assert.False(t, resolved, "the old container's definition and ranges are dropped")
}

// A container that still answers 1024 after the retry gives an error that
// says so, and never reads as "item not found".
func TestARecreatedContainerThatStillFailsSaysSo(t *testing.T) {
	acct := NewFakeAccount(FakeAccountOptions{})
	log := &hostLog{next: acct.Transport()}
	cc := newFakeContainer(t, acct, func(o *ClientOptions) { o.Transport = log })
	pk := NewPartitionKeyString("p")
	_, err := cc.CreateItem(testCtx(t), pk, itemJSON("a", "p", 1), nil)
	require.NoError(t, err)
	log.take()

	acct.InjectFault(FakeFault{Match: isItemRead, Status: http.StatusNotFound, SubStatus: SubStatusContainerRecreated})
	_, err = cc.ReadItem(testCtx(t), pk, "a", nil)
	require.Error(t, err)
	assert.True(t, IsContainerRecreated(err), "%v", err)
	assert.False(t, IsNotFound(err), "a recreated container says nothing about the item: %v", err)
	assert.Contains(t, err.Error(), "created again under the same name")
	assert.Equal(t, 2, itemReads(log.take(), "a"), "retried once, not as a transient 404")
}
