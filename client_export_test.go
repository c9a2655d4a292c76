package cdb

// DisableSessionTokensForTest makes c keep and send no session tokens, as a
// client blind to Session consistency would; on a FakeAccount with
// StaleReadsWithoutSessionToken it then reads the lagging replica. Tests of
// package cdb_test use it to show that the fake's stale mode is real.
func DisableSessionTokensForTest(c *Client) { c.sessions.disable() }
