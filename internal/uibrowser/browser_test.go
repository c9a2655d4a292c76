package uibrowser

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath is Debian's chromium package's binary, which make
// ui-browser installs when it is missing; $CDB_CHROMIUM names another.
func chromiumPath() string {
	if p := os.Getenv("CDB_CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// newBrowser starts headless Chromium for one test, with a fresh profile,
// and returns a context that drives its tab; the whole test must be done
// within the deadline, so that a page that never comes fails the test
// instead of hanging it.
func newBrowser(t *testing.T, deadline time.Duration) context.Context {
	t.Helper()
	path := chromiumPath()
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no Chromium at %s (%v): install Debian's chromium package, or set CDB_CHROMIUM; make ui-browser installs it", path, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
		// Root in CI has no user namespace for Chromium's sandbox.
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		// This machine's network is closed: Chromium must not go looking.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
	)
	ctx, cancelTimeout := context.WithTimeout(context.Background(), deadline)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	browserCtx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
		cancelTimeout()
	})
	if err := chromedp.Do(browserCtx); err != nil {
		t.Fatalf("start Chromium at %s: %v", path, err)
	}
	return browserCtx
}
