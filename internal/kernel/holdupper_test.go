package kernel_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/kernel"
)

// The kernel writes a change set (apply, close) only while it
// holds its upper directory (Options.HoldUpper: no sandbox has it
// mounted); a hold refused (another process has it) writes nothing.
func TestChangesHoldUpper(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	errInUse := errors.New("in use by another process")
	var held []string
	refuse, holding := true, false
	k, err := kernel.Start(ctx, kernel.Options{DB: e.db, Audit: e.audit, DataDir: e.dir, Models: scriptModels(writeScript),
		Tools: func(_ context.Context, env kernel.Env) (agent.Tools, error) { return &writeTools{env: env}, nil },
		HoldUpper: func(_ context.Context, upper string) (func(), error) {
			if refuse {
				return nil, errInUse
			}
			held, holding = append(held, upper), true
			return func() { holding = false }, nil
		}})
	must(t, err)
	defer k.Stop(ctx, "test")
	info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "add hello.go", Model: "replay/test"})
	must(t, err)
	if _, err := k.Run(ctx, info.ID, nil); err != nil {
		t.Fatal(err)
	}
	hello := filepath.Join(e.ws, "hello.go")
	if _, err := k.Apply(ctx, info.ID); !errors.Is(err, errInUse) {
		t.Fatalf("apply while the change set is held elsewhere: %v", err)
	}
	if _, err := k.Close(ctx, kernel.CloseParams{ID: info.ID, Apply: true}); !errors.Is(err, errInUse) {
		t.Fatalf("close while the change set is held elsewhere: %v", err)
	}
	if _, err := os.Stat(hello); err == nil {
		t.Fatal("applied while another holder had the change set")
	}
	refuse = false
	if _, err := k.Apply(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(hello); err != nil {
		t.Fatalf("not applied: %v", err)
	}
	if _, err := k.Close(ctx, kernel.CloseParams{ID: info.ID}); err != nil {
		t.Fatal(err)
	}
	if up := filepath.Join(info.ChangeSet, "upper"); len(held) != 2 || held[0] != up || held[1] != up || holding {
		t.Errorf("held %q (still holding: %v), want %q for the apply and the close", held, holding, up)
	}
}
