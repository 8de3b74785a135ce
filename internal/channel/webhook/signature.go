package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The signature schemes a hook may use (config serve.webhooks[].signature).
const (
	// SchemeGitHub is GitHub's form: X-Hub-Signature-256 holds
	// "sha256=" and the hex HMAC-SHA256 of the body; nothing signed says
	// when.
	SchemeGitHub = "github"
	// SchemeFluffy is fluffy's own form: X-Fluffy-Signature holds
	// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">", so the
	// timestamp is inside the MAC and a delivery ages out.
	SchemeFluffy = "fluffy"
)

// The headers each scheme reads.
const (
	HeaderGitHubSignature = "X-Hub-Signature-256"
	HeaderGitHubDelivery  = "X-GitHub-Delivery"
	HeaderGitHubEvent     = "X-GitHub-Event"
	HeaderFluffySignature = "X-Fluffy-Signature"
	HeaderFluffyDelivery  = "X-Fluffy-Delivery"
	HeaderFluffyEvent     = "X-Fluffy-Event"
)

// maxSignatureHeader bounds a signature header before it is parsed: the
// longest valid one is the fluffy form with a 19-digit timestamp.
const maxSignatureHeader = 128

// Errors of signature verification; the handler maps each to its refusal.
var (
	// ErrNoSignature: the scheme's header is absent.
	ErrNoSignature = errors.New("webhook: no signature header")
	// ErrMalformedSignature: the header is not the scheme's form.
	ErrMalformedSignature = errors.New("webhook: malformed signature header")
	// ErrBadSignature: the MAC does not match the body (and timestamp)
	// under the hook's secret.
	ErrBadSignature = errors.New("webhook: signature does not match")
	// ErrStale: a correctly signed timestamp is outside the hook's window
	// (in the past or the future); the delivery is a replay or its
	// sender's clock is wrong.
	ErrStale = errors.New("webhook: signed timestamp outside the window")
)

func mac(secret []byte, parts ...[]byte) []byte {
	h := hmac.New(sha256.New, secret)
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum(nil)
}

// SignGitHub returns the X-Hub-Signature-256 value for body: "sha256="
// and the lower-case hex HMAC-SHA256 of the body under secret.
func SignGitHub(secret, body []byte) string {
	return "sha256=" + hex.EncodeToString(mac(secret, body))
}

// SignFluffy returns the X-Fluffy-Signature value for body sent at t:
// "t=<unix seconds>,v1=<lower-case hex HMAC-SHA256 of "<t>.<body>">".
func SignFluffy(secret, body []byte, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return FormatFluffySignature(FluffySignature{Timestamp: t.Unix(), MAC: mac(secret, []byte(ts), []byte("."), body)})
}

// FluffySignature is a parsed X-Fluffy-Signature header.
type FluffySignature struct {
	Timestamp int64 // unix seconds, as signed
	MAC       []byte
}

// FormatFluffySignature is the canonical header text of s.
func FormatFluffySignature(s FluffySignature) string {
	return "t=" + strconv.FormatInt(s.Timestamp, 10) + ",v1=" + hex.EncodeToString(s.MAC)
}

// ParseFluffySignature parses an X-Fluffy-Signature header. Only the
// canonical form is accepted: "t=" then the unix time in decimal (no
// sign, no leading zero), ",v1=" then 64 lower-case hex digits, nothing
// else (no spaces, no other or repeated keys). So one signature has one
// spelling, and FormatFluffySignature(parsed) is the header itself.
func ParseFluffySignature(h string) (FluffySignature, error) {
	if len(h) > maxSignatureHeader {
		return FluffySignature{}, fmt.Errorf("%w: longer than %d bytes", ErrMalformedSignature, maxSignatureHeader)
	}
	ts, rest, ok := strings.Cut(h, ",")
	if !ok {
		return FluffySignature{}, fmt.Errorf("%w: want t=<unix>,v1=<hex>", ErrMalformedSignature)
	}
	digits, ok := strings.CutPrefix(ts, "t=")
	if !ok || !canonicalDecimal(digits) {
		return FluffySignature{}, fmt.Errorf("%w: want t=<unix seconds> first", ErrMalformedSignature)
	}
	t, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return FluffySignature{}, fmt.Errorf("%w: timestamp out of range", ErrMalformedSignature)
	}
	hx, ok := strings.CutPrefix(rest, "v1=")
	if !ok {
		return FluffySignature{}, fmt.Errorf("%w: want v1=<hex> after the timestamp", ErrMalformedSignature)
	}
	m, err := parseHexMAC(hx)
	if err != nil {
		return FluffySignature{}, err
	}
	return FluffySignature{Timestamp: t, MAC: m}, nil
}

// ParseGitHubSignature parses an X-Hub-Signature-256 header: "sha256="
// and 64 lower-case hex digits, as GitHub sends it.
func ParseGitHubSignature(h string) ([]byte, error) {
	if len(h) > maxSignatureHeader {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrMalformedSignature, maxSignatureHeader)
	}
	hx, ok := strings.CutPrefix(h, "sha256=")
	if !ok {
		return nil, fmt.Errorf("%w: want sha256=<hex>", ErrMalformedSignature)
	}
	return parseHexMAC(hx)
}

func canonicalDecimal(s string) bool {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func parseHexMAC(s string) ([]byte, error) {
	if len(s) != 2*sha256.Size {
		return nil, fmt.Errorf("%w: want %d hex digits", ErrMalformedSignature, 2*sha256.Size)
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return nil, fmt.Errorf("%w: want lower-case hex digits", ErrMalformedSignature)
		}
	}
	return hex.DecodeString(s)
}

// VerifyGitHub checks an X-Hub-Signature-256 header against body and
// returns the MAC it carried. The comparison takes constant time.
func VerifyGitHub(secret, body []byte, header string) ([]byte, error) {
	if header == "" {
		return nil, ErrNoSignature
	}
	got, err := ParseGitHubSignature(header)
	if err != nil {
		return nil, err
	}
	if !hmac.Equal(got, mac(secret, body)) {
		return nil, ErrBadSignature
	}
	return got, nil
}

// VerifyFluffy checks an X-Fluffy-Signature header against body, then
// that its signed timestamp is within window of now (either side: a
// sender's clock may run ahead). The MAC is checked first, so an
// unsigned timestamp never decides anything: a stale delivery with a bad
// MAC is ErrBadSignature, not ErrStale. The comparison takes constant
// time.
func VerifyFluffy(secret, body []byte, header string, now time.Time, window time.Duration) (FluffySignature, error) {
	if header == "" {
		return FluffySignature{}, ErrNoSignature
	}
	s, err := ParseFluffySignature(header)
	if err != nil {
		return FluffySignature{}, err
	}
	ts := strconv.FormatInt(s.Timestamp, 10)
	if !hmac.Equal(s.MAC, mac(secret, []byte(ts), []byte("."), body)) {
		return FluffySignature{}, ErrBadSignature
	}
	age := now.Sub(time.Unix(s.Timestamp, 0))
	if age > window || age < -window {
		return s, fmt.Errorf("%w: signed %s from now, window %s", ErrStale, age.Round(time.Second), window)
	}
	return s, nil
}
