package kernel_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
)

const resumeScript = `{"turn": {"text": "one", "tool_calls": [{"id": "c1", "name": "write", "args": {"path": "a.txt", "content": "A"}}]}}
{"expect": {"id": "c1", "contains": "wrote a.txt"}}
{"turn": {"text": "two", "tool_calls": [{"id": "c2", "name": "block", "args": {"path": "b.txt", "content": "B"}}]}}
{"turn": {"text": "three: done"}}
{"end": {}}
`

// TestReplayResume: a session on a replay script, interrupted in its
// second turn, resumes on a fresh provider at the third turn — the
// script continues, it does not start over (which would write a.txt
// again and fail the run on call ids used twice).
func TestReplayResume(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	var k *kernel.Kernel
	var id string
	k = start(t, e, scriptModels(resumeScript), func() { k.Cancel(id) })
	info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "a then b", Model: "replay/x"})
	if err != nil {
		t.Fatal(err)
	}
	id = info.ID
	res, err := k.Run(ctx, id, nil)
	if err != nil || res.Fault != nil || res.Reason != "cancelled" {
		t.Fatalf("first run: %+v %v", res, err)
	}
	var texts []string
	res, err = k.Run(ctx, id, func(ev kernel.Event) {
		if ev.Agent != nil && ev.Agent.Text != "" {
			texts = append(texts, ev.Agent.Text)
		}
	})
	if err != nil || res.Fault != nil || res.Reason != "done" {
		t.Fatalf("resume: %+v %v", res, err)
	}
	if got := strings.Join(texts, ""); got != "three: done" {
		t.Errorf("resumed run said %q, want the script's third turn only", got)
	}
	if info, _ = k.Get(ctx, id); info.Turns != 3 {
		t.Errorf("turns = %d, want 3", info.Turns)
	}
}

// TestReplayResumeMismatch: a script that does not match the stored
// conversation is a model fault; the session stays resumable.
func TestReplayResumeMismatch(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	var k *kernel.Kernel
	var id string
	script := resumeScript
	k = start(t, e, func(ctx context.Context, m string) (llm.Provider, string, error) {
		return scriptModels(script)(ctx, m)
	}, func() { k.Cancel(id) })
	info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "a then b", Model: "replay/x"})
	if err != nil {
		t.Fatal(err)
	}
	id = info.ID
	if _, err := k.Run(ctx, id, nil); err != nil {
		t.Fatal(err)
	}
	script = strings.ReplaceAll(resumeScript, `"c2"`, `"x2"`)
	res, err := k.Run(ctx, id, nil)
	if err != nil || res.Fault == nil || res.Fault.Class != kernel.FaultModel || !strings.Contains(res.Fault.Message, "cannot resume") {
		t.Fatalf("mismatched resume: %+v %v", res, err)
	}
	if info, _ = k.Get(ctx, id); !info.Resumable() {
		t.Errorf("after a mismatched resume: %+v", info)
	}
}

// TestCancelDuringSetup: Ctrl-C while the session is still being set up
// (its model opened, its TDD machine loaded) stops the run as cancelled,
// not as a fault of the session: the session stays resumable.
func TestCancelDuringSetup(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	var k *kernel.Kernel
	var id string
	k = start(t, e, func(ctx context.Context, m string) (llm.Provider, string, error) {
		k.Cancel(id)
		<-ctx.Done()
		return nil, "", ctx.Err()
	}, nil)
	info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "anything", Model: "replay/x"})
	if err != nil {
		t.Fatal(err)
	}
	id = info.ID
	var evs []kernel.Event
	res, err := k.Run(ctx, id, func(ev kernel.Event) { evs = append(evs, ev) })
	if err != nil || res.Fault != nil || res.Reason != "cancelled" {
		t.Fatalf("a run cancelled during set-up: %+v %v", res, err)
	}
	endsStopDone(t, evs, "cancelled")
	if info, _ = k.Get(ctx, id); info.Status == kernel.StatusFailed {
		t.Errorf("the session was marked failed: %+v", info)
	}
}

// TestCancelBeforeRun: a run whose context ends before it begins (Ctrl-C
// while the session is being marked running) is a cancellation, not an
// error of the kernel (the terminal showed "ipc: internal: context
// canceled").
func TestCancelBeforeRun(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	k := start(t, e, func(ctx context.Context, m string) (llm.Provider, string, error) {
		t.Error("the model was opened for a run cancelled before it began")
		return nil, "", ctx.Err()
	}, nil)
	info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "anything", Model: "replay/x"})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	var evs []kernel.Event
	res, err := k.Run(cctx, info.ID, func(ev kernel.Event) { evs = append(evs, ev) })
	if err != nil || res.Fault != nil || res.Reason != "cancelled" {
		t.Fatalf("a run cancelled before it began: %+v %v", res, err)
	}
	endsStopDone(t, evs, "cancelled")
	if got, _ := k.Get(ctx, info.ID); got.Status == kernel.StatusFailed || got.Status == kernel.StatusRunning {
		t.Errorf("the session's status after the cancelled run: %+v", got)
	}
}

// endsStopDone checks that a run's events end with the agent's stop event
// (reason), then the done event: what a client shows as "stopped" and
// waits for, even for a run that never reached the agent.
func endsStopDone(t *testing.T, evs []kernel.Event, reason string) {
	t.Helper()
	n := len(evs)
	if n < 2 || evs[n-2].Type != kernel.Type(agent.EventStop) || evs[n-2].Agent == nil || string(evs[n-2].Agent.Reason) != reason || evs[n-1].Type != kernel.TypeDone {
		t.Errorf("the run's events end %s: want stop (%s), then done", typesOf(evs), reason)
	}
}

func typesOf(evs []kernel.Event) []kernel.Type {
	var ts []kernel.Type
	for _, e := range evs {
		ts = append(ts, e.Type)
	}
	return ts
}
