package kernel_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
)

// stuckTools has one tool, "stuck", deaf to its context as a tool blocked
// in a system call is: it waits for release.
type stuckTools struct {
	ready   chan<- struct{}
	release <-chan struct{}
}

func (s *stuckTools) Definitions() []llm.Tool { return []llm.Tool{{Name: "stuck"}} }

func (s *stuckTools) Call(context.Context, llm.ToolCall) (agent.Result, error) {
	s.ready <- struct{}{}
	<-s.release
	return agent.Result{Content: "released"}, nil
}

// Stop does not wait for ever for a run whose tool ignores cancellation:
// it returns by its deadline, records kernel.stop naming the abandoned
// session, and leaves the session "running" in the database for the
// next kernel to mark interrupted and resumable.
func TestStopAbandonsStuckRun(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	ready, release := make(chan struct{}, 1), make(chan struct{})
	k, err := kernel.Start(ctx, kernel.Options{DB: e.db, Audit: e.audit, DataDir: e.dir,
		Models: scriptModels(`{"turn": {"text": "reading", "tool_calls": [{"id": "c1", "name": "stuck", "args": {}}]}}` + "\n"),
		Tools: func(context.Context, kernel.Env) (agent.Tools, error) {
			return &stuckTools{ready: ready, release: release}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "read", Model: "replay/test"})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_, _ = k.Run(ctx, info.ID, nil)
	}()
	<-ready
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := k.Stop(sctx, "test"); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	if got, _ := k.Get(ctx, info.ID); got.Status != kernel.StatusRunning {
		t.Errorf("status after an abandoned run = %q, want running (the next kernel marks it interrupted)", got.Status)
	}
	if err := e.audit.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var stop string
	if err := e.audit.Reader().Entries(ctx, audit.Filter{Kind: audit.KindKernelStop}, func(en audit.Entry) error {
		b, _ := json.Marshal(en.Payload)
		stop = string(b)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stop, `"abandoned":["`+info.ID+`"]`) {
		t.Errorf("kernel.stop = %s, want it to name %s as abandoned", stop, info.ID)
	}
	close(release)
	<-ran
}
