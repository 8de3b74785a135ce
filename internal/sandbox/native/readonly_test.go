package native

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// TestWorkspaceReadOnly: a spec with WorkspaceReadOnly sees the
// workspace as its change set shows it (a file only the change set
// holds included), and every write to it fails with EROFS, leaving
// both the workspace and the change set as they were. Started
// directly, through the Go init, and built ahead.
func TestWorkspaceReadOnly(t *testing.T) {
	for _, mode := range []string{"direct", "go-init", "ahead"} {
		t.Run(mode, func(t *testing.T) {
			rt := newRuntime(t, Options{Init: smallInit(t), NoDirect: mode == "go-init"})
			ws := varTmp(t) // not t.TempDir: see varTmp
			if err := os.WriteFile(filepath.Join(ws, "f"), []byte("hi\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			cs := filepath.Join(varTmp(t), "upper")
			if err := os.MkdirAll(cs, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(cs, "g"), []byte("changed\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct{ script, stdout string }{
				{"cat f g", "hi\nchanged\n"},
				{"echo x > f || echo failed", "failed\n"},
				{"echo x >> g || echo failed", "failed\n"},
				{"touch new || echo failed", "failed\n"},
				{"rm g || echo failed", "failed\n"},
				{"mkdir d || echo failed", "failed\n"},
			} {
				spec := sandbox.Spec{Argv: []string{"/bin/sh", "-c", tc.script}, Env: []string{"PATH=/usr/bin:/bin"},
					Workspace: ws, ChangeSet: cs, Dir: ws, WorkspaceReadOnly: true}
				res := runInMode(t, rt, mode, spec)
				if string(res.Stdout) != tc.stdout {
					t.Errorf("%s: stdout %q, stderr %q; want %q", tc.script, res.Stdout, res.Stderr, tc.stdout)
				}
				if tc.stdout == "failed\n" && !strings.Contains(string(res.Stderr), "Read-only file system") {
					t.Errorf("%s: stderr %q, want EROFS", tc.script, res.Stderr)
				}
			}
			if b, err := os.ReadFile(filepath.Join(ws, "f")); err != nil || string(b) != "hi\n" {
				t.Errorf("the workspace changed: %q, %v", b, err)
			}
			ents, err := os.ReadDir(cs)
			if err != nil || len(ents) != 1 || ents[0].Name() != "g" {
				t.Fatalf("the change set holds %v (%v), want only g", ents, err)
			}
			if b, err := os.ReadFile(filepath.Join(cs, "g")); err != nil || string(b) != "changed\n" {
				t.Errorf("the change set's g: %q, %v", b, err)
			}
		})
	}
}

// runInMode runs spec on rt in a test's start mode: "ahead" builds its
// sandbox ahead first and checks the run took it; "direct" and
// "go-init" are the runtime's own (Options.NoDirect chooses).
func runInMode(t *testing.T, rt *Runtime, mode string, spec sandbox.Spec) sandbox.Result {
	t.Helper()
	if mode == "ahead" {
		if err := rt.PrepareNext(spec, nil); err != nil {
			t.Fatal(err)
		}
		waitAhead(t, rt)
	}
	res, err := rt.Run(context.Background(), spec)
	if err != nil {
		t.Fatalf("%v: %v", spec.Argv, err)
	}
	if mode == "ahead" {
		if used, _ := rt.AheadStats(); used == 0 {
			t.Errorf("%v: not run on the sandbox built ahead", spec.Argv)
		}
	}
	return res
}
