package handoff

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type testChains = Chains[string, int, string]

func keep(h *testChains, pk string, until, since int64, awaiting ...int) *Chain[string, int, string] {
	c := NewChain[string, int, string]("lock", pk, "tok-"+pk, func() int64 { return until }, since, Patience{Window: time.Second}, awaiting)
	h.Add(c)
	return c
}

// A chain is ready once every awaited completion came; a completion claimed
// is kept in order; a chain is not ended while an ack writes into it.
func TestAChainIsReadyWhenItsCompletionsCame(t *testing.T) {
	h := NewChains[string, int, string](false)
	keep(h, "a", 10_000, 0, 1, 2)
	c1, ok := h.ClaimFor("a", 1, 100)
	require.True(t, ok)
	assert.Equal(t, Claim[int]{PK: "a", Token: "tok-a", Until: 10_000, Activity: 1}, c1)
	c2, ok := h.ClaimFor("a", 2, 100)
	require.True(t, ok)
	assert.Empty(t, h.All(), "acks write into it: not ended")
	one, two := "one", "two"
	assert.Nil(t, h.Completed(c1, &one, false, 110), "activity 2 still runs")
	ready := h.Completed(c2, &two, false, 120)
	require.NotNil(t, ready)
	assert.Equal(t, []string{"one", "two"}, ready.Claimed)
	assert.True(t, h.Empty())
	_, ok = h.ClaimFor("a", 3, 130)
	assert.False(t, ok, "handed over: a late ack writes unclaimed")
}

// A chain past its lock's expiry takes no claim; one due after the
// coalescing delay or its window is ended by Due; Want marks it and
// hands it over.
func TestChainsComeDue(t *testing.T) {
	h := NewChains[string, int, string](false)
	keep(h, "expired", 50, 0, 1)
	_, ok := h.ClaimFor("expired", 1, 50)
	assert.False(t, ok)

	keep(h, "quiet", 10_000, 0, 1) // no completion within its window
	keep(h, "coalesced", 10_000, 0, 1, 2)
	c, _ := h.ClaimFor("coalesced", 1, 100)
	msg := "m"
	h.Completed(c, &msg, false, 100)
	assert.Empty(t, h.Due(110, 25*time.Millisecond), "neither is due yet")
	due := h.Due(1_000, 25*time.Millisecond)
	var pks []string
	for _, d := range due {
		pks = append(pks, d.PK)
	}
	assert.ElementsMatch(t, []string{"expired", "quiet", "coalesced"}, pks)

	keep(h, "wanted", 10_000, 0, 1)
	held, ready := h.Want("wanted")
	assert.True(t, held)
	require.NotNil(t, ready)
	assert.True(t, ready.Announced)
	held, _ = h.Want("none")
	assert.False(t, held)
}

// complete claims and settles activity's completion into pk's chain at
// nowMs: the chain when it is to be handed over at once.
func complete(t *testing.T, h *testChains, pk string, activity int, nowMs int64) *Chain[string, int, string] {
	t.Helper()
	c, ok := h.ClaimFor(pk, activity, nowMs)
	require.True(t, ok, "activity %d claims", activity)
	msg := "m"
	return h.Completed(c, &msg, false, nowMs)
}

// A chain is due at a gap in its completions, counted from the last one,
// or once it held its first one its Hold, whichever comes first.
func TestAChainIsDueAtAGapOrItsHold(t *testing.T) {
	const gap = 25 * time.Millisecond
	h := NewChains[string, int, string](false)
	c := NewChain[string, int, string]("lock", "a", "tok-a", func() int64 { return 10_000 }, 0, Patience{Window: time.Second, Hold: 100 * time.Millisecond}, []int{1, 2, 3, 4, 5, 6, 7})
	h.Add(c)
	for i, at := range []int64{100, 120, 140, 160, 180} {
		require.Nil(t, complete(t, h, "a", i+1, at))
		assert.Empty(t, h.Due(at+19, gap), "within the gap of the last, and the hold")
	}
	assert.Equal(t, []*Chain[string, int, string]{c}, h.Due(200, gap), "held its first completion 100 ms")

	paused := NewChain[string, int, string]("lock", "b", "tok-b", func() int64 { return 10_000 }, 0, Patience{Window: time.Second, Hold: 100 * time.Millisecond}, []int{1, 2, 3})
	h.Add(paused)
	require.Nil(t, complete(t, h, "b", 1, 100))
	require.Nil(t, complete(t, h, "b", 2, 120))
	assert.Empty(t, h.Due(144, gap), "24 ms since the last")
	assert.Equal(t, []*Chain[string, int, string]{paused}, h.Due(145, gap), "a gap since the last")
}

// A chain whose turn has room for no more completions is handed over as
// the last that fits settles, and takes no claim beyond its room, counting
// the acks under way.
func TestAChainIsHandedOverWhenItsTurnIsFull(t *testing.T) {
	h := NewChains[string, int, string](false)
	h.Add(NewChain[string, int, string]("lock", "a", "tok-a", func() int64 { return 10_000 }, 0, Patience{Window: time.Second, Room: 2}, []int{1, 2, 3}))
	require.Nil(t, complete(t, h, "a", 1, 100))
	c2, ok := h.ClaimFor("a", 2, 110)
	require.True(t, ok)
	_, ok = h.ClaimFor("a", 3, 110)
	assert.False(t, ok, "no room with the second under way: the third goes to the queue")
	two := "two"
	ready := h.Completed(c2, &two, false, 120)
	require.NotNil(t, ready, "full, while activity 3 still runs")
	assert.Len(t, ready.Claimed, 2)
}

// An activity a worker of this process takes while its instance's chain
// waits is waited for too: the fan-in ends when none runs here.
func TestAChainAwaitsTheActivitiesTakenHereMeanwhile(t *testing.T) {
	h := NewChains[string, int, string](false)
	keep(h, "a", 10_000, 0, 1)
	h.Await("a", 2)
	h.Await("none", 2) // no chain: nothing to do
	assert.Nil(t, complete(t, h, "a", 1, 100), "activity 2 runs here")
	ready := complete(t, h, "a", 2, 150)
	require.NotNil(t, ready, "the fan-in ended")
	assert.Len(t, ready.Claimed, 2)
}

// A nil table (eager dispatch off) keeps nothing.
func TestANilChainTableDoesNothing(t *testing.T) {
	var h *testChains
	_, ok := h.ClaimFor("a", 1, 0)
	assert.False(t, ok)
	h.Await("a", 1)
	assert.True(t, h.Empty())
	assert.Nil(t, h.All())
}

// A chain whose commit could not be told is kept only where no chain is,
// takes no claim (a completion claimed with a token nobody may hold would
// hide), and comes due at its window's end to be given back.
func TestAnUnconfirmedChainIsOnlyGivenBack(t *testing.T) {
	h := NewChains[string, int, string](false)
	live := keep(h, "held", 10_000, 0, 1)
	assert.False(t, h.AddUnconfirmed(NewChain[string, int, string]("lock", "held", "tok-other", func() int64 { return 10_000 }, 0, Patience{Window: time.Second}, nil)),
		"this process's chain on the instance stays")
	claim, ok := h.ClaimFor("held", 1, 100)
	require.True(t, ok)
	assert.Equal(t, live.Token, claim.Token)

	unsure := NewChain[string, int, string]("lock", "unsure", "tok-unsure", func() int64 { return 10_000 }, 100, Patience{Window: time.Second}, nil)
	require.True(t, h.AddUnconfirmed(unsure))
	assert.True(t, unsure.Unconfirmed)
	_, ok = h.ClaimFor("unsure", 1, 200)
	assert.False(t, ok, "no completion is claimed into an unconfirmed chain")
	assert.Empty(t, h.Due(1_000, 25*time.Millisecond), "within its window")
	assert.Equal(t, []*Chain[string, int, string]{unsure}, h.Due(1_100, 25*time.Millisecond))
}

// A chain a worker ack opens takes its siblings' claims while its opening
// is under way, and nothing ends it meanwhile; opened, it is a chain like
// any other.
func TestAChainAnAckOpensTakesClaimsAndEndsOnlyOnceOpened(t *testing.T) {
	h := NewChains[string, int, string](false)
	open := func() *Chain[string, int, string] {
		return NewChain[string, int, string]("lock", "a", "tok-a", func() int64 { return 10_000 }, 100, Patience{Window: time.Second}, []int{2})
	}
	c1, opening, ok := h.Open("a", 1, 100, open)
	require.True(t, ok)
	assert.True(t, opening, "none was there: this ack opens it")
	c2, opening, ok := h.Open("a", 2, 100, open)
	require.True(t, ok)
	assert.False(t, opening, "a sibling's ack claims into the opening chain")
	two := "two"
	assert.Nil(t, h.Completed(c2, &two, false, 110), "the opening ack still writes")
	_, ready := h.Want("a")
	assert.Nil(t, ready, "not ended while it opens")
	assert.Empty(t, h.Due(5_000, 25*time.Millisecond))

	h.Opened(c1, true, false)
	one := "one"
	ready = h.Completed(c1, &one, false, 120)
	require.NotNil(t, ready, "every awaited completion came, and something was wanted")
	assert.Equal(t, []string{"two", "one"}, ready.Claimed)
	assert.False(t, ready.Refused)
}

// A chain whose opening ack could not lock the instance takes no more
// claims and ends once no ack writes into it, with what was claimed into
// it, to be released; one whose opening cannot be told ends unconfirmed.
func TestAChainThatCouldNotOpenEndsRefused(t *testing.T) {
	h := NewChains[string, int, string](false)
	open := func() *Chain[string, int, string] {
		return NewChain[string, int, string]("lock", "a", "tok-a", func() int64 { return 10_000 }, 100, Patience{Window: time.Second}, []int{2, 3})
	}
	c1, _, _ := h.Open("a", 1, 100, open)
	c2, _, _ := h.Open("a", 2, 100, open)
	h.Opened(c1, false, true)
	_, ok := h.ClaimFor("a", 3, 110)
	assert.False(t, ok, "refused: the next ack writes unclaimed")
	assert.Nil(t, h.Completed(c1, nil, false, 110), "the sibling still writes")
	two := "two"
	ended := h.Completed(c2, &two, false, 120)
	require.NotNil(t, ended)
	assert.True(t, ended.Refused)
	assert.Equal(t, []string{"two"}, ended.Claimed)
	assert.True(t, h.Empty())

	c1, _, _ = h.Open("b", 1, 200, func() *Chain[string, int, string] {
		return NewChain[string, int, string]("lock", "b", "tok-b", func() int64 { return 10_000 }, 200, Patience{Window: time.Second}, []int{2})
	})
	h.Opened(c1, false, false)
	one := "one"
	ended = h.Completed(c1, &one, true, 210)
	require.NotNil(t, ended, "ended at once, to be given back from a read of its instance")
	assert.True(t, ended.Unconfirmed)
	assert.Equal(t, []string{"one"}, ended.Claimed, "what it may have written goes back with it")
}

// An ack that opens nothing (open says none) claims nothing.
func TestAnAckThatOpensNoChainClaimsNothing(t *testing.T) {
	h := NewChains[string, int, string](false)
	_, opening, ok := h.Open("a", 1, 100, func() *Chain[string, int, string] { return nil })
	assert.False(t, ok)
	assert.False(t, opening)
	assert.True(t, h.Empty())
	var off *testChains
	_, _, ok = off.Open("a", 1, 100, func() *Chain[string, int, string] { return nil })
	assert.False(t, ok, "eager dispatch off: no chains")
}
