package web_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/web"
)

// memPasskeys is a store that keeps what it is told: Used does not
// check the counter, so the console's own check is what a test sees.
type memPasskeys struct {
	mu   sync.Mutex
	keys []web.Passkey
}

func (m *memPasskeys) Add(_ context.Context, p web.Passkey) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keys = append(m.keys, p)
	return nil
}

func (m *memPasskeys) List(_ context.Context, principal string) ([]web.Passkey, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []web.Passkey
	for _, k := range m.keys {
		if k.Principal == principal {
			out = append(out, k)
		}
	}
	return out, nil
}

func (m *memPasskeys) ByID(_ context.Context, id []byte) (web.Passkey, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range m.keys {
		if bytes.Equal(k.ID, id) {
			return k, nil
		}
	}
	return web.Passkey{}, web.ErrNotFound
}

func (m *memPasskeys) Used(_ context.Context, id []byte, n uint32, flags byte, at time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, k := range m.keys {
		if bytes.Equal(k.ID, id) {
			m.keys[i].SignCount, m.keys[i].Flags, m.keys[i].LastUsed = n, flags, at
			return nil
		}
	}
	return web.ErrNotFound
}

func (m *memPasskeys) Remove(_ context.Context, principal string, id []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, k := range m.keys {
		if bytes.Equal(k.ID, id) && k.Principal == principal {
			m.keys = append(m.keys[:i], m.keys[i+1:]...)
			return nil
		}
	}
	return web.ErrNotFound
}

// cbor encodes the few CBOR values a "none" attestation needs: maps
// (keys in the order given), text, bytes and integers.
type cborKV struct{ k, v any }

func cbor(v any) []byte {
	head := func(major byte, n uint64) []byte {
		switch {
		case n < 24:
			return []byte{major<<5 | byte(n)}
		case n < 256:
			return []byte{major<<5 | 24, byte(n)}
		default:
			b := []byte{major<<5 | 25, 0, 0}
			binary.BigEndian.PutUint16(b[1:], uint16(n))
			return b
		}
	}
	switch x := v.(type) {
	case int:
		if x < 0 {
			return head(1, uint64(-1-x))
		}
		return head(0, uint64(x))
	case string:
		return append(head(3, uint64(len(x))), x...)
	case []byte:
		return append(head(2, uint64(len(x))), x...)
	case []cborKV:
		out := head(5, uint64(len(x)))
		for _, kv := range x {
			out = append(out, cbor(kv.k)...)
			out = append(out, cbor(kv.v)...)
		}
		return out
	}
	panic(fmt.Sprintf("cbor: type %T", v))
}

// softKey is a software authenticator: one P-256 credential, a counter
// it is told, user verification always done.
type softKey struct {
	key    *ecdsa.PrivateKey
	id     []byte
	handle []byte
	count  uint32
}

func newSoftKey(t *testing.T) *softKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	return &softKey{key: k, id: id}
}

var b64 = base64.RawURLEncoding

func clientData(typ, challenge, origin string) []byte {
	b, _ := json.Marshal(map[string]any{"type": typ, "challenge": challenge, "origin": origin, "crossOrigin": false})
	return b
}

// authData: the RP ID's hash, flags (user present and verified, plus
// attested credential data when att), the counter.
func (s *softKey) authData(rpID string, att bool) []byte {
	h := sha256.Sum256([]byte(rpID))
	flags := byte(0x01 | 0x04)
	if att {
		flags |= 0x40
	}
	out := append(h[:], flags, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(out[33:], s.count)
	if att {
		pub, err := s.key.PublicKey.Bytes() // 0x04 | X | Y
		if err != nil {
			panic(err)
		}
		x, y := pub[1:33], pub[33:]
		out = append(out, make([]byte, 16)...) // AAGUID
		out = binary.BigEndian.AppendUint16(out, uint16(len(s.id)))
		out = append(out, s.id...)
		out = append(out, cbor([]cborKV{{1, 2}, {3, -7}, {-1, 1}, {-2, x}, {-3, y}})...)
	}
	return out
}

type started struct {
	Ceremony string `json:"ceremony"`
	Options  struct {
		PublicKey struct {
			Challenge string `json:"challenge"`
			RP        struct {
				ID string `json:"id"`
			} `json:"rp"`
			RPID string `json:"rpId"`
			User struct {
				ID string `json:"id"`
			} `json:"user"`
		} `json:"publicKey"`
	} `json:"options"`
}

// create answers a registration's options as a browser at origin would.
func (s *softKey) create(t *testing.T, st started, origin string) []byte {
	t.Helper()
	pk := st.Options.PublicKey
	h, err := b64.DecodeString(pk.User.ID)
	if err != nil {
		t.Fatal(err)
	}
	s.handle = h
	att := cbor([]cborKV{{"fmt", "none"}, {"attStmt", []cborKV{}}, {"authData", s.authData(pk.RP.ID, true)}})
	body, _ := json.Marshal(map[string]any{"id": b64.EncodeToString(s.id), "rawId": b64.EncodeToString(s.id), "type": "public-key",
		"response": map[string]string{"clientDataJSON": b64.EncodeToString(clientData("webauthn.create", pk.Challenge, origin)),
			"attestationObject": b64.EncodeToString(att)}})
	return body
}

// get answers a login's options, signed, as a browser at origin would.
func (s *softKey) get(t *testing.T, st started, origin string) []byte {
	t.Helper()
	pk := st.Options.PublicKey
	ad := s.authData(pk.RPID, false)
	cd := clientData("webauthn.get", pk.Challenge, origin)
	cdh := sha256.Sum256(cd)
	digest := sha256.Sum256(append(append([]byte(nil), ad...), cdh[:]...))
	sig, err := ecdsa.SignASN1(rand.Reader, s.key, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"id": b64.EncodeToString(s.id), "rawId": b64.EncodeToString(s.id), "type": "public-key",
		"response": map[string]string{"clientDataJSON": b64.EncodeToString(cd), "authenticatorData": b64.EncodeToString(ad),
			"signature": b64.EncodeToString(sig), "userHandle": b64.EncodeToString(s.handle)}})
	return body
}

// passkeyConsole is a console with a passkey store, reached as
// localhost (a secure context without TLS, as browsers treat it).
type passkeyConsole struct {
	*console
	keys   *memPasskeys
	host   string // localhost:PORT
	origin string
}

func newPasskeyConsole(t *testing.T) *passkeyConsole {
	keys := &memPasskeys{}
	c := newConsoleWith(t, func(o *web.Options) { o.Passkeys = keys })
	_, port, _ := strings.Cut(c.ts.Listener.Addr().String(), ":")
	host := "localhost:" + port
	return &passkeyConsole{console: c, keys: keys, host: host, origin: "http://" + host}
}

// post sends body to path as the console's page at origin would (with
// csrf, when not ""); it returns the status and the body.
func (c *passkeyConsole) post(cl *http.Client, path, origin, csrf string, body []byte) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.ts.URL+path, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Host = c.host
	// A cookie from a link login is in the jar under the address
	// dialled; a browser at localhost would hold it under that name.
	for _, ck := range cl.Jar.Cookies(req.URL) {
		req.AddCookie(ck)
	}
	req.Header.Set("Origin", origin)
	req.Header.Set("Content-Type", "application/json")
	if csrf != "" {
		req.Header.Set("X-CSRF-Token", csrf)
	}
	resp, err := cl.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (c *passkeyConsole) begin(cl *http.Client, path, csrf string) started {
	c.t.Helper()
	code, body := c.post(cl, path, c.origin, csrf, nil)
	if code != http.StatusOK {
		c.t.Fatalf("%s: %d %s", path, code, body)
	}
	var st started
	if err := json.Unmarshal(body, &st); err != nil {
		c.t.Fatal(err)
	}
	return st
}

// register registers key for the logged-in user:alice.
func (c *passkeyConsole) register(key *softKey) {
	c.t.Helper()
	cl, csrf := c.login()
	st := c.begin(cl, "/passkeys/register/begin", csrf)
	if st.Options.PublicKey.RP.ID != "localhost" {
		c.t.Fatalf("RP ID %q, want localhost", st.Options.PublicKey.RP.ID)
	}
	code, body := c.post(cl, "/passkeys/register/finish?c="+st.Ceremony, c.origin, csrf, key.create(c.t.(*testing.T), st, c.origin))
	if code != http.StatusOK {
		c.t.Fatalf("register: %d %s", code, body)
	}
}

// loginWith runs a passkey login with key, its answer made at origin.
func (c *passkeyConsole) loginWith(t *testing.T, key *softKey, origin string) (*http.Client, int) {
	t.Helper()
	cl := c.client()
	st := c.begin(cl, "/login/passkey/begin", "")
	code, _ := c.post(cl, "/login/passkey/finish?c="+st.Ceremony, c.origin, "", key.get(t, st, origin))
	return cl, code
}

func (c *console) entries(kind audit.Kind) []audit.Entry {
	c.t.Helper()
	if err := c.log.Flush(c.t.Context()); err != nil {
		c.t.Fatal(err)
	}
	var out []audit.Entry
	if err := c.reader.Entries(c.t.Context(), audit.Filter{Kind: kind}, func(e audit.Entry) error {
		out = append(out, e)
		return nil
	}); err != nil {
		c.t.Fatal(err)
	}
	return out
}

func TestPasskeyRegisterAndLogin(t *testing.T) {
	c := newPasskeyConsole(t)
	key := newSoftKey(t)
	c.register(key)
	if len(c.keys.keys) != 1 || c.keys.keys[0].Principal != "user:alice" {
		t.Fatalf("stored %+v", c.keys.keys)
	}
	key.count = 1
	cl, code := c.loginWith(t, key, c.origin)
	if code != http.StatusOK {
		t.Fatalf("passkey login: %d", code)
	}
	req, _ := http.NewRequest(http.MethodGet, c.ts.URL+"/sessions", nil)
	req.Host = c.host
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the sessions page after a passkey login: %s", resp.Status)
	}
	if got := c.keys.keys[0].SignCount; got != 1 {
		t.Errorf("stored counter %d, want 1", got)
	}
	reg := c.entries(audit.KindWebPasskey)
	if len(reg) != 1 || !strings.Contains(string(reg[0].Payload.(json.RawMessage)), `"action":"register"`) {
		t.Errorf("web.passkey entries: %+v", reg)
	}
	var methods []string
	for _, e := range c.entries(audit.KindWebLogin) {
		var p audit.WebLogin
		_ = json.Unmarshal(e.Payload.(json.RawMessage), &p)
		methods = append(methods, p.Method+" "+p.Principal)
	}
	if strings.Join(methods, ",") != "link user:alice,passkey user:alice" {
		t.Errorf("web.login methods: %v", methods)
	}
}

func TestPasskeyRefusals(t *testing.T) {
	t.Run("origin header", func(t *testing.T) {
		c := newPasskeyConsole(t)
		key := newSoftKey(t)
		c.register(key)
		cl := c.client()
		st := c.begin(cl, "/login/passkey/begin", "")
		key.count = 1
		if code, _ := c.post(cl, "/login/passkey/finish?c="+st.Ceremony, "http://evil.example", "", key.get(t, st, c.origin)); code != http.StatusForbidden {
			t.Fatalf("finish from another origin: %d", code)
		}
		if code, _ := c.post(cl, "/login/passkey/begin", "http://evil.example", "", nil); code != http.StatusForbidden {
			t.Fatalf("begin from another origin: %d", code)
		}
		assertRefused(t, c, "cross_origin", "cross_origin")
	})
	t.Run("client data origin", func(t *testing.T) {
		c := newPasskeyConsole(t)
		key := newSoftKey(t)
		c.register(key)
		key.count = 1
		if _, code := c.loginWith(t, key, "http://evil.example"); code != http.StatusForbidden {
			t.Fatalf("an assertion made for another origin: %d", code)
		}
		assertRefused(t, c, web.RefusedPasskeyInvalid)
	})
	t.Run("replayed challenge", func(t *testing.T) {
		c := newPasskeyConsole(t)
		key := newSoftKey(t)
		c.register(key)
		cl := c.client()
		st := c.begin(cl, "/login/passkey/begin", "")
		key.count = 1
		if code, _ := c.post(cl, "/login/passkey/finish?c="+st.Ceremony, c.origin, "", key.get(t, st, c.origin)); code != http.StatusOK {
			t.Fatalf("first answer: %d", code)
		}
		// A fresh, valid signature over the same challenge.
		key.count = 2
		if code, _ := c.post(c.client(), "/login/passkey/finish?c="+st.Ceremony, c.origin, "", key.get(t, st, c.origin)); code != http.StatusForbidden {
			t.Fatalf("second answer to one challenge: %d", code)
		}
		assertRefused(t, c, web.RefusedPasskeyChallenge)
	})
	t.Run("expired challenge", func(t *testing.T) {
		c := newPasskeyConsole(t)
		key := newSoftKey(t)
		c.register(key)
		cl := c.client()
		st := c.begin(cl, "/login/passkey/begin", "")
		c.advance(web.CeremonyTTL + time.Second)
		key.count = 1
		if code, _ := c.post(cl, "/login/passkey/finish?c="+st.Ceremony, c.origin, "", key.get(t, st, c.origin)); code != http.StatusForbidden {
			t.Fatalf("an answer after the challenge expired: %d", code)
		}
		assertRefused(t, c, web.RefusedPasskeyChallenge)
	})
	t.Run("unknown credential", func(t *testing.T) {
		c := newPasskeyConsole(t)
		c.register(newSoftKey(t))
		other := newSoftKey(t)
		other.handle = c.keys.keys[0].UserHandle
		other.count = 1
		if _, code := c.loginWith(t, other, c.origin); code != http.StatusForbidden {
			t.Fatalf("an unregistered credential: %d", code)
		}
		assertRefused(t, c, web.RefusedPasskeyUnknown)
	})
	t.Run("sign count regression", func(t *testing.T) {
		c := newPasskeyConsole(t)
		key := newSoftKey(t)
		c.register(key)
		key.count = 5
		if _, code := c.loginWith(t, key, c.origin); code != http.StatusOK {
			t.Fatalf("login at 5: %d", code)
		}
		key.count = 3
		if _, code := c.loginWith(t, key, c.origin); code != http.StatusForbidden {
			t.Fatalf("login at 3 after 5: %d", code)
		}
		key.count = 5
		if _, code := c.loginWith(t, key, c.origin); code != http.StatusForbidden {
			t.Fatalf("login at 5 again: %d", code)
		}
		assertRefused(t, c, web.RefusedPasskeySignCount, web.RefusedPasskeySignCount)
	})
	t.Run("removed", func(t *testing.T) {
		c := newPasskeyConsole(t)
		key := newSoftKey(t)
		c.register(key)
		cl, csrf := c.login()
		code, _ := c.post(cl, "/passkeys/"+b64.EncodeToString(key.id)+"/remove", c.origin, csrf, nil)
		if code != http.StatusSeeOther {
			t.Fatalf("remove: %d", code)
		}
		key.count = 1
		if _, code := c.loginWith(t, key, c.origin); code != http.StatusForbidden {
			t.Fatalf("a removed passkey: %d", code)
		}
		assertRefused(t, c, web.RefusedPasskeyUnknown)
		if n := len(c.entries(audit.KindWebPasskey)); n != 2 {
			t.Errorf("%d web.passkey entries, want register and remove", n)
		}
	})
	t.Run("another principal's passkey", func(t *testing.T) {
		c := newPasskeyConsole(t)
		key := newSoftKey(t)
		c.register(key)
		link, err := c.srv.LoginURL("user:bob")
		if err != nil {
			t.Fatal(err)
		}
		cl := c.client()
		resp, err := cl.Get(link)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		page := c.get(cl, "/passkeys", http.StatusOK)
		if strings.Contains(page, b64.EncodeToString(key.id)[:20]) {
			t.Errorf("bob's page lists alice's passkey")
		}
		_, rest, _ := strings.Cut(page, `name="csrf-token" content="`)
		csrf, _, _ := strings.Cut(rest, `"`)
		if code, _ := c.post(cl, "/passkeys/"+b64.EncodeToString(key.id)+"/remove", c.origin, csrf, nil); code != http.StatusNotFound {
			t.Fatalf("bob removing alice's passkey: %d", code)
		}
		if len(c.keys.keys) != 1 {
			t.Fatalf("alice's passkey is gone")
		}
	})
	t.Run("no TLS, not localhost", func(t *testing.T) {
		c := newPasskeyConsole(t)
		c.host = c.ts.Listener.Addr().String()
		if code, _ := c.post(c.client(), "/login/passkey/begin", "http://"+c.host, "", nil); code != http.StatusForbidden {
			t.Fatalf("begin on an IP address: %d", code)
		}
		assertRefused(t, c, web.RefusedPasskeyInsecure)
	})
}

func assertRefused(t *testing.T, c *passkeyConsole, want ...string) {
	t.Helper()
	if got := c.refusals(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("channel.refused reasons %v, want %v", got, want)
	}
}
