package wiring

import (
	"context"
	"iter"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sched"
)

func TestTurnClass(t *testing.T) {
	for _, c := range []struct {
		conv channel.Conversation
		want sched.Class
	}{
		{channel.Conversation{Channel: "terminal", Room: "main", Principal: "me"}, sched.Interactive},
		{channel.Conversation{Channel: "deploy", Principal: "hook:deploy"}, sched.Triggered},
		{channel.Conversation{Channel: "email", Principal: "a@example.org"}, sched.Triggered},
		{channel.Conversation{Channel: "cron", Room: "nightly", Principal: "cron:nightly"}, sched.Triggered},
		{channel.Conversation{Channel: "cron", Room: "heartbeat", Principal: "cron:heartbeat"}, sched.Background},
	} {
		if got := turnClass(c.conv); got != c.want {
			t.Errorf("%+v: %v, want %v", c.conv, got, c.want)
		}
	}
}

// holding is a model and a runtime that report what the scheduler shows
// running while they work.
type holding struct {
	s    *sched.Scheduler
	seen []sched.Status
	gate bool // RunGated was used
}

func (h *holding) Stream(context.Context, llm.Request) iter.Seq2[llm.Event, error] {
	return func(yield func(llm.Event, error) bool) {
		h.seen = append(h.seen, h.s.Status())
		yield(llm.Event{Type: llm.EventText, Text: "hi"}, nil)
	}
}

func (h *holding) Run(context.Context, sandbox.Spec) (sandbox.Result, error) {
	h.seen = append(h.seen, h.s.Status())
	return sandbox.Result{}, nil
}

func (h *holding) RunGated(ctx context.Context, spec sandbox.Spec, gate func() error) (sandbox.Result, error) {
	h.gate = true
	if err := gate(); err != nil {
		return sandbox.Result{}, err
	}
	return h.Run(ctx, spec)
}

func TestModelCallsAndCommandsHoldTheirSlots(t *testing.T) {
	s, err := newScheduler(config.Sched{Global: 1, ModelCalls: 1, Sandboxes: 1, Containers: 1, Memory: 1 << 30}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	h := &holding{s: s}
	ctx, release, err := admitTurn(s)(t.Context(), channel.Conversation{Channel: "cron", Room: "heartbeat"}, "sess1")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	open := scheduledModels(s, func(context.Context, string) (llm.Provider, string, error) { return h, "m", nil })
	p, _, err := open(ctx, "anthropic/claude")
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range p.Stream(ctx, llm.Request{}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	rt := scheduledRuntime(h, s, nil, "sess1", "docker")
	if _, err := rt.(sandbox.GatedRunner).RunGated(ctx, sandbox.Spec{Limits: sandbox.Limits{Memory: 2 << 30}}, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if !h.gate {
		t.Error("the runtime's RunGated was not used")
	}
	if len(h.seen) != 2 {
		t.Fatalf("seen %d", len(h.seen))
	}
	call, cmd := h.seen[0], h.seen[1]
	if call.Use["model:anthropic"] != 1 || call.Use["global"] != 1 {
		t.Errorf("during the model call: %v", call.Use)
	}
	if cmd.Use["containers"] != 1 || cmd.Use["memory"] != 1<<30 || cmd.Use["sandboxes"] != 0 {
		t.Errorf("during the command: %v", cmd.Use)
	}
	for _, r := range append(call.Running, cmd.Running...) {
		if r.Session != "sess1" || r.Class != "background" {
			t.Errorf("inner work not the turn's: %+v", r)
		}
	}
	if st := s.Status(); st.Use["model:anthropic"] != 0 || st.Use["containers"] != 0 {
		t.Errorf("slots not given back: %v", st.Use)
	}
}

// TestATurnPausesAtItsNextToolCall: an interactive turn arrives while a
// background turn holds the only slot; the background turn gives it up at
// its next tool call and resumes after the interactive one.
func TestATurnPausesAtItsNextToolCall(t *testing.T) {
	s, err := newScheduler(config.Sched{Global: 1}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	admit := admitTurn(s)
	bg, releaseBG, err := admit(t.Context(), channel.Conversation{Channel: "cron", Room: "heartbeat"}, "bg")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan func(), 1)
	go func() {
		_, release, err := admit(t.Context(), channel.Conversation{Channel: "terminal", Room: "main"}, "me")
		if err != nil {
			t.Error(err)
		}
		got <- release
	}()
	l, _ := sched.LeaseFrom(bg)
	<-l.Preempted()
	called := false
	tools := schedTools{toolsFunc(func() { called = true })}
	done := make(chan error, 1)
	go func() {
		_, err := tools.Call(bg, llm.ToolCall{Name: "fs.read"})
		done <- err
	}()
	release := <-got // the interactive turn runs while the background one waits
	select {
	case <-done:
		t.Fatal("the paused turn's tool call ran while the interactive turn held the slot")
	default:
	}
	release()
	if err := <-done; err != nil || !called {
		t.Fatalf("the resumed tool call: %v, called %v", err, called)
	}
	releaseBG()
}

type toolsFunc func()

func (f toolsFunc) Definitions() []llm.Tool { return nil }
func (f toolsFunc) Call(context.Context, llm.ToolCall) (agent.Result, error) {
	f()
	return agent.Result{}, nil
}

type expireFunc func(before time.Time) (kernel.ExpireResult, error)

func (f expireFunc) Expire(_ context.Context, before time.Time) (kernel.ExpireResult, error) {
	return f(before)
}

// The retention sweep is a background task: it waits behind a triggered
// turn, and removes what was last updated before now minus the retention.
func TestRetentionSweepIsABackgroundTask(t *testing.T) {
	s, err := newScheduler(config.Sched{Global: 1}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	_, release, err := admitTurn(s)(t.Context(), channel.Conversation{Channel: "deploy"}, "s1")
	if err != nil {
		t.Fatal(err)
	}
	var during sched.Status
	var cutoff time.Time
	done := make(chan error, 1)
	go func() {
		done <- sweepSessions(t.Context(), expireFunc(func(before time.Time) (kernel.ExpireResult, error) {
			cutoff, during = before, s.Status()
			return kernel.ExpireResult{Removed: []string{"old"}}, nil
		}), s, 72*time.Hour, func() time.Time { return now }, slog.New(slog.DiscardHandler))
	}()
	for len(s.Status().Waiting) == 0 {
		runtime.Gosched()
	}
	if w := s.Status().Waiting[0]; w.Class != "background" || w.Label != "session retention" {
		t.Fatalf("waiting: %+v", w)
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !cutoff.Equal(now.Add(-72*time.Hour)) || len(during.Running) != 1 || during.Running[0].Class != "background" {
		t.Fatalf("cutoff %v, running %+v", cutoff, during.Running)
	}
	startRetention(t.Context(), nil, s, 0, slog.New(slog.DiscardHandler))() // off: no sweep, nothing to stop
}

type resumable struct {
	holding
	resumed int
}

func (r *resumable) Resume([]llm.Message) error {
	r.resumed++
	return nil
}

// A scripted model's position survives the wrapper: the kernel resumes
// it through the provider the wiring gives it.
func TestScheduledModelKeepsResume(t *testing.T) {
	s, err := newScheduler(config.Sched{ModelCalls: 1}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	r := &resumable{holding: holding{s: s}}
	p, _, err := scheduledModels(s, func(context.Context, string) (llm.Provider, string, error) { return r, "m", nil })(t.Context(), "replay/x")
	if err != nil {
		t.Fatal(err)
	}
	res, ok := p.(interface{ Resume([]llm.Message) error })
	if !ok {
		t.Fatal("the scheduled provider hides Resume")
	}
	if err := res.Resume(nil); err != nil || r.resumed != 1 {
		t.Fatalf("resume: %v, %d", err, r.resumed)
	}
	h := &holding{s: s}
	p, _, _ = scheduledModels(s, func(context.Context, string) (llm.Provider, string, error) { return h, "m", nil })(t.Context(), "anthropic/x")
	if _, ok := p.(interface{ Resume([]llm.Message) error }); ok {
		t.Fatal("a provider without Resume gained one")
	}
}
