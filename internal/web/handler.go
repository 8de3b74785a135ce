package web

import (
	"context"
	"embed"
	"io/fs"
	"net/http"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
)

//go:embed static
var staticFiles embed.FS

// csp allows the console's own script, style and images only: no inline
// script or style, no other origin, no framing, forms to itself only.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

type ctxKey struct{}

// principalOf is the logged-in principal and the page's CSRF token.
func sessionOf(r *http.Request) webSession {
	ws, _ := r.Context().Value(ctxKey{}).(webSession)
	return ws
}

func (s *Server) routes() {
	m := http.NewServeMux()
	sub, _ := fs.Sub(staticFiles, "static")
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(sub)))
	m.HandleFunc("GET /login", s.login)
	m.Handle("POST /logout", s.authed(s.logout))
	m.Handle("GET /{$}", s.authed(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/sessions", http.StatusSeeOther)
	}))
	m.Handle("GET /sessions", s.authed(s.sessionsPage))
	m.Handle("POST /sessions", s.authed(s.startSession))
	m.Handle("GET /sessions/{id}", s.authed(s.sessionPage))
	m.Handle("GET /sessions/{id}/events", s.authed(s.stream))
	m.Handle("GET /approvals", s.authed(s.approvalsPage))
	m.Handle("POST /approvals/{id}", s.authed(s.answer))
	m.Handle("GET /sessions/{id}/changes", s.authed(s.changesPage))
	m.Handle("POST /sessions/{id}/changes/apply", s.authed(s.applyChanges))
	m.Handle("POST /sessions/{id}/changes/discard", s.authed(s.discardChanges))
	m.Handle("GET /audit", s.authed(s.auditPage))
	m.Handle("GET /audit/{seq}", s.authed(s.auditEntry))
	m.Handle("GET /policy", s.authed(s.policyPage))
	m.Handle("GET /secrets", s.authed(s.secretsPage))
	m.Handle("POST /secrets/refresh", s.authed(s.refreshSecrets))
	m.Handle("GET /schedules", s.authed(s.schedulesPage))
	m.Handle("GET /memory", s.authed(s.memoryPage))
	m.Handle("GET /skills", s.authed(s.skillsPage))
	m.Handle("GET /plugins", s.authed(s.pluginsPage))
	m.Handle("POST /plugins/{name}/approve-tools", s.authed(s.approveTools))
	m.Handle("GET /passkeys", s.authed(s.passkeysPage))
	m.Handle("POST /passkeys/register/begin", s.authed(s.registerBegin))
	m.Handle("POST /passkeys/register/finish", s.authed(s.registerFinish))
	m.Handle("POST /passkeys/{id}/remove", s.authed(s.removePasskey))
	m.HandleFunc("GET /login/passkey", s.passkeyLoginPage)
	m.HandleFunc("POST /login/passkey/begin", s.loginBegin)
	m.HandleFunc("POST /login/passkey/finish", s.loginFinish)
	s.mux = m
}

// ServeHTTP checks the Host of every request (DNS rebinding), sets the
// security headers, and hands it to the page.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if s.secure(r) {
		h.Set("Strict-Transport-Security", "max-age=31536000")
	}
	if !s.hostAllowed(r.Host) {
		s.refuse(w, r, http.StatusMisdirectedRequest, RefusedHost, "")
		return
	}
	s.mux.ServeHTTP(w, r)
}

// authed admits a request with a known session cookie; a state change
// must also come from a page of this console (Origin) and carry the
// session's CSRF token. Each refusal is recorded.
func (s *Server) authed(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(CookieName)
		if err != nil {
			s.renderStatus(w, r, http.StatusUnauthorized, "Not logged in", "Run 'fluffy web open' on the daemon's host for a one-time login link, or log in with a passkey at /login/passkey.")
			return
		}
		ws, ok := s.auth.session(c.Value)
		if !ok {
			// A cookie this daemon never issued (another daemon's, an
			// earlier run's, a forged one) or one that expired.
			s.refuse(w, r, http.StatusUnauthorized, RefusedCookie, "")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
			if !s.sameOrigin(r) {
				s.refuse(w, r, http.StatusForbidden, RefusedOrigin, ws.principal)
				return
			}
			if !checkCSRF(r, ws) {
				s.refuse(w, r, http.StatusForbidden, RefusedCSRF, ws.principal)
				return
			}
		}
		next(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, ws)))
	})
}

// login exchanges a one-time token (?t=) for a session cookie and sends
// the browser on without the token in its address bar or history.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	cookie, principal, err := s.auth.redeem(r.URL.Query().Get("t"))
	if err != nil {
		s.refuse(w, r, http.StatusForbidden, RefusedLogin, "")
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	defer cancel()
	if _, err := s.o.Audit.Append(ctx, audit.Entry{Kind: audit.KindWebLogin, Actor: "channel:" + Name,
		Payload: audit.WebLogin{Principal: principal, Remote: r.RemoteAddr, Method: "link"}}); err != nil {
		// A login that cannot be recorded does not count.
		s.auth.logout(cookie)
		s.log.Error("record a login", "err", err)
		http.Error(w, "the login could not be recorded", http.StatusInternalServerError)
		return
	}
	s.setCookie(w, r, cookie)
	s.log.Info("web login", "principal", principal, "remote", r.RemoteAddr)
	http.Redirect(w, r, "/sessions", http.StatusSeeOther)
}

func (s *Server) setCookie(w http.ResponseWriter, r *http.Request, cookie string) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: cookie, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: s.secure(r), MaxAge: int(SessionTTL / time.Second)})
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(CookieName); err == nil {
		s.auth.logout(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: s.secure(r), MaxAge: -1})
	s.renderStatus(w, r, http.StatusOK, "Logged out", "Run 'fluffy web open' for a new login link.")
}
