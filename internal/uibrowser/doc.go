// Package uibrowser checks `cdb ui` in a real browser: it builds cmd/cdb,
// serves the UI on the embedded in-memory account and drives headless
// Chromium (Debian's chromium package, /usr/bin/chromium) with chromedp
// through the list, an instance's timeline, an action and a hostile id.
// It is its own module so that the cdb library never depends on chromedp.
// It imports no cdb package and stays out of the repository's go.work, so
// run it with GOWORK=off (make ui-browser does).
package uibrowser
