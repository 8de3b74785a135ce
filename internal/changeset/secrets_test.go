package changeset

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretMarks: a file marked as holding a secret's value is named in
// the diff without its content, and Apply writes it only when it is
// named (then it applies as any file).
func TestSecretMarks(t *testing.T) {
	cs := begin(t, tree{"a.txt": "file 0644 alpha\n"})
	for name, body := range map[string]string{"leak.txt": "tok-0123456789abcdef\n", "ok.txt": "fine\n"} {
		if err := os.WriteFile(filepath.Join(cs.UpperDir(), name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := cs.MarkSecrets([]string{"leak.txt"}); err != nil {
		t.Fatal(err)
	}
	d, err := cs.Diff(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(d, "tok-0123456789abcdef") || !strings.Contains(d, "b/leak.txt holds the value of a secret") || !strings.Contains(d, "+fine") {
		t.Errorf("diff:\n%s", d)
	}
	_, err = cs.Apply(t.Context())
	var se *SensitiveError
	if !errors.As(err, &se) || len(se.Paths) != 1 || se.Paths[0] != "leak.txt" || !strings.Contains(se.Reasons[0], "secret") {
		t.Fatalf("apply of everything: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cs.Workspace(), "ok.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Error("a refused apply wrote something")
	}
	if _, err := cs.Apply(t.Context(), "ok.txt"); err != nil {
		t.Fatalf("apply of an unmarked file: %v", err)
	}
	if _, err := cs.Apply(t.Context(), "leak.txt"); err != nil {
		t.Fatalf("apply of the marked file, named: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(cs.Workspace(), "leak.txt")); string(b) != "tok-0123456789abcdef\n" {
		t.Errorf("applied %q", b)
	}
}

// TestSecretMarksUnreadable: marks that cannot be read fail closed: every
// changed file needs naming.
func TestSecretMarksUnreadable(t *testing.T) {
	cs := begin(t, tree{"a.txt": "file 0644 alpha\n"})
	if err := os.WriteFile(filepath.Join(cs.UpperDir(), "ok.txt"), []byte("fine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cs.dir, secretsFile), []byte("not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Apply(t.Context()); !errors.Is(err, ErrSensitive) {
		t.Errorf("apply with unreadable marks: %v", err)
	}
}
