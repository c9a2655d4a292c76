package fakecosmos

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
)

// This verifier is written independently of the client's signer (root
// package auth.go) on purpose: a bug shared by both would pass every test.

// stringToSign is the master-key signature's canonical payload: lower-case verb and
// resource type, the unescaped resource link as addressed, the lower-case
// date, and an empty last line.
func stringToSign(verb, resourceType, resourceLink, date string) string {
	return strings.ToLower(verb) + "\n" +
		strings.ToLower(resourceType) + "\n" +
		resourceLink + "\n" +
		strings.ToLower(date) + "\n" +
		"" + "\n"
}

// signature is base64(HMAC-SHA256(key, payload)).
func signature(key []byte, payload string) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(payload))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// authToken is the decoded authorization header.
type authToken struct {
	kind, version, sig string
}

// parseAuthToken query-unescapes the header (clients form-encode the whole
// "type=..&ver=..&sig=.." string, with upper- or lower-case escapes) and
// splits it. The signature keeps its '=' padding: only the first '=' of each
// pair separates name and value.
func parseAuthToken(header string) (authToken, bool) {
	decoded, err := url.QueryUnescape(header)
	if err != nil {
		return authToken{}, false
	}
	var t authToken
	for _, part := range strings.Split(decoded, "&") {
		name, value, ok := strings.Cut(part, "=")
		if !ok {
			return authToken{}, false
		}
		switch name {
		case "type":
			t.kind = value
		case "ver":
			t.version = value
		case "sig":
			t.sig = value
		}
	}
	return t, t.kind != "" && t.version != "" && t.sig != ""
}

// credentialKind is how a request was signed.
type credentialKind int

const (
	signedWithKey credentialKind = iota // the master key
	signedWithAAD                       // an Entra ID (AAD) token
)

// authenticate checks the date window and the signature of r, and says how
// it was signed. A refusal names the payload the server signed (as the
// real service does) but never the key, the token or the expected
// signature.
func (s *Server) authenticate(r *http.Request, rt route) (credentialKind, error) {
	header := r.Header.Get(hdrAuthorization)
	if header == "" {
		return 0, newError(http.StatusUnauthorized, "Required Header authorization is missing. Ensure a valid Authorization token is passed.")
	}
	token, ok := parseAuthToken(header)
	if !ok {
		return 0, newError(http.StatusUnauthorized, "The authorization token is malformed: expected type=master&ver=1.0&sig=<signature>, form-encoded.")
	}
	date := r.Header.Get(hdrDate)
	if err := s.checkDate(date); err != nil {
		return 0, err
	}
	switch {
	case token.kind == "master" && token.version == "1.0":
		return signedWithKey, s.checkMasterSignature(r.Method, rt, date, token.sig)
	case token.kind == "aad" && token.version == "1.0" && s.aadToken != "":
		if subtle.ConstantTimeCompare([]byte(token.sig), []byte(s.aadToken)) != 1 {
			return 0, newError(http.StatusUnauthorized, "The AAD token in the authorization header is not valid for this account.")
		}
		return signedWithAAD, nil
	}
	return 0, newError(http.StatusUnauthorized, "The authorization token type %q, version %q is not supported.", token.kind, token.version)
}

func (s *Server) checkDate(date string) error {
	if date == "" {
		return newError(http.StatusForbidden, "The authorization token is not valid: the request has no x-ms-date header.")
	}
	at, err := http.ParseTime(date)
	if err != nil {
		return newError(http.StatusForbidden, "The authorization token is not valid: x-ms-date %q is not an RFC 1123 date.", date)
	}
	now := s.now()
	if skew := now.Sub(at); skew > s.maxClockSkew || skew < -s.maxClockSkew {
		return newError(http.StatusForbidden,
			"The authorization token is not valid at the current time (authorization token expired). Please create another token and retry (token start time: %s, token expiry time: %s, current server time: %s).",
			at.UTC().Format(http.TimeFormat), at.Add(s.maxClockSkew).UTC().Format(http.TimeFormat), now.UTC().Format(http.TimeFormat))
	}
	return nil
}

func (s *Server) checkMasterSignature(method string, rt route, date, got string) error {
	payload := stringToSign(method, rt.resourceType(), rt.resourceLink(), date)
	want := signature(s.keyBytes, payload)
	if subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1 {
		return nil
	}
	return newError(http.StatusUnauthorized,
		"The input authorization token can't serve the request. The wrong key is being used or the expected payload is not built as per the protocol. Server used the following payload to sign: '%s'",
		strings.ReplaceAll(payload, "\n", `\n`))
}
