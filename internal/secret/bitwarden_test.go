package secret

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func fakeBW(t *testing.T, password string) (*Bitwarden, string) {
	t.Helper()
	bin, err := filepath.Abs("testdata/fakebw")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	asked := 0
	b := &Bitwarden{BW: bin, AppData: dir, Env: []string{"PATH=" + os.Getenv("PATH")},
		Password: func(context.Context) ([]byte, error) { asked++; return []byte(password), nil }}
	return b, dir
}

func TestBitwardenUnlockGetLock(t *testing.T) {
	b, dir := fakeBW(t, "master-pw")
	ctx := t.Context()
	if st, _ := b.State(ctx); st != Locked {
		t.Errorf("before unlock: %s", st)
	}
	for p, want := range map[string]string{"github/password": "ghp_from_bitwarden", "github/username": "me", "github/api key": "k-123"} {
		v, err := b.Lookup(ctx, p)
		if err != nil || string(v) != want {
			t.Errorf("%s = %q, %v; want %q", p, v, err, want)
		}
	}
	if st, _ := b.State(ctx); st != Unlocked {
		t.Errorf("after unlock: %s", st)
	}
	if _, err := b.Lookup(ctx, "gitlab/password"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing item: %v", err)
	}
	if _, err := b.Lookup(ctx, "github/nofield"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing field: %v", err)
	}
	if err := b.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := b.State(ctx); st != Locked {
		t.Errorf("after Lock: %s", st)
	}
	calls, _ := os.ReadFile(filepath.Join(dir, "calls"))
	if n := strings.Count(string(calls), "unlock --raw --passwordfile /dev/fd/3"); n != 1 {
		t.Errorf("unlocked %d times, want once:\n%s", n, calls)
	}
	if !strings.Contains(string(calls), "lock\n") {
		t.Errorf("Lock did not run bw lock:\n%s", calls)
	}
}

// TestBitwardenRelocks: a session key bw no longer accepts (the vault was
// locked behind fluffy's back) is forgotten, and the next call unlocks.
func TestBitwardenRelocks(t *testing.T) {
	b, dir := fakeBW(t, "master-pw")
	ctx := t.Context()
	if _, err := b.Lookup(ctx, "github/password"); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "unlocked"))
	if _, err := b.Lookup(ctx, "github/password"); !errors.Is(err, ErrLocked) {
		t.Fatalf("locked behind its back: %v", err)
	}
	if v, err := b.Lookup(ctx, "github/password"); err != nil || string(v) != "ghp_from_bitwarden" {
		t.Errorf("after relock: %q, %v", v, err)
	}
}

func TestBitwardenErrors(t *testing.T) {
	b, _ := fakeBW(t, "wrong")
	ctx := t.Context()
	_, err := b.Lookup(ctx, "github/password")
	var bwe *BWError
	if !errors.Is(err, ErrLocked) || !errors.As(err, &bwe) || bwe.Msg != "Invalid master password." {
		t.Errorf("wrong master password: %v", err)
	}
	b.BW = filepath.Join(t.TempDir(), "no-bw")
	if _, err := b.Lookup(ctx, "github/password"); !errors.Is(err, ErrUnreachable) {
		t.Errorf("no bw: %v", err)
	}
	if st, _ := b.State(ctx); st != Unreachable {
		t.Errorf("no bw: state %s", st)
	}
	if _, err := b.Lookup(ctx, "github"); !errors.Is(err, ErrRef) {
		t.Errorf("no field: %v", err)
	}
	nopw := &Bitwarden{BW: "bw", AppData: t.TempDir()}
	if _, err := nopw.Lookup(ctx, "github/password"); !errors.Is(err, ErrLocked) {
		t.Errorf("no password source: %v", err)
	}
}

// bwVersion is the bw release scripts/deps.sh installs.
const bwVersion = "2026.9.0"

// realBW finds the bw CLI scripts/deps.sh installed (or one in PATH).
func realBW(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), ".cache")
	}
	p := filepath.Join(cache, "fluffy-test", "bw-"+bwVersion, "node_modules", ".bin", "bw")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if p, err := exec.LookPath("bw"); err == nil {
		return p
	}
	t.Skip("no bw CLI: scripts/deps.sh installs @bitwarden/cli " + bwVersion + " from npm")
	return ""
}

// TestRealBWBeforeLogin drives the real bw CLI as far as needs no server:
// a vault never logged in is locked (bw status says unauthenticated),
// and a lookup, which first unlocks through the password pipe, fails as
// locked with bw's own message.
func TestRealBWBeforeLogin(t *testing.T) {
	bin := realBW(t)
	b := &Bitwarden{BW: bin, AppData: t.TempDir(), Env: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()},
		Password: func(context.Context) ([]byte, error) { return []byte("master-pw"), nil }}
	ctx := t.Context()
	st, detail := b.State(ctx)
	if st != Locked || !strings.Contains(detail, "not logged in") {
		t.Errorf("State = %s, %q", st, detail)
	}
	_, err := b.Lookup(ctx, "github/password")
	var bwe *BWError
	if !errors.Is(err, ErrLocked) || !errors.As(err, &bwe) || bwe.Op != "unlock" || bwe.Msg != "You are not logged in." {
		t.Errorf("Lookup before login: %v", err)
	}
}

// TestRealBWAgainstStandIn drives the real bw CLI against a local
// stand-in of the server API (bwStandIn; no Bitwarden or Vaultwarden
// server runs here): the person's set-up (bw config server, bw login),
// then the backend's own path: unlock through the password pipe, get a
// password, a username and a custom field, a missing item, lock, a wrong
// master password.
func TestRealBWAgainstStandIn(t *testing.T) {
	bin := realBW(t)
	srv := newBWStandIn(t, "me@example.com", "correct horse battery", map[string]map[string]string{
		"github": {"password": "ghp_from_the_vault", "username": "me", "api key": "k-123"},
	})
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(ca, srv.caPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pwFile, []byte("correct horse battery"), 0o600); err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(dir, "bw")
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "NODE_EXTRA_CA_CERTS=" + ca}
	ctx := t.Context()
	setup := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(env, "BITWARDENCLI_APPDATA_DIR="+app, "BW_NOINTERACTION=true")
		t0 := time.Now()
		defer func() { t.Logf("bw %s: %v", args[0], time.Since(t0)) }()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("bw %s: %v\n%s", args[0], err, out)
		}
	}
	setup("config", "server", srv.srv.URL)
	setup("login", "me@example.com", "--passwordfile", pwFile)

	asked := 0
	b := &Bitwarden{BW: bin, AppData: app, Env: env,
		Password: func(context.Context) ([]byte, error) { asked++; return []byte("correct horse battery"), nil }}
	if st, detail := b.State(ctx); st != Locked || !strings.Contains(detail, srv.srv.URL) {
		t.Errorf("after login: %s, %q", st, detail)
	}
	for p, want := range map[string]string{"github/password": "ghp_from_the_vault", "github/username": "me", "github/api key": "k-123"} {
		v, err := b.Lookup(ctx, p)
		if err != nil || string(v) != want {
			t.Errorf("%s = %q, %v; want %q", p, v, err, want)
		}
	}
	if asked != 1 {
		t.Errorf("the master password was asked %d times, want once", asked)
	}
	if st, _ := b.State(ctx); st != Unlocked {
		t.Errorf("after unlock: %s", st)
	}
	if _, err := b.Lookup(ctx, "gitlab/password"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing item: %v", err)
	}
	if err := b.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := b.State(ctx); st != Locked {
		t.Errorf("after Lock: %s", st)
	}
	wrong := &Bitwarden{BW: bin, AppData: app, Env: env, Password: func(context.Context) ([]byte, error) { return []byte("wrong"), nil }}
	var bwe *BWError
	if _, err := wrong.Lookup(ctx, "github/password"); !errors.Is(err, ErrLocked) || !errors.As(err, &bwe) || bwe.Op != "unlock" {
		t.Errorf("wrong master password: %v", err)
	}
}
