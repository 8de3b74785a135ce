package secret

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"filippo.io/age"
)

func TestAgeIdentity(t *testing.T) {
	dir := t.TempDir()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	idFile := filepath.Join(dir, "identity.txt")
	if err := os.WriteFile(idFile, []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := &Age{Store: filepath.Join(dir, "store.age"), Identity: idFile}
	ctx := t.Context()
	if _, err := a.Lookup(ctx, "github"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("empty store: %v, want ErrNotFound", err)
	}
	if err := a.Set(ctx, "github", []byte("ghp_one")); err != nil {
		t.Fatal(err)
	}
	if err := a.Set(ctx, "mail", []byte("pw with spaces\nand a newline")); err != nil {
		t.Fatal(err)
	}
	if err := a.Set(ctx, "github", []byte("ghp_two")); err != nil {
		t.Fatal(err)
	}
	if v, err := a.Lookup(ctx, "github"); err != nil || string(v) != "ghp_two" {
		t.Errorf("github = %q, %v", v, err)
	}
	if v, err := a.Lookup(ctx, "mail"); err != nil || string(v) != "pw with spaces\nand a newline" {
		t.Errorf("mail = %q, %v", v, err)
	}
	names, err := a.Names(ctx)
	if err != nil || !slices.Equal(names, []string{"github", "mail"}) {
		t.Errorf("Names = %v, %v", names, err)
	}
	fi, err := os.Stat(a.Store)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("store mode: %v, %v", fi.Mode(), err)
	}
	raw, _ := os.ReadFile(a.Store)
	if bytes.Contains(raw, []byte("ghp_two")) {
		t.Error("the store holds the value in clear")
	}
	if err := a.Set(ctx, "bad name", []byte("x")); !errors.Is(err, ErrAgeName) {
		t.Errorf("bad name: %v", err)
	}
	if st, _ := a.State(ctx); st != Unlocked {
		t.Errorf("State = %s", st)
	}
	// Deleting every entry leaves an empty store, not a broken one.
	for _, n := range names {
		if err := a.Set(ctx, n, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Lookup(ctx, "github"); !errors.Is(err, ErrNotFound) {
		t.Errorf("after deleting every entry: %v, want ErrNotFound", err)
	}
}

func TestAgePassphrase(t *testing.T) {
	dir := t.TempDir()
	asked := 0
	pass := "correct horse"
	a := &Age{Store: filepath.Join(dir, "store.age"), Passphrase: func(context.Context) ([]byte, error) {
		asked++
		return []byte(pass), nil
	}}
	ctx := t.Context()
	if st, _ := a.State(ctx); st != Locked {
		t.Errorf("before the passphrase: %s, want locked", st)
	}
	if err := a.Set(ctx, "k", []byte("v4lue")); err != nil {
		t.Fatal(err)
	}
	if v, err := a.Lookup(ctx, "k"); err != nil || string(v) != "v4lue" {
		t.Fatalf("k = %q, %v", v, err)
	}
	if asked != 1 {
		t.Errorf("asked %d times, want once (held until Lock)", asked)
	}
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := a.State(ctx); st != Locked {
		t.Errorf("after Lock: %s, want locked", st)
	}
	pass = "wrong"
	if _, err := a.Lookup(ctx, "k"); !errors.Is(err, ErrLocked) {
		t.Errorf("a wrong passphrase: %v, want ErrLocked", err)
	}
	if st, _ := a.State(ctx); st != Locked {
		t.Errorf("a wrong passphrase is kept: %s", st)
	}
	noPrompt := &Age{Store: a.Store}
	if _, err := noPrompt.Lookup(ctx, "k"); !errors.Is(err, ErrLocked) {
		t.Errorf("no passphrase source: %v, want ErrLocked", err)
	}
}
