package secret

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestFileBackend(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "k")
	if err := os.WriteFile(p, []byte("hunter2-hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := File{}.Lookup(t.Context(), p)
	if err != nil || string(v) != "hunter2-hunter2" {
		t.Fatalf("Lookup = %q, %v", v, err)
	}
	v, err = File{Home: dir}.Lookup(t.Context(), "~/k")
	if err != nil || string(v) != "hunter2-hunter2" {
		t.Fatalf("Lookup ~/k = %q, %v", v, err)
	}
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := (File{}).Lookup(t.Context(), p); !errors.Is(err, ErrUnreachable) {
		t.Errorf("a group-readable file: %v, want ErrUnreachable", err)
	}
	if _, err := (File{}).Lookup(t.Context(), filepath.Join(dir, "none")); !errors.Is(err, ErrNotFound) {
		t.Errorf("a missing file: %v, want ErrNotFound", err)
	}
}

func TestEnvBackend(t *testing.T) {
	e := Env{LookupEnv: func(k string) (string, bool) {
		if k == "SET" {
			return "v4lue", true
		}
		if k == "EMPTY" {
			return "", true
		}
		return "", false
	}}
	if v, err := e.Lookup(t.Context(), "SET"); err != nil || string(v) != "v4lue" {
		t.Errorf("SET = %q, %v", v, err)
	}
	for _, k := range []string{"EMPTY", "UNSET"} {
		if _, err := e.Lookup(t.Context(), k); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: %v, want ErrNotFound", k, err)
		}
	}
}
