package web

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
)

// LoginTTL is how long a one-time login link is valid.
const LoginTTL = 2 * time.Minute

// SessionTTL is how long a console login lasts without use.
const SessionTTL = 12 * time.Hour

// CookieName is the console's session cookie.
const CookieName = "fluffy_web"

// csrfField is the form field (and csrfHeader the header, for scripts)
// that carries a page's CSRF token.
const (
	csrfField  = "csrf"
	csrfHeader = "X-CSRF-Token"
)

// Why a request was refused, as recorded in channel.refused (reason).
const (
	RefusedHost         = "bad_host"
	RefusedOrigin       = "cross_origin"
	RefusedCSRF         = "csrf"
	RefusedLogin        = "login_invalid"
	RefusedCookie       = "unknown_cookie"
	RefusedUnauthorized = "no_login"
)

// ErrLoginInvalid: a login token is unknown, used or expired (the three
// are one answer: a page cannot tell which).
var ErrLoginInvalid = errors.New("web: the login link is invalid, used or expired; run 'fluffy web open' again")

// newToken is 32 random bytes, URL-safe base64.
func newToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// tokenKey is what the maps hold for a token: its SHA-256, so a memory
// dump or a timing side channel on map lookups gives no usable token.
func tokenKey(t string) string {
	s := sha256.Sum256([]byte(t))
	return string(s[:])
}

type login struct {
	principal string
	expires   time.Time
}

type webSession struct {
	principal string
	csrf      string
	lastUsed  time.Time
	key       string // tokenKey of the cookie: where flash finds the session
	// flash is the outcome of this login's last state change, shown once
	// by the page it redirected to. It is kept here, not in the URL, so a
	// crafted link cannot make the console claim something was done.
	flash string
}

// auth holds the one-time login tokens and the console's logins, in
// memory only: a login does not outlive the daemon, and a cookie from
// another daemon (or an earlier one) is unknown here.
type auth struct {
	now func() time.Time

	mu       sync.Mutex // guards the fields below
	logins   map[string]login
	sessions map[string]*webSession
}

func newAuth(now func() time.Time) *auth {
	return &auth{now: now, logins: map[string]login{}, sessions: map[string]*webSession{}}
}

// mint makes a one-time login token for principal.
func (a *auth) mint(principal string) string {
	t := newToken()
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	for k, l := range a.logins {
		if now.After(l.expires) {
			delete(a.logins, k)
		}
	}
	a.logins[tokenKey(t)] = login{principal: principal, expires: now.Add(LoginTTL)}
	return t
}

// redeem exchanges a login token, once, for a new console session: the
// cookie value and the principal.
func (a *auth) redeem(token string) (cookie, principal string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := tokenKey(token)
	l, ok := a.logins[k]
	// Used or not, valid or not: the token is gone.
	delete(a.logins, k)
	if !ok || a.now().After(l.expires) {
		return "", "", ErrLoginInvalid
	}
	return a.startLocked(l.principal), l.principal, nil
}

// start begins a console session for principal (a passkey verified):
// the cookie value.
func (a *auth) start(principal string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.startLocked(principal)
}

func (a *auth) startLocked(principal string) string {
	cookie := newToken()
	k := tokenKey(cookie)
	a.sessions[k] = &webSession{principal: principal, csrf: newToken(), lastUsed: a.now(), key: k}
	return cookie
}

// session returns the console session of a cookie value, refreshing its
// idle time; false for an unknown or idle one.
func (a *auth) session(cookie string) (webSession, bool) {
	if cookie == "" {
		return webSession{}, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	k := tokenKey(cookie)
	s, ok := a.sessions[k]
	if !ok {
		return webSession{}, false
	}
	now := a.now()
	if now.Sub(s.lastUsed) > SessionTTL {
		delete(a.sessions, k)
		return webSession{}, false
	}
	s.lastUsed = now
	return *s, true
}

// setFlash keeps msg for the next page of the login whose session key
// is key.
func (a *auth) setFlash(key, msg string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s, ok := a.sessions[key]; ok {
		s.flash = msg
	}
}

// takeFlash returns the login's kept outcome and forgets it.
func (a *auth) takeFlash(key string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.sessions[key]
	if !ok {
		return ""
	}
	msg := s.flash
	s.flash = ""
	return msg
}

func (a *auth) logout(cookie string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.sessions, tokenKey(cookie))
}

// hostAllowed reports whether a request's Host names this console: one
// of the hosts it was told it is reached at (DNS rebinding: a page of
// evil.example resolved to 127.0.0.1 sends Host: evil.example).
func (s *Server) hostAllowed(host string) bool {
	host = strings.ToLower(host)
	for _, h := range s.hosts() {
		if host == h {
			return true
		}
	}
	return false
}

// hosts is every host:port the console answers to: its bound address,
// localhost and the loopback addresses at its port, and the configured
// names.
func (s *Server) hosts() []string {
	out := append([]string(nil), s.o.Hosts...)
	addr := s.Addr()
	if addr == "" {
		return out
	}
	out = append(out, strings.ToLower(addr))
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return out
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() || host == "localhost" {
		out = append(out, "localhost:"+port, "127.0.0.1:"+port, "[::1]:"+port)
	}
	return out
}

// sameOrigin reports whether a state-changing request comes from a page
// of this console: its Origin (or, without one, its Referer) names the
// request's own scheme and Host, and the browser's Sec-Fetch-Site, when
// sent, says same-origin.
func (s *Server) sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return false
	}
	want := s.scheme(r) + "://" + strings.ToLower(r.Host)
	if o := r.Header.Get("Origin"); o != "" {
		return strings.ToLower(o) == want
	}
	ref, err := url.Parse(r.Header.Get("Referer"))
	if err != nil || ref.Host == "" {
		return false
	}
	return strings.ToLower(ref.Scheme+"://"+ref.Host) == want
}

// scheme is the request's scheme as the browser sees it: https under
// TLS, or when it came through the reverse proxy (a Hosts name), which
// terminates TLS; http on the console's own loopback address.
func (s *Server) scheme(r *http.Request) string {
	if s.secure(r) {
		return "https"
	}
	return "http"
}

func (s *Server) secure(r *http.Request) bool {
	if s.o.TLS {
		return true
	}
	if r == nil {
		return false
	}
	host := strings.ToLower(r.Host)
	for _, h := range s.o.Hosts {
		if host == h {
			return true
		}
	}
	return false
}

// checkCSRF compares the request's token (form field or header) with the
// session's, in constant time.
func checkCSRF(r *http.Request, ws webSession) bool {
	got := r.Header.Get(csrfHeader)
	if got == "" {
		got = r.PostFormValue(csrfField)
	}
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(ws.csrf)) == 1
}

// refuse answers a refused request with code and records it as
// channel.refused (channel "web"): the reason, the method and path (never
// the query, which may hold a login token) and the remote address.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, code int, reason, principal string) {
	detail := r.Method + " " + r.URL.Path
	if reason == RefusedHost {
		detail += " (host " + truncate(r.Host, 100) + ")"
	}
	if reason == RefusedOrigin {
		detail += " (origin " + truncate(r.Header.Get("Origin"), 100) + ")"
	}
	if s.o.Audit != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
		defer cancel()
		if _, err := s.o.Audit.Append(ctx, audit.Entry{Kind: audit.KindChannelRefused, Actor: "channel:" + Name, Payload: audit.ChannelRefused{
			Channel: Name, Principal: principal, Reason: reason, Detail: detail, Remote: r.RemoteAddr}}); err != nil {
			s.log.Error("record a refused request", "reason", reason, "err", err)
		}
	}
	s.log.Warn("request refused", "reason", reason, "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
	http.Error(w, http.StatusText(code), code)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
