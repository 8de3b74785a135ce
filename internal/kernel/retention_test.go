package kernel_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/kernel"
)

// Expire removes the sessions not updated within the retention: closed
// ones, and open ones with nothing to review; a session with changes
// nobody reviewed stays, and so does a recent one. The audit log keeps
// their entries and records each removal.
func TestExpire(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	k := start(t, e, scriptModels(writeScript), nil)
	create := func(task string) kernel.Info {
		info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: task, Model: "replay/test"})
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	closed, idle, pending, recent := create("closed"), create("idle"), create("pending"), create("recent")
	if _, err := k.Close(ctx, kernel.CloseParams{ID: closed.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Run(ctx, pending.ID, nil); err != nil {
		t.Fatal(err)
	}
	long := time.Now().Add(-48 * time.Hour).UnixNano()
	for _, id := range []string{closed.ID, idle.ID, pending.ID} {
		if _, err := e.db.ExecContext(ctx, `UPDATE sessions SET updated_at = ? WHERE id = ?`, long, id); err != nil {
			t.Fatal(err)
		}
	}
	before := auditKinds(t, e)
	res, err := k.Expire(ctx, time.Now().Add(-24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(res.Removed)
	want := []string{closed.ID, idle.ID}
	slices.Sort(want)
	if !slices.Equal(res.Removed, want) || !slices.Equal(res.Kept, []string{pending.ID}) {
		t.Fatalf("removed %v kept %v; want removed %v kept %v", res.Removed, res.Kept, want, pending.ID)
	}
	for _, id := range want {
		if _, err := k.Get(ctx, id); !errors.Is(err, kernel.ErrNotFound) {
			t.Errorf("%s: %v after expiry", id, err)
		}
	}
	if _, err := os.Stat(idle.ChangeSet); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the change set of an expired session is left: %v", err)
	}
	for _, id := range []string{pending.ID, recent.ID} {
		if _, err := k.Get(ctx, id); err != nil {
			t.Errorf("%s was removed: %v", id, err)
		}
	}
	after := auditKinds(t, e)
	if !strings.HasPrefix(after, before) || strings.Count(after, "session.rm") != 2 {
		t.Errorf("audit before %s\nafter %s: want the old entries kept and two session.rm", before, after)
	}
}
