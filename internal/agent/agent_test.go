package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/llm/llmtest"
	"github.com/fluffy-agent/fluffy/internal/llm/replay"
)

func script(t testing.TB, name string) *replay.Provider {
	t.Helper()
	s, err := replay.Load(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return replay.New(s)
}

// recorder is a Provider decorator that keeps the requests it passes on.
type recorder struct {
	p    llm.Provider
	mu   sync.Mutex
	reqs []llm.Request
}

func (r *recorder) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Event, error] {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return r.p.Stream(ctx, req)
}

func newAgent(t testing.TB, o agent.Options) *agent.Agent {
	t.Helper()
	if o.Model == "" {
		o.Model = "test"
	}
	a, err := agent.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestEditSession(t *testing.T) {
	ws := newWorkspace(map[string]string{"README.md": "# fluffy\n"})
	var events []agent.Event
	p := script(t, "edit.jsonl")
	a := newAgent(t, agent.Options{Provider: p, Tools: ws, System: "sys",
		Price:   llm.Price{Input: 3, Output: 15},
		OnEvent: func(ev agent.Event) { events = append(events, ev) }})
	s := agent.NewSession("write my todo notes")
	out, err := a.Run(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if out.Reason != agent.ReasonDone || out.Text != "Done: notes/todo.txt written." {
		t.Fatalf("outcome = %+v", out)
	}
	if ws.files["notes/todo.txt"] != "héllo\n" {
		t.Errorf("file not written: %q", ws.files["notes/todo.txt"])
	}
	if p.Remaining() != 0 || s.Turns != 4 || s.Usage.Total() == 0 || s.Cost <= 0 {
		t.Errorf("remaining %d, turns %d, usage %+v, cost %v", p.Remaining(), s.Turns, s.Usage, s.Cost)
	}
	// The transcript is a golden file: roles alternate, every call has
	// its result, in order.
	data, _ := json.MarshalIndent(s.Messages, "", "  ")
	llmtest.Golden(t, "edit.transcript.golden.json", append(data, '\n'))
	var kinds []string
	for _, ev := range events {
		if ev.Type != agent.EventText {
			kinds = append(kinds, string(ev.Type))
		}
	}
	llmtest.Golden(t, "edit.events.golden.txt", []byte(strings.Join(kinds, "\n")+"\n"))
	var decisions []string
	for _, ev := range events {
		if ev.Type == agent.EventToolResult {
			decisions = append(decisions, ev.Result.Decision)
		}
	}
	if got := strings.Join(decisions, ","); got != "allow,allow,allow,block: outside workspace,decode: refused" {
		t.Errorf("gate decisions in events = %s", got)
	}
	// Resuming a finished session does not call the model again (the
	// script has ended: a call would fail).
	if again, err := a.Run(t.Context(), s); err != nil || again.Reason != agent.ReasonDone || again.Text != out.Text {
		t.Errorf("resuming a finished session: %+v, %v", again, err)
	}
}

func TestLimits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits agent.Limits
		price  llm.Price
		want   agent.Reason
		turns  int
	}{
		{"turns", agent.Limits{MaxTurns: 3}, llm.Price{}, agent.ReasonMaxTurns, 3},
		{"tokens", agent.Limits{MaxTokens: 1500}, llm.Price{}, agent.ReasonMaxTokens, 0},
		{"cost", agent.Limits{MaxCost: 0.01}, llm.Price{Input: 1000}, agent.ReasonMaxCost, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAgent(t, agent.Options{Provider: script(t, "loop.jsonl"), Tools: newWorkspace(nil), Limits: tc.limits, Price: tc.price})
			s := agent.NewSession("loop")
			out, err := a.Run(t.Context(), s)
			if err != nil {
				t.Fatal(err)
			}
			if out.Reason != tc.want || (tc.turns > 0 && s.Turns != tc.turns) {
				t.Fatalf("reason %s after %d turns, want %s", out.Reason, s.Turns, tc.want)
			}
			if s.Turns == 0 || s.Turns >= 40 {
				t.Errorf("turns = %d", s.Turns)
			}
			// Resuming continues the budget, so it stops at once.
			out, err = a.Run(t.Context(), s)
			if err != nil || out.Reason != tc.want {
				t.Errorf("resumed: %v, %v", out, err)
			}
		})
	}
}

// What a session handed to its sub-agents counts against its limits, and
// is asked again before every model call (a spawn during the run shrinks
// what is left at once).
func TestHandedBudget(t *testing.T) {
	handed := agent.Handed{}
	a := newAgent(t, agent.Options{Provider: script(t, "loop.jsonl"), Tools: newWorkspace(nil), Limits: agent.Limits{MaxTurns: 6},
		Handed: func() agent.Handed { return handed },
		OnEvent: func(ev agent.Event) {
			if ev.Type == agent.EventTurnEnd && ev.Turn == 1 {
				handed.Turns = 4 // a child was given 4 turns during turn 1
			}
		}})
	s := agent.NewSession("loop")
	out, err := a.Run(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if out.Reason != agent.ReasonMaxTurns || s.Turns != 2 {
		t.Fatalf("reason %s after %d turns, want max_turns after 2 (6 less 4 handed on)", out.Reason, s.Turns)
	}
}

func TestMaxTime(t *testing.T) {
	ws := newWorkspace(nil)
	a := newAgent(t, agent.Options{Provider: script(t, "wait.jsonl"), Tools: ws, Limits: agent.Limits{MaxTime: 50 * time.Millisecond}})
	s := agent.NewSession("wait")
	out, err := a.Run(t.Context(), s)
	if err != nil || out.Reason != agent.ReasonMaxTime {
		t.Fatalf("outcome %+v, err %v", out, err)
	}
	if got := s.Messages[len(s.Messages)-1].Content[0].Text; !strings.Contains(got, "time limit") {
		t.Errorf("the model is told %q", got)
	}
}

// TestCancelAndResume interrupts a tool mid-call (Ctrl-C), then resumes:
// the session stayed consistent and the script, which checks that every
// call got a result, carries on.
func TestCancelAndResume(t *testing.T) {
	ws := newWorkspace(nil)
	p := script(t, "wait.jsonl")
	ctx, cancel := context.WithCancel(t.Context())
	a := newAgent(t, agent.Options{Provider: p, Tools: ws, OnEvent: func(ev agent.Event) {
		if ev.Type == agent.EventToolCall && ev.Call.Name == "wait" {
			go func() { time.Sleep(10 * time.Millisecond); cancel() }()
		}
	}})
	s := agent.NewSession("wait for me")
	out, err := a.Run(ctx, s)
	if err != nil || out.Reason != agent.ReasonCancelled {
		t.Fatalf("outcome %+v, err %v", out, err)
	}
	if len(ws.calls) != 1 {
		t.Errorf("tools called after the interruption: %v", ws.calls)
	}
	last := s.Messages[len(s.Messages)-1]
	if last.Role != llm.RoleUser || len(last.Content) != 2 {
		t.Fatalf("session not consistent: last message %+v", last)
	}
	out, err = a.Run(t.Context(), s)
	if err != nil || out.Reason != agent.ReasonDone || out.Text != "Resumed after the interruption." {
		t.Fatalf("resume: %+v, %v", out, err)
	}
}

func TestCancelDuringModelCall(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	p := script(t, "edit.jsonl")
	a := newAgent(t, agent.Options{Provider: p, Tools: newWorkspace(map[string]string{"README.md": "fluffy"}), OnEvent: func(ev agent.Event) {
		if ev.Type == agent.EventText {
			cancel()
		}
	}})
	s := agent.NewSession("x")
	out, err := a.Run(ctx, s)
	if err != nil || out.Reason != agent.ReasonCancelled {
		t.Fatalf("outcome %+v, err %v", out, err)
	}
	if len(s.Messages) != 1 {
		t.Errorf("a half-received turn was kept: %d messages", len(s.Messages))
	}
}

// TestRuntimeFailureFailsClosed: when the router cannot process a call
// (audit down), the loop stops with ErrRuntime; the rest of the turn's
// calls are not run, and the session stays consistent.
func TestRuntimeFailureFailsClosed(t *testing.T) {
	ws := newWorkspace(map[string]string{"README.md": "fluffy"})
	ws.broken = true
	a := newAgent(t, agent.Options{Provider: script(t, "wait.jsonl"), Tools: ws})
	s := agent.NewSession("x")
	_, err := a.Run(t.Context(), s)
	if !errors.Is(err, agent.ErrRuntime) || !strings.Contains(err.Error(), "audit log unavailable") {
		t.Fatalf("err = %v, want ErrRuntime", err)
	}
	if len(ws.calls) != 1 {
		t.Errorf("calls after the failure: %v", ws.calls)
	}
	last := s.Messages[len(s.Messages)-1]
	if len(last.Content) != 2 || !last.Content[1].IsError {
		t.Errorf("session not consistent: %+v", last)
	}
}

func TestModelErrorIsReturned(t *testing.T) {
	p := script(t, "edit.jsonl")
	a := newAgent(t, agent.Options{Provider: p, Tools: newWorkspace(map[string]string{"README.md": "not what the script expects"})})
	_, err := a.Run(t.Context(), agent.NewSession("x"))
	var ee *replay.ExpectationError
	if !errors.As(err, &ee) || ee.ID != "t2" {
		t.Fatalf("err = %v, want the replay expectation on t2 to fail loudly", err)
	}
}

func TestContextWindow(t *testing.T) {
	files := map[string]string{}
	for i := 1; i <= 8; i++ {
		files["big"+string(rune('0'+i))+".txt"] = strings.Repeat("fluffy data ", 2000)
	}
	rec := &recorder{p: script(t, "window.jsonl")}
	sum := script(t, "summary.jsonl")
	var ctxEvents int
	a := newAgent(t, agent.Options{Provider: rec, Summarizer: sum, Tools: newWorkspace(files), System: "sys",
		Limits: agent.Limits{ContextTokens: 4000, ToolResultBytes: 3000},
		OnEvent: func(ev agent.Event) {
			if ev.Type == agent.EventContext {
				ctxEvents++
			}
		}})
	s := agent.NewSession("read all the big files")
	out, err := a.Run(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if out.Text != "All parts read." || ctxEvents == 0 || s.Summarized == 0 {
		t.Fatalf("outcome %+v, %d context events, summarized %d", out, ctxEvents, s.Summarized)
	}
	last := rec.reqs[len(rec.reqs)-1]
	if len(last.Messages) >= len(s.Messages) {
		t.Errorf("the last request sent all %d messages", len(last.Messages))
	}
	if !strings.HasPrefix(last.Messages[0].Content[0].Text, "read all the big files") || !strings.Contains(last.Messages[0].Text(), "Read big1") {
		t.Errorf("task or summary missing from the first message: %q", last.Messages[0].Text())
	}
	if last.System != "sys" || last.Messages[1].Role != llm.RoleAssistant {
		t.Errorf("system prompt dropped or window cut badly")
	}
	for _, req := range rec.reqs {
		if n := llm.EstimateRequest(req); n > 4000+1024 {
			t.Errorf("a request of about %d tokens exceeds the budget", n)
		}
	}
	// The full transcript is kept in the session.
	if len(s.Messages) != 1+2*8+1 {
		t.Errorf("session holds %d messages", len(s.Messages))
	}
}

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		in      string
		limit   int
		omitted int
	}{
		{"short", 10, 0},
		{strings.Repeat("a", 100), 30, 70},
		{strings.Repeat("é", 50), 31, 70}, // cuts on rune boundaries
	} {
		got, n := agent.Truncate(tc.in, tc.limit)
		if n != tc.omitted {
			t.Errorf("Truncate(%d bytes, %d) omitted %d, want %d", len(tc.in), tc.limit, n, tc.omitted)
		}
		if n > 0 && (!strings.Contains(got, "fluffy truncated") || !strings.HasPrefix(got, tc.in[:4])) {
			t.Errorf("Truncate result %q", got)
		}
		if !utf8Valid(got) {
			t.Errorf("Truncate broke UTF-8: %q", got)
		}
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

func TestSystemPrompt(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "AGENTS.md"), []byte("Use tabs.\n"), 0o644)
	outside := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(outside, []byte("TOP SECRET"), 0o644)
	os.Symlink(outside, filepath.Join(dir, "CLAUDE.md"))
	_, err := agent.SystemPrompt(agent.PromptOptions{Instructions: "You are fluffy.", ProjectDir: dir})
	if err == nil {
		t.Fatal("a CLAUDE.md symlink leaving the project was followed")
	}
	os.Remove(filepath.Join(dir, "CLAUDE.md"))
	os.WriteFile(filepath.Join(dir, "CLAUDE.md"), []byte(strings.Repeat("x", 100<<10)), 0o644)
	got, err := agent.SystemPrompt(agent.PromptOptions{Instructions: "You are fluffy.", ProjectDir: dir, TDDState: "red",
		Tools: newWorkspace(nil).Definitions()})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"You are fluffy.", "read_file, write_file", `state "red"`, "(AGENTS.md)\n\nUse tabs.", "(CLAUDE.md)", "fluffy truncated"} {
		if !strings.Contains(got, want) {
			t.Errorf("system prompt lacks %q", want)
		}
	}
	if len(got) > 70<<10 {
		t.Errorf("system prompt is %d bytes: project files not capped", len(got))
	}
}

func TestNewRequires(t *testing.T) {
	if _, err := agent.New(agent.Options{}); err == nil {
		t.Error("New without provider or tools succeeded")
	}
}
