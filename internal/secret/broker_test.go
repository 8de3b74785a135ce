package secret

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// countingBackend is a map that counts lookups and can lock.
type countingBackend struct {
	mu      sync.Mutex
	vals    map[string]string
	lookups int
	locks   int
}

func (c *countingBackend) Lookup(_ context.Context, p string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lookups++
	v, ok := c.vals[p]
	if !ok {
		return nil, ErrNotFound
	}
	return []byte(v), nil
}

func (c *countingBackend) Lock(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.locks++
	return nil
}

func newTestBroker(t *testing.T, ttl time.Duration, now func() time.Time) (*Broker, *countingBackend) {
	t.Helper()
	be := &countingBackend{vals: map[string]string{"tok": "s3cret-token-value", "other": "another-secret-v"}}
	b, err := New(Options{Backends: map[string]Backend{"test": be}, Key: make([]byte, 32), TTL: ttl, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	return b, be
}

func TestBrokerCachesPerSession(t *testing.T) {
	b, be := newTestBroker(t, 0, nil)
	ctx := t.Context()
	ref := MustParseRef("secret://test/tok")
	var got string
	h1, err := b.Use(ctx, "s1", ref, func(v []byte) error { got = string(v); return nil })
	if err != nil || got != "s3cret-token-value" || h1.Cached {
		t.Fatalf("first use: %q, %+v, %v", got, h1, err)
	}
	h2, err := b.Use(ctx, "s1", ref, func([]byte) error { return nil })
	if err != nil || !h2.Cached || h2.Fingerprint != h1.Fingerprint {
		t.Fatalf("second use: %+v, %v", h2, err)
	}
	if _, err := b.Use(ctx, "s2", ref, func([]byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if be.lookups != 2 {
		t.Errorf("lookups = %d, want 2 (one per session)", be.lookups)
	}
	if strings.Contains(h1.Fingerprint, "s3cret") || !strings.HasPrefix(h1.Fingerprint, "hmac-sha256:") {
		t.Errorf("fingerprint %q", h1.Fingerprint)
	}
	if !slices.Contains(b.Redactions(), "s3cret-token-value") {
		t.Error("a handed-out value is not among the redactions")
	}
	if !b.Holds("s1") || b.Holds("s3") || !b.Contains("s1", []byte("x=czNjcmV0LXRva2VuLXZhbHVl;")) || b.Contains("s3", []byte("s3cret-token-value")) || b.Contains("s1", []byte("nothing")) {
		t.Error("Holds or Contains is wrong")
	}
	b.EndSession(ctx, "s1")
	if be.locks != 0 {
		t.Error("backends locked while another session holds a value")
	}
	b.EndSession(ctx, "s2")
	if be.locks != 1 {
		t.Errorf("locks = %d after the last session ended, want 1", be.locks)
	}
	if r := b.Redactions(); len(r) != 0 {
		t.Errorf("redactions after every session ended: %v", r)
	}
}

// TestBrokerZeroesAtExpiry: the very bytes handed out are zeroed when the
// TTL passes, and the next use fetches again.
func TestBrokerZeroesAtExpiry(t *testing.T) {
	now := time.Unix(1000, 0)
	b, be := newTestBroker(t, time.Minute, func() time.Time { return now })
	ctx := t.Context()
	ref := MustParseRef("secret://test/tok")
	var held []byte
	if _, err := b.Use(ctx, "s", ref, func(v []byte) error { held = v[:len(v):len(v)]; return nil }); err != nil {
		t.Fatal(err)
	}
	now = now.Add(59 * time.Second)
	b.Sweep()
	if string(held) != "s3cret-token-value" {
		t.Fatal("zeroed before its TTL")
	}
	e := b.sessions["s"][ref]
	now = now.Add(time.Second)
	b.Sweep()
	if e.val.mem != nil || b.sessions["s"] != nil {
		t.Fatal("the value outlived its TTL")
	}
	if _, err := b.Use(ctx, "s", ref, func([]byte) error { return nil }); err != nil || be.lookups != 2 {
		t.Errorf("after expiry: %v, lookups %d, want 2", err, be.lookups)
	}
}

func TestBrokerErrors(t *testing.T) {
	b, _ := newTestBroker(t, 0, nil)
	ctx := t.Context()
	_, err := b.Use(ctx, "s", MustParseRef("secret://nope/x"), func([]byte) error { return nil })
	if !errors.Is(err, ErrUnknownBackend) {
		t.Errorf("unknown backend: %v", err)
	}
	_, err = b.Use(ctx, "s", MustParseRef("secret://test/missing"), func([]byte) error { return nil })
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("missing: %v", err)
	}
	if _, err := New(Options{Backends: map[string]Backend{}}); err == nil {
		t.Error("New without a key succeeded")
	}
	fp, err := b.Test(ctx, MustParseRef("secret://test/tok"))
	if err != nil || fp == "" || len(b.sessions) != 0 {
		t.Errorf("Test = %q, %v; cached %d sessions", fp, err, len(b.sessions))
	}
}

func TestInject(t *testing.T) {
	b, _ := newTestBroker(t, 0, nil)
	ctx := t.Context()
	mk := func(ref, as, name string, bind []string) Use {
		u, err := NewUse(ref, as, name, bind, []string{"curl"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	uses := []Use{
		mk("secret://test/tok", "env", "TOKEN", nil),
		mk("secret://test/tok", "file", "token", nil),
		mk("secret://test/other", "stdin", "", nil),
		mk("secret://test/other", "proxy", "API_KEY", []string{"api.example.com"}),
	}
	in, err := b.Inject(ctx, "s", uses)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(in.Env, "TOKEN=s3cret-token-value") || string(in.Files["token"]) != "s3cret-token-value" || string(in.Stdin) != "another-secret-v" {
		t.Errorf("injection: %+v", in)
	}
	if len(in.Swaps) != 1 {
		t.Fatalf("swaps: %+v", in.Swaps)
	}
	sw := in.Swaps[0]
	if !strings.HasPrefix(sw.Placeholder, PlaceholderPrefix) || len(sw.Placeholder) != len(PlaceholderPrefix)+32 || string(sw.Value) != "another-secret-v" || !slices.Equal(sw.Hosts, []string{"api.example.com"}) {
		t.Errorf("swap: %+v", sw)
	}
	if !slices.Contains(in.Env, "API_KEY="+sw.Placeholder) {
		t.Errorf("the sandbox does not get the placeholder: %v", in.Env)
	}
	for _, e := range in.Env {
		if strings.Contains(e, "another-secret-v") {
			t.Errorf("a proxy use put the value in the environment: %q", e)
		}
	}
	if len(in.Handouts) != 4 {
		t.Errorf("handouts: %d", len(in.Handouts))
	}
	in.Wipe()
	if string(in.Files["token"]) == "s3cret-token-value" || string(in.Swaps[0].Value) == "another-secret-v" {
		t.Error("Wipe left a value")
	}
	// Each sandbox gets a placeholder of its own.
	swaps, env, err := b.Swaps(ctx, "s", uses)
	if err != nil || len(swaps) != 1 || swaps[0].Placeholder == sw.Placeholder || len(env) != 1 {
		t.Errorf("Swaps = %+v, %v, %v", swaps, env, err)
	}
	if _, err := b.Inject(ctx, "s", []Use{uses[2], uses[2]}); !errors.Is(err, ErrTwoStdin) {
		t.Errorf("two stdin uses: %v", err)
	}
}

func TestUseDeclarations(t *testing.T) {
	for _, c := range []struct {
		ref, as, name string
		bind, cmds    []string
	}{
		{"secret://env/X", "env", "1X", nil, []string{"gh"}},
		{"secret://env/X", "file", "a/b", nil, []string{"gh"}},
		{"secret://env/X", "proxy", "X", nil, []string{"gh"}},
		{"secret://env/X", "env", "X", []string{"h"}, []string{"gh"}},
		{"secret://env/X", "env", "X", nil, nil},
		{"secret://env/X", "argv", "X", nil, []string{"gh"}},
		{"X", "env", "X", nil, []string{"gh"}},
	} {
		if _, err := NewUse(c.ref, c.as, c.name, c.bind, c.cmds, nil); err == nil {
			t.Errorf("NewUse(%+v) accepted", c)
		}
	}
	u, err := NewUse("secret://env/X", "env", "X", nil, []string{"gh"}, []string{"code-executor"})
	if err != nil {
		t.Fatal(err)
	}
	if !u.Applies("code-executor", []string{"cat", "/usr/bin/gh"}) || u.Applies("code-executor", []string{"cat"}) || u.Applies("ai-provider", []string{"gh"}) {
		t.Error("Applies is wrong")
	}
}
