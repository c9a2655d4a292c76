package main

import (
	"crypto/subtle"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// The UI can cancel and delete production work, so every request passes
// these checks (docs/ui.md says them for operators):
//   - every response forbids inline script and any other origin (CSP), and
//     framing, sniffing and referrers (a token in a URL goes nowhere);
//   - on a loopback address the Host must name loopback too: a page
//     elsewhere that rebinds its DNS name to 127.0.0.1 gets nothing;
//   - with a token, a request without it (cookie or bearer header) is
//     refused; /login?token= trades it for the cookie;
//   - an action is a POST with the CSRF token of the page that asked for
//     its confirmation, from this origin.

// uiCSP allows this origin's script, style and fetches only; SVG drawn in
// the page uses presentation attributes, which style-src does not govern.
const uiCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// uiTokenCookie holds the token a browser presented at /login.
const uiTokenCookie = "cdb_ui_token"

// uiGuard is the checks every request passes before the UI's routes.
type uiGuard struct {
	token    string // "" on loopback without -token: no token asked for
	csrf     string
	loopback bool // the listener is on loopback: the Host must be too
	secure   bool // the browser reaches it over HTTPS: the cookie says Secure
}

// wrap puts the checks in front of next.
func (g uiGuard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", uiCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		// Not no-referrer: under it a browser sends "Origin: null" with the
		// page's own form POSTs, and allowsAction refuses every action.
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		if g.loopback && !isLoopbackRequestHost(r.Host) {
			http.Error(w, "cdb ui listens on loopback: open it as 127.0.0.1 or localhost", http.StatusMisdirectedRequest)
			return
		}
		if r.URL.Path == "/login" {
			g.login(w, r)
			return
		}
		if g.token != "" && !g.presentsToken(r) {
			http.Error(w, "cdb ui needs its token: open /login?token=TOKEN (printed at start, or $"+envUIToken+")", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// isLoopbackRequestHost reports whether a request's Host names loopback.
func isLoopbackRequestHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	return isLoopbackHost(strings.Trim(host, "[]"))
}

// presentsToken reports whether r carries the token, in the cookie /login
// set or as a bearer token (for scripts).
func (g uiGuard) presentsToken(r *http.Request) bool {
	if c, err := r.Cookie(uiTokenCookie); err == nil && equalSecret(c.Value, g.token) {
		return true
	}
	bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && equalSecret(bearer, g.token)
}

// login trades the token in the URL for a cookie only this site's own
// requests carry, and sends the browser on without the token in its
// address bar.
func (g uiGuard) login(w http.ResponseWriter, r *http.Request) {
	if g.token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if !equalSecret(r.URL.Query().Get("token"), g.token) {
		http.Error(w, "wrong token", http.StatusUnauthorized)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: uiTokenCookie, Value: g.token, Path: "/", HttpOnly: true,
		Secure: g.secure, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// allowsAction checks an action's request: a POST, from this origin, with
// the CSRF token. It answers the refusal itself and returns false.
func (g uiGuard) allowsAction(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "an action is a POST from its confirmation page", http.StatusMethodNotAllowed)
		return false
	}
	if origin := r.Header.Get("Origin"); origin != "" && !sameHost(origin, r.Host) {
		http.Error(w, "an action must come from this site's own pages", http.StatusForbidden)
		return false
	}
	if !equalSecret(r.PostFormValue("csrf"), g.csrf) {
		http.Error(w, "missing or wrong CSRF token: reload the confirmation page and try again", http.StatusForbidden)
		return false
	}
	return true
}

// sameHost reports whether an Origin header names the host the request
// was sent to.
func sameHost(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host == host
}

// equalSecret compares a presented secret with the expected one in
// constant time; an empty one never matches.
func equalSecret(got, want string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}
