package userenv

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadOrCreateKey(t *testing.T) {
	p := filepath.Join(t.TempDir(), "k.key")
	k1, err := loadOrCreateKey(p)
	if err != nil || len(k1) != 32 {
		t.Fatalf("create: %d bytes, %v", len(k1), err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	k2, err := loadOrCreateKey(p)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("reload gave another key: %v", err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadOrCreateKey(p); err == nil || !strings.Contains(err.Error(), "mode 0600") {
		t.Errorf("a key readable by others was used: %v", err)
	}
	short := filepath.Join(t.TempDir(), "short.key")
	if err := os.WriteFile(short, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadOrCreateKey(short); err == nil || !strings.Contains(err.Error(), "want 32") {
		t.Errorf("a short key was used: %v", err)
	}
}
