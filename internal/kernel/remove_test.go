package kernel_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/kernel"
)

// Remove: an open session needs Force (its
// change set is discarded), a closed one goes; its rows and change set
// directory are gone, the audit log records the removal and still
// verifies.
func TestRemove(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	k := start(t, e, scriptModels(writeScript), nil)

	info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "add hello.go", Model: "replay/test"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := k.Run(ctx, info.ID, nil); err != nil || res.Reason != "done" {
		t.Fatalf("run: %+v %v", res, err)
	}
	if _, ch, err := k.Diff(ctx, info.ID); err != nil || len(ch) == 0 {
		t.Fatalf("the run left no pending change: %v %v", ch, err)
	}

	if _, err := k.Remove(ctx, kernel.RemoveParams{ID: info.ID}); !errors.Is(err, kernel.ErrOpen) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("rm of an open session = %v, want ErrOpen naming --force", err)
	}
	if _, err := os.Stat(info.ChangeSet); err != nil {
		t.Fatalf("a refused rm touched the change set: %v", err)
	}
	res, err := k.Remove(ctx, kernel.RemoveParams{ID: info.ID, Force: true})
	if err != nil || !res.Discarded {
		t.Fatalf("rm --force: %+v %v", res, err)
	}
	if _, err := k.Get(ctx, info.ID); !errors.Is(err, kernel.ErrNotFound) {
		t.Errorf("Get after rm = %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(info.ChangeSet); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("change set directory left: %v", err)
	}
	if _, err := os.Stat(e.ws + "/hello.go"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rm --force applied the change set: %v", err)
	}
	var n int
	if err := e.db.QueryRowContext(ctx, `SELECT count(*) FROM tdd_transitions WHERE session_id = ?`, info.ID).Scan(&n); err != nil || n != 0 {
		t.Errorf("tdd transitions left: %d %v", n, err)
	}
	if _, err := k.Remove(ctx, kernel.RemoveParams{ID: info.ID}); !errors.Is(err, kernel.ErrNotFound) {
		t.Errorf("second rm = %v, want ErrNotFound", err)
	}

	// A closed session needs no force.
	info2, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "again", Model: "replay/test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Close(ctx, kernel.CloseParams{ID: info2.ID}); err != nil {
		t.Fatal(err)
	}
	if res, err := k.Remove(ctx, kernel.RemoveParams{ID: info2.ID}); err != nil || res.Discarded {
		t.Fatalf("rm of a closed session: %+v %v", res, err)
	}
	if got := auditKinds(t, e); strings.Count(got, "session.rm") != 2 {
		t.Errorf("audit kinds %s: want two session.rm", got)
	}
}
