package kernel_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/kernel"
)

// SessionChanges on a real kernel's sessions: the latest session of a
// workspace by default, partial apply, a conflict answered with the three
// versions, discard, refusals for running and closed sessions, and the
// audit entries.
func TestSessionChanges(t *testing.T) {
	ctx := context.Background()
	ws := newWorkspace(t)
	e := openEnv(t, t.TempDir(), ws)
	defer e.close()
	multi := `{"turn": {"tool_calls": [{"id": "c1", "name": "write", "args": {"path": "a.txt", "content": "a\n"}}, {"id": "c2", "name": "write", "args": {"path": "README.md", "content": "hello, world\n"}}, {"id": "c3", "name": "write", "args": {"path": "b.txt", "content": "b\n"}}]}}
{"turn": {"text": "done"}}
{"end": {}}
`
	k := start(t, e, scriptModels(multi), nil)
	old, err := k.Create(ctx, kernel.CreateParams{Workspace: ws, Task: "older", Model: "replay/x"})
	must(t, err)
	info, err := k.Create(ctx, kernel.CreateParams{Workspace: ws, Task: "t", Model: "replay/x"})
	must(t, err)
	if _, err := k.Run(ctx, info.ID, nil); err != nil {
		t.Fatal(err)
	}
	running := map[string]bool{}
	sc := kernel.SessionChanges{DB: e.db, Audit: e.audit, Reserve: func(id string) (func(), error) {
		if running[id] {
			return nil, kernel.ErrBusy
		}
		return func() {}, nil
	}}

	// The workspace's latest session is the default.
	r, err := sc.List(ctx, kernel.ChangesParams{Workspace: ws})
	must(t, err)
	if r.Session.ID != info.ID || len(r.Changes) != 3 {
		t.Fatalf("latest = %s with %d changes, want %s (older %s)", r.Session.ID, len(r.Changes), info.ID, old.ID)
	}
	d, err := sc.Diff(ctx, kernel.ChangesParams{Session: info.ID, Paths: []string{"README.md"}})
	must(t, err)
	if !strings.Contains(d.Diff, "+hello, world") || strings.Contains(d.Diff, "a.txt") {
		t.Errorf("diff = %s", d.Diff)
	}

	// A running session refuses apply and discard.
	running[info.ID] = true
	if _, err := sc.Apply(ctx, kernel.ChangesParams{Session: info.ID}); !errors.Is(err, kernel.ErrBusy) {
		t.Errorf("apply while running = %v", err)
	}
	if _, err := sc.Discard(ctx, kernel.ChangesParams{Session: info.ID}); !errors.Is(err, kernel.ErrBusy) {
		t.Errorf("discard while running = %v", err)
	}
	running[info.ID] = false

	// README changes underneath: a conflict, nothing written.
	must(t, os.WriteFile(filepath.Join(ws, "README.md"), []byte("hello\nagain\n"), 0o644))
	r, err = sc.Apply(ctx, kernel.ChangesParams{Session: info.ID})
	must(t, err)
	if len(r.Conflicts) != 1 || r.Conflicts[0].Path != "README.md" || !strings.Contains(r.Conflicts[0].Explain, "base → current") {
		t.Fatalf("conflicts = %+v", r.Conflicts)
	}
	if _, err := os.Stat(filepath.Join(ws, "a.txt")); err == nil {
		t.Fatal("a conflicting apply wrote a.txt")
	}
	// Some files only.
	r, err = sc.Apply(ctx, kernel.ChangesParams{Session: info.ID, Paths: []string{"a.txt"}})
	must(t, err)
	if len(r.Changes) != 1 || r.Changes[0].Path != "a.txt" {
		t.Fatalf("applied = %+v", r.Changes)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "a\n" {
		t.Errorf("a.txt = %q", b)
	}
	r, err = sc.Discard(ctx, kernel.ChangesParams{Session: info.ID, Paths: []string{"README.md"}})
	must(t, err)
	if len(r.Changes) != 1 {
		t.Fatalf("discarded = %+v", r.Changes)
	}
	r, err = sc.List(ctx, kernel.ChangesParams{Session: info.ID})
	must(t, err)
	if len(r.Changes) != 1 || r.Changes[0].Path != "b.txt" {
		t.Fatalf("left = %+v", r.Changes)
	}
	if _, err := sc.List(ctx, kernel.ChangesParams{Session: info.ID, Paths: []string{"../x"}}); !errors.Is(err, changeset.ErrBadPath) {
		t.Errorf("bad path = %v", err)
	}

	// A closed session's change set can be read, not applied.
	if _, err := k.Close(ctx, kernel.CloseParams{ID: info.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Apply(ctx, kernel.ChangesParams{Session: info.ID}); !errors.Is(err, kernel.ErrClosed) {
		t.Errorf("apply on a closed session = %v", err)
	}
	// The latest open session is preferred over a newer closed one.
	r, err = sc.List(ctx, kernel.ChangesParams{Workspace: ws})
	must(t, err)
	if r.Session.ID != old.ID {
		t.Errorf("latest open = %s, want %s", r.Session.ID, old.ID)
	}
	if _, err := sc.List(ctx, kernel.ChangesParams{Session: "s000000000000"}); !errors.Is(err, kernel.ErrNotFound) {
		t.Errorf("unknown session = %v", err)
	}
	if kinds := auditKinds(t, e); !strings.Contains(kinds, "changeset.apply changeset.discard") {
		t.Errorf("audit kinds = %s", kinds)
	}
}

func TestChangesResultRefused(t *testing.T) {
	if err := (kernel.ChangesResult{}).Refused(); err != nil {
		t.Fatalf("no conflicts: %v", err)
	}
	r := kernel.ChangesResult{Conflicts: []kernel.ConflictView{{Conflict: changeset.Conflict{Path: "a.txt", Reason: "content changed"}, Explain: "three versions"}}}
	var ce *changeset.ConflictError
	if err := r.Refused(); !errors.As(err, &ce) || len(ce.Conflicts) != 1 || ce.Conflicts[0].Path != "a.txt" || ce.Versions[0] != "three versions" {
		t.Fatalf("Refused = %v", err)
	}
}
