package kernel_test

import (
	"context"
	"errors"
	"iter"
	"strings"
	"sync"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
)

// systemModel records each request's system prompt and answers "ok".
type systemModel struct {
	mu      sync.Mutex
	systems []string
}

func (m *systemModel) Stream(_ context.Context, req llm.Request) iter.Seq2[llm.Event, error] {
	m.mu.Lock()
	m.systems = append(m.systems, req.System)
	m.mu.Unlock()
	return func(yield func(llm.Event, error) bool) {
		for _, ev := range []llm.Event{{Type: llm.EventText, Text: "ok"}, {Type: llm.EventStop, Stop: llm.StopEnd}} {
			if !yield(ev, nil) {
				return
			}
		}
	}
}

func (m *systemModel) last() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.systems[len(m.systems)-1]
}

// TestAssistantSessionPrompt: an assistant session's system prompt is the
// Assistant hook's, read again at every run (an edit of the workspace
// counts from the next turn); a coding session keeps Instructions; a hook
// that fails is the run's fault, not a prompt without the persona.
func TestAssistantSessionPrompt(t *testing.T) {
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	m := &systemModel{}
	persona := "persona one"
	var fail error
	var mu sync.Mutex
	k, err := kernel.Start(context.Background(), kernel.Options{DB: e.db, Audit: e.audit, DataDir: e.dir,
		Models:       func(context.Context, string) (llm.Provider, string, error) { return m, "x", nil },
		Tools:        func(_ context.Context, env kernel.Env) (agent.Tools, error) { return &writeTools{env: env}, nil },
		Instructions: "coding instructions",
		Assistant: func(ws string) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			if ws != e.ws {
				t.Errorf("hook got workspace %q, want %q", ws, e.ws)
			}
			return "assistant instructions\n" + persona, fail
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "hi", Model: "x/y", Kind: kernel.KindAssistant})
	if err != nil {
		t.Fatal(err)
	}
	if a.Kind != kernel.KindAssistant {
		t.Errorf("Info.Kind = %q", a.Kind)
	}
	if _, err := k.Run(ctx, a.ID, nil); err != nil {
		t.Fatal(err)
	}
	if s := m.last(); !strings.Contains(s, "persona one") || strings.Contains(s, "coding instructions") {
		t.Errorf("assistant system prompt:\n%s", s)
	}
	mu.Lock()
	persona = "persona two"
	mu.Unlock()
	if _, err := k.RunMessage(ctx, a.ID, "again", nil); err != nil {
		t.Fatal(err)
	}
	if s := m.last(); !strings.Contains(s, "persona two") {
		t.Errorf("the workspace was not read again at the next run:\n%s", s)
	}

	c, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "code", Model: "x/y"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Kind != kernel.KindCoding {
		t.Errorf("default kind %q", c.Kind)
	}
	if _, err := k.Run(ctx, c.ID, nil); err != nil {
		t.Fatal(err)
	}
	if s := m.last(); !strings.Contains(s, "coding instructions") || strings.Contains(s, "persona") {
		t.Errorf("coding system prompt:\n%s", s)
	}

	mu.Lock()
	fail = errors.New("SOUL.md is a FIFO")
	mu.Unlock()
	n := len(m.systems)
	res, err := k.RunMessage(ctx, a.ID, "third", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Fault == nil || !strings.Contains(res.Fault.Message, "SOUL.md is a FIFO") {
		t.Errorf("a failing workspace gave %+v", res)
	}
	if len(m.systems) != n {
		t.Error("the model was asked without the assistant's prompt")
	}
}

// TestRunLimitsTightenOneRun: a run's own budget (a scheduled job's
// max_turns) stops it before the kernel's limit would, and the next run
// without one is bound by the kernel's limit only.
func TestRunLimitsTightenOneRun(t *testing.T) {
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	k := start(t, e, scriptModels(writeScript), nil)
	ctx := context.Background()
	info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "write", Model: "replay/x"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := k.Run(kernel.WithRunLimits(ctx, kernel.RunLimits{MaxTurns: 1}), info.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != string(agent.ReasonMaxTurns) {
		t.Fatalf("a run with max_turns 1 over a two-turn script ended %q, want %q", res.Reason, agent.ReasonMaxTurns)
	}
	res, err = k.Run(ctx, info.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason == string(agent.ReasonMaxTurns) {
		t.Fatalf("the budget outlived its run: %+v", res)
	}
}
