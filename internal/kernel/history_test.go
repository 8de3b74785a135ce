package kernel_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
)

// TestMessagesBeforeFirstEvent: what the web console's history rests
// on. When a run's first event is delivered, the stored conversation is
// still what earlier runs left (the run saves only after it), and the
// run only appends to it.
func TestMessagesBeforeFirstEvent(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	k := start(t, e, scriptModels(writeScript), nil)
	info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "add hello.go", Model: "replay/test"})
	if err != nil {
		t.Fatal(err)
	}
	before, err := k.Messages(ctx, info.ID)
	if err != nil || len(before) != 1 || before[0].Text() != "add hello.go" {
		t.Fatalf("before the run: %+v, %v", before, err)
	}
	var once sync.Once
	var atFirst []llm.Message
	var firstErr error
	if _, err := k.Run(ctx, info.ID, func(kernel.Event) {
		once.Do(func() { atFirst, firstErr = k.Messages(ctx, info.ID) })
	}); err != nil {
		t.Fatal(err)
	}
	if firstErr != nil || len(atFirst) != len(before) {
		t.Errorf("at the run's first event %d messages are stored (%v), want the %d from before it", len(atFirst), firstErr, len(before))
	}
	after, err := k.Messages(ctx, info.ID)
	if err != nil || len(after) <= len(before) || after[0].Text() != before[0].Text() {
		t.Errorf("after the run: %d messages, %v", len(after), err)
	}
	if _, err := k.Messages(ctx, "s-none"); !errors.Is(err, kernel.ErrNotFound) {
		t.Errorf("an unknown session: %v", err)
	}
}
