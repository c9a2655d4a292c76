package fakecosmos

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readFeedAll follows a read feed's continuations with the given headers
// and checks every page's x-ms-item-count against its documents.
func readFeedAll(t *testing.T, c *testClient, h hdr) (pages int, got []string) {
	t.Helper()
	token := ""
	for pages = 1; pages < 100; pages++ {
		hh := h
		if token != "" {
			hh = h.with("x-ms-continuation", token)
		}
		r := c.do("GET", docsPath, nil, hh)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		docs := r.object(t)["Documents"].([]any)
		assert.Equal(t, strconv.Itoa(len(docs)), r.header.Get("x-ms-item-count"))
		assert.EqualValues(t, len(docs), r.object(t)["_count"])
		for _, d := range docs {
			got = append(got, d.(map[string]any)["id"].(string))
		}
		if token = r.header.Get("x-ms-continuation"); token == "" {
			return pages, got
		}
	}
	t.Fatal("the read feed did not end")
	return 0, nil
}

func TestReadFeedAcrossRangesByRangeAndByPartitionKey(t *testing.T) {
	_, c := newTestServer(t, Options{PartitionKeyRanges: 3})
	c.standardContainer()
	var want []string
	for i := 0; i < 30; i++ {
		id := "d" + strconv.Itoa(i)
		want = append(want, id)
		c.createDoc(map[string]any{"id": id, "pk": "p" + strconv.Itoa(i%6)})
	}

	pages, all := readFeedAll(t, c, hdr{"x-ms-max-item-count": "4"})
	assert.ElementsMatch(t, want, all, "the whole container, once")
	assert.GreaterOrEqual(t, pages, 8, "at most 4 a page, one range at a time")

	var byRange []string
	for _, id := range []string{"0", "1", "2"} {
		_, got := readFeedAll(t, c, hdr{"x-ms-max-item-count": "4", "x-ms-documentdb-partitionkeyrangeid": id})
		byRange = append(byRange, got...)
	}
	assert.ElementsMatch(t, want, byRange, "the ranges partition the documents")

	_, one := readFeedAll(t, c, pkHeader("p0").with("x-ms-max-item-count", "2"))
	assert.Equal(t, []string{"d0", "d6", "d12", "d18", "d24"}, one, "one logical partition, in creation order")

	pages, everything := readFeedAll(t, c, hdr{"x-ms-max-item-count": "-1", "x-ms-documentdb-partitionkeyrangeid": "0"})
	assert.Equal(t, 1, pages, "-1: no count limit")
	assert.NotEmpty(t, everything)
}

func TestReadFeedRefusesAForeignContinuationAndAGoneRange(t *testing.T) {
	_, c := newTestServer(t, Options{PartitionKeyRanges: 2})
	c.standardContainer()
	for i := 0; i < 5; i++ {
		c.createDoc(map[string]any{"id": "d" + strconv.Itoa(i), "pk": "p"})
	}
	first := c.do("GET", docsPath, nil, pkHeader("p").with("x-ms-max-item-count", "2"))
	token := first.header.Get("x-ms-continuation")
	require.NotEmpty(t, token)
	r := c.do("GET", docsPath, nil, pkHeader("q").with("x-ms-continuation", token))
	assert.Equal(t, http.StatusBadRequest, r.status, "a token of another scope")
	r = c.do("GET", docsPath, nil, hdr{"x-ms-documentdb-partitionkeyrangeid": "7"})
	assert.Equal(t, http.StatusGone, r.status)
	assert.Equal(t, "1002", r.subStatus())
}
