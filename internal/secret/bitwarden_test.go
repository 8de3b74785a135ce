package secret

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
