package web

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"

	"github.com/fluffy-agent/fluffy/internal/audit"
)

// CeremonyTTL is how long a passkey registration or login may take from
// its challenge to its answer.
const CeremonyTTL = 2 * time.Minute

// maxCeremonies bounds the challenges waiting for an answer: a login's
// challenge is handed to anyone who asks, so the map must not grow
// without end.
const maxCeremonies = 256

// Why a passkey request was refused, as recorded in channel.refused.
const (
	RefusedPasskeyChallenge = "passkey_challenge"  // unknown, used or expired challenge
	RefusedPasskeyUnknown   = "passkey_unknown"    // no such credential registered
	RefusedPasskeyInvalid   = "passkey_invalid"    // the ceremony did not verify
	RefusedPasskeySignCount = "passkey_sign_count" // the counter went back: a cloned key
	RefusedPasskeyInsecure  = "passkey_insecure"   // no TLS and not localhost
)

// Passkey is a principal's registered WebAuthn credential.
type Passkey struct {
	ID        []byte
	Principal string
	// UserHandle is the random handle the principal's passkeys are
	// registered under, the same for all of them.
	UserHandle []byte
	PublicKey  []byte
	// Flags are the credential's flags as go-webauthn packs them.
	Flags     byte
	SignCount uint32
	Created   time.Time
	LastUsed  time.Time
}

// ErrSignCount: a passkey's signature counter did not go up (it is not
// zero throughout): another copy of the key may exist.
var ErrSignCount = errors.New("web: the passkey's signature counter went back")

// Passkeys store the principals' passkeys durably. ByID and Remove
// return ErrNotFound for an unknown credential (Remove also for one of
// another principal). Used records a login: it returns ErrSignCount,
// changing nothing, unless signCount is above the stored one or both are
// zero.
type Passkeys interface {
	Add(ctx context.Context, p Passkey) error
	List(ctx context.Context, principal string) ([]Passkey, error)
	ByID(ctx context.Context, id []byte) (Passkey, error)
	Used(ctx context.Context, id []byte, signCount uint32, flags byte, at time.Time) error
	Remove(ctx context.Context, principal string, id []byte) error
}

// ceremony is a challenge handed out, waiting for its answer.
type ceremony struct {
	kind      string // "register" or "login"
	principal string // the registering principal; "" for a login
	data      webauthn.SessionData
	expires   time.Time
}

// ceremonies are the challenges handed out, in memory: each is taken
// once, within CeremonyTTL.
type ceremonies struct {
	now func() time.Time

	mu sync.Mutex // guards m
	m  map[string]ceremony
}

var errTooManyCeremonies = errors.New("web: too many passkey ceremonies under way")

func (c *ceremonies) put(cer ceremony) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for k, v := range c.m {
		if now.After(v.expires) {
			delete(c.m, k)
		}
	}
	if len(c.m) >= maxCeremonies {
		return "", errTooManyCeremonies
	}
	id := newToken()
	cer.expires = now.Add(CeremonyTTL)
	c.m[tokenKey(id)] = cer
	return id, nil
}

// take removes and returns a ceremony of kind; false for an unknown,
// used or expired one or one of another kind.
func (c *ceremonies) take(id, kind string) (ceremony, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := tokenKey(id)
	cer, ok := c.m[k]
	delete(c.m, k)
	if !ok || cer.kind != kind || c.now().After(cer.expires) {
		return ceremony{}, false
	}
	return cer, true
}

// passkeyUser is a principal as go-webauthn sees it.
type passkeyUser struct {
	principal string
	handle    []byte
	keys      []Passkey
}

func (u passkeyUser) WebAuthnID() []byte          { return u.handle }
func (u passkeyUser) WebAuthnName() string        { return u.principal }
func (u passkeyUser) WebAuthnDisplayName() string { return u.principal }
func (u passkeyUser) WebAuthnCredentials() []webauthn.Credential {
	out := make([]webauthn.Credential, len(u.keys))
	for i, p := range u.keys {
		out[i] = webauthn.Credential{ID: p.ID, PublicKey: p.PublicKey, Flags: webauthn.CredentialFlagsFromMsgpByte(p.Flags),
			Authenticator: webauthn.Authenticator{SignCount: p.SignCount}}
	}
	return out
}

var errPasskeyInsecure = errors.New("web: passkeys need the console over TLS (or on localhost)")

// relyingParty is the WebAuthn relying party for the host the browser
// used (the request's Host, already checked): its name without the port
// is the RP ID, and the request's scheme and Host its one origin.
// Browsers offer WebAuthn only in a secure context, and an RP ID cannot
// be an IP address.
func (s *Server) relyingParty(r *http.Request) (*webauthn.WebAuthn, error) {
	host := strings.ToLower(r.Host)
	name, _, err := net.SplitHostPort(host)
	if err != nil {
		name = host
	}
	if net.ParseIP(name) != nil || !s.secure(r) && name != "localhost" {
		return nil, errPasskeyInsecure
	}
	return webauthn.New(&webauthn.Config{
		RPID: name, RPDisplayName: "fluffy", RPOrigins: []string{s.scheme(r) + "://" + host},
		AuthenticatorSelection: protocol.AuthenticatorSelection{
			ResidentKey: protocol.ResidentKeyRequirementRequired, UserVerification: protocol.VerificationRequired},
		Timeouts: webauthn.TimeoutsConfig{
			Login:        webauthn.TimeoutConfig{Enforce: true, Timeout: CeremonyTTL, TimeoutUVD: CeremonyTTL},
			Registration: webauthn.TimeoutConfig{Enforce: true, Timeout: CeremonyTTL, TimeoutUVD: CeremonyTTL},
		},
	})
}

// passkeyUserOf is principal with its passkeys and handle (a new random
// one for a principal without passkeys).
func (s *Server) passkeyUserOf(ctx context.Context, principal string) (passkeyUser, error) {
	keys, err := s.o.Passkeys.List(ctx, principal)
	if err != nil {
		return passkeyUser{}, err
	}
	u := passkeyUser{principal: principal, keys: keys}
	if len(keys) > 0 {
		u.handle = keys[0].UserHandle
	} else {
		u.handle = make([]byte, 32)
		_, _ = rand.Read(u.handle) // crypto/rand.Read does not fail
	}
	return u, nil
}

// ceremonyStart is what a begin endpoint answers: the challenge's id,
// sent back with the answer, and the options for the browser.
type ceremonyStart struct {
	Ceremony string `json:"ceremony"`
	Options  any    `json:"options"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// passkeysView is the passkeys page.
type passkeysView struct {
	Keys      []passkeyRow
	Available bool
}

type passkeyRow struct {
	ID                string
	Created, LastUsed time.Time
	SignCount         uint32
}

func credID(id []byte) string { return base64.RawURLEncoding.EncodeToString(id) }

func (s *Server) passkeysPage(w http.ResponseWriter, r *http.Request) {
	if s.o.Passkeys == nil {
		s.renderStatus(w, r, http.StatusNotFound, "Passkeys", "This console keeps no passkeys.")
		return
	}
	keys, err := s.o.Passkeys.List(r.Context(), sessionOf(r).principal)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	_, rpErr := s.relyingParty(r)
	v := passkeysView{Available: rpErr == nil}
	for _, k := range keys {
		v.Keys = append(v.Keys, passkeyRow{ID: credID(k.ID), Created: k.Created, LastUsed: k.LastUsed, SignCount: k.SignCount})
	}
	s.render(w, r, http.StatusOK, "passkeys", "Passkeys", v)
}

// registerBegin hands a logged-in principal the options to create a
// passkey: a resident key with user verification, none of its own
// passkeys again.
func (s *Server) registerBegin(w http.ResponseWriter, r *http.Request) {
	ws := sessionOf(r)
	wa, err := s.passkeysFor(w, r, ws.principal)
	if err != nil {
		return
	}
	u, err := s.passkeyUserOf(r.Context(), ws.principal)
	if err != nil {
		s.jsonFail(w, err)
		return
	}
	var exclude []protocol.CredentialDescriptor
	for _, c := range u.WebAuthnCredentials() {
		exclude = append(exclude, c.Descriptor())
	}
	creation, data, err := wa.BeginRegistration(u, webauthn.WithExclusions(exclude),
		webauthn.WithResidentKeyRequirement(protocol.ResidentKeyRequirementRequired))
	if err != nil {
		s.jsonFail(w, err)
		return
	}
	id, err := s.cer.put(ceremony{kind: "register", principal: ws.principal, data: *data})
	if err != nil {
		s.jsonFail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ceremonyStart{Ceremony: id, Options: creation})
}

// registerFinish verifies the browser's new credential against its
// challenge (taken once), stores it and records web.passkey.
func (s *Server) registerFinish(w http.ResponseWriter, r *http.Request) {
	ws := sessionOf(r)
	wa, err := s.passkeysFor(w, r, ws.principal)
	if err != nil {
		return
	}
	cer, ok := s.cer.take(r.URL.Query().Get("c"), "register")
	if !ok || cer.principal != ws.principal {
		s.refuse(w, r, http.StatusForbidden, RefusedPasskeyChallenge, ws.principal)
		return
	}
	parsed, err := protocol.ParseCredentialCreationResponseBody(r.Body)
	if err != nil {
		s.refusePasskey(w, r, RefusedPasskeyInvalid, ws.principal, err)
		return
	}
	u, err := s.passkeyUserOf(r.Context(), ws.principal)
	if err != nil {
		s.jsonFail(w, err)
		return
	}
	if len(u.keys) == 0 {
		// The principal's first passkey: the handle handed out with
		// the challenge becomes its handle.
		u.handle = cer.data.UserID
	}
	if !bytes.Equal(u.handle, cer.data.UserID) {
		// A passkey of this principal was registered meanwhile, under
		// the handle this one must share.
		s.refuse(w, r, http.StatusConflict, RefusedPasskeyChallenge, ws.principal)
		return
	}
	cred, err := wa.CreateCredential(u, cer.data, parsed)
	if err != nil {
		s.refusePasskey(w, r, RefusedPasskeyInvalid, ws.principal, err)
		return
	}
	pk := Passkey{ID: cred.ID, Principal: ws.principal, UserHandle: u.handle, PublicKey: cred.PublicKey,
		Flags: cred.Flags.MsgpByte(), SignCount: cred.Authenticator.SignCount, Created: s.o.Now()}
	if err := s.o.Passkeys.Add(r.Context(), pk); err != nil {
		s.jsonFail(w, err)
		return
	}
	if err := s.recordPasskey(r, ws.principal, "register", cred.ID); err != nil {
		// A registration that cannot be recorded does not count.
		_ = s.o.Passkeys.Remove(context.WithoutCancel(r.Context()), ws.principal, cred.ID)
		s.jsonFail(w, err)
		return
	}
	s.log.Info("passkey registered", "principal", ws.principal, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]string{"credential": credID(cred.ID)})
}

// removePasskey removes one of the principal's passkeys and records
// web.passkey.
func (s *Server) removePasskey(w http.ResponseWriter, r *http.Request) {
	ws := sessionOf(r)
	if s.o.Passkeys == nil {
		s.renderStatus(w, r, http.StatusNotFound, "Passkeys", "This console keeps no passkeys.")
		return
	}
	id, err := base64.RawURLEncoding.DecodeString(r.PathValue("id"))
	if err != nil {
		s.renderStatus(w, r, http.StatusBadRequest, "Passkeys", "That is not a passkey's id.")
		return
	}
	pk, err := s.o.Passkeys.ByID(r.Context(), id)
	if err == nil && pk.Principal != ws.principal {
		err = fmt.Errorf("%w: passkey", ErrNotFound)
	}
	if err == nil {
		err = s.o.Passkeys.Remove(r.Context(), ws.principal, id)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.recordPasskey(r, ws.principal, "remove", id); err != nil {
		// A removal that cannot be recorded does not happen.
		if aerr := s.o.Passkeys.Add(context.WithoutCancel(r.Context()), pk); aerr != nil {
			err = errors.Join(err, aerr)
		}
		s.fail(w, r, fmt.Errorf("the removal could not be recorded: %w", err))
		return
	}
	http.Redirect(w, r, "/passkeys", http.StatusSeeOther)
}

// passkeyLoginPage offers a login with a passkey: no link needed.
func (s *Server) passkeyLoginPage(w http.ResponseWriter, r *http.Request) {
	_, err := s.relyingParty(r)
	s.render(w, r, http.StatusOK, "passkeylogin", "Log in", passkeysView{Available: err == nil && s.o.Passkeys != nil})
}

// loginBegin hands anyone on a page of this console a challenge for a
// discoverable passkey with user verification. No login exists yet, so
// there is no CSRF token: the Origin check stands for it.
func (s *Server) loginBegin(w http.ResponseWriter, r *http.Request) {
	if !s.sameOrigin(r) {
		s.refuse(w, r, http.StatusForbidden, RefusedOrigin, "")
		return
	}
	wa, err := s.passkeysFor(w, r, "")
	if err != nil {
		return
	}
	assertion, data, err := wa.BeginDiscoverableLogin(webauthn.WithUserVerification(protocol.VerificationRequired))
	if err != nil {
		s.jsonFail(w, err)
		return
	}
	id, err := s.cer.put(ceremony{kind: "login", data: *data})
	if errors.Is(err, errTooManyCeremonies) {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if err != nil {
		s.jsonFail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ceremonyStart{Ceremony: id, Options: assertion})
}

// errPasskeyHandle: the credential exists, but under another user
// handle than the assertion names.
var errPasskeyHandle = errors.New("web: the passkey's user handle does not match")

// loginFinish verifies a passkey's assertion against its challenge
// (taken once): a registered credential, its user handle, its signature
// and a counter that went up. It then starts a console session as
// the link does and records web.login (method passkey).
func (s *Server) loginFinish(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	if !s.sameOrigin(r) {
		s.refuse(w, r, http.StatusForbidden, RefusedOrigin, "")
		return
	}
	wa, err := s.passkeysFor(w, r, "")
	if err != nil {
		return
	}
	cer, ok := s.cer.take(r.URL.Query().Get("c"), "login")
	if !ok {
		s.refuse(w, r, http.StatusForbidden, RefusedPasskeyChallenge, "")
		return
	}
	parsed, err := protocol.ParseCredentialRequestResponseBody(r.Body)
	if err != nil {
		s.refusePasskey(w, r, RefusedPasskeyInvalid, "", err)
		return
	}
	var found Passkey
	lookup := func(rawID, handle []byte) (webauthn.User, error) {
		p, err := s.o.Passkeys.ByID(r.Context(), rawID)
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(p.UserHandle, handle) {
			return nil, errPasskeyHandle
		}
		found = p
		return passkeyUser{principal: p.Principal, handle: p.UserHandle, keys: []Passkey{p}}, nil
	}
	_, cred, err := wa.ValidatePasskeyLogin(lookup, cer.data, parsed)
	switch {
	case errors.Is(err, ErrNotFound):
		s.refusePasskey(w, r, RefusedPasskeyUnknown, "", err)
		return
	case err != nil:
		s.refusePasskey(w, r, RefusedPasskeyInvalid, found.Principal, err)
		return
	case cred.Authenticator.CloneWarning:
		s.refusePasskey(w, r, RefusedPasskeySignCount, found.Principal, ErrSignCount)
		return
	}
	if err := s.o.Passkeys.Used(r.Context(), cred.ID, cred.Authenticator.SignCount, cred.Flags.MsgpByte(), s.o.Now()); err != nil {
		if errors.Is(err, ErrSignCount) {
			// Another login with a higher counter won the race.
			s.refusePasskey(w, r, RefusedPasskeySignCount, found.Principal, err)
			return
		}
		s.jsonFail(w, err)
		return
	}
	cookie := s.auth.start(found.Principal)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	defer cancel()
	if _, err := s.o.Audit.Append(ctx, audit.Entry{Kind: audit.KindWebLogin, Actor: "channel:" + Name,
		Payload: audit.WebLogin{Principal: found.Principal, Remote: r.RemoteAddr, Method: "passkey", Credential: credID(cred.ID)}}); err != nil {
		s.auth.logout(cookie)
		s.jsonFail(w, fmt.Errorf("the login could not be recorded: %w", err))
		return
	}
	s.setCookie(w, r, cookie)
	s.log.Info("web login", "principal", found.Principal, "method", "passkey", "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]string{"next": "/sessions"})
}

// passkeysFor is the relying party for r, or false after answering: no
// store, or a host browsers offer no WebAuthn on.
func (s *Server) passkeysFor(w http.ResponseWriter, r *http.Request, principal string) (*webauthn.WebAuthn, error) {
	if s.o.Passkeys == nil {
		http.Error(w, "this console keeps no passkeys", http.StatusNotFound)
		return nil, errors.New("web: no passkey store")
	}
	wa, err := s.relyingParty(r)
	if errors.Is(err, errPasskeyInsecure) {
		s.refuse(w, r, http.StatusForbidden, RefusedPasskeyInsecure, principal)
		return nil, err
	}
	if err != nil {
		s.jsonFail(w, err)
		return nil, err
	}
	return wa, nil
}

// refusePasskey refuses a ceremony that did not verify; the library's
// detail goes to the log, not to the page.
func (s *Server) refusePasskey(w http.ResponseWriter, r *http.Request, reason, principal string, err error) {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		s.log.Warn("passkey ceremony refused", "reason", reason, "detail", pe.Details, "err", pe.Type)
	} else {
		s.log.Warn("passkey ceremony refused", "reason", reason, "err", err)
	}
	s.refuse(w, r, http.StatusForbidden, reason, principal)
}

func (s *Server) jsonFail(w http.ResponseWriter, err error) {
	s.log.Error("passkey", "err", err)
	http.Error(w, "the passkey request failed", http.StatusInternalServerError)
}

func (s *Server) recordPasskey(r *http.Request, principal, action string, id []byte) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	defer cancel()
	_, err := s.o.Audit.Append(ctx, audit.Entry{Kind: audit.KindWebPasskey, Actor: "channel:" + Name,
		Payload: audit.WebPasskey{Principal: principal, Action: action, Credential: credID(id), Remote: r.RemoteAddr}})
	return err
}
