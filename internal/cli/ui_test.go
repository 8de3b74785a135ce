package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/tui"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

func toolEvents() []kernel.Event {
	call := &llm.ToolCall{ID: "c1", Name: "fs.write", Args: json.RawMessage(`{"path":"a.go"}`)}
	return []kernel.Event{
		{Type: kernel.TypeStats, Stats: &kernel.Stats{Model: "replay//tmp/x/demo.jsonl", Turns: 2, Usage: llm.Usage{InputTokens: 12345, OutputTokens: 67}, TDD: "red", Mode: "strict"}},
		{Type: kernel.Type(agent.EventText), Agent: &agent.Event{Text: "Writing."}},
		{Type: kernel.Type(agent.EventToolCall), Agent: &agent.Event{Call: call}},
		{Type: kernel.Type(agent.EventToolResult), Agent: &agent.Event{Call: call, Result: &agent.Result{Content: "wrote a.go", Decision: "allow: rule r1"}}},
		{Type: kernel.Type(agent.EventToolResult), Agent: &agent.Event{Call: &llm.ToolCall{Name: "test.run"}, Result: &agent.Result{Content: "go: failed — 1 failed", IsError: true, Decision: "approve: rule r2 (approved by a person)"}}},
		{Type: kernel.TypeError, Fault: &kernel.Fault{Class: kernel.FaultModel, Message: "boom", Fix: "retry"}},
		{Type: kernel.TypeWarning, Text: "policy edit rejected, the previous rules stay in force: p.yaml:3:13: bad\x1b[2J"},
		{Type: kernel.TypeDone, Result: &kernel.RunResult{Reason: "done"}},
	}
}

func TestRenderer(t *testing.T) {
	cases := []struct {
		name  string
		caps  tui.Caps
		want  []string
		avoid []string
	}{
		{"plain", tui.Caps{}, []string{
			"Writing.\n→ fs.write {\"path\":\"a.go\"}\n",
			"  ✓ fs.write [allow: rule r1]: wrote a.go\n",
			"  ✗ test.run [approve: rule r2 (approved by a person)]: go: failed — 1 failed\n",
			"! model error: boom\n  fix: retry\n",
			"! warning: policy edit rejected, the previous rules stay in force: p.yaml:3:13: bad",
		}, []string{"\x1b["}},
		{"colour", tui.Caps{TTY: true, Color: true}, []string{
			"\x1b[32m✓\x1b[0m fs.write \x1b[2m[allow: rule r1]\x1b[0m",
			"\x1b[31m✗\x1b[0m test.run \x1b[33m[approve: rule r2 (approved by a person)]\x1b[0m",
			"\x1b[36m→\x1b[0m \x1b[1mfs.write\x1b[0m",
			"\x1b[33m! warning:\x1b[0m policy edit rejected",
		}, []string{"\x1b[2J"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			stats := 0
			r := &renderer{w: &out, caps: c.caps, onStats: func() { stats++ }}
			for _, e := range toolEvents() {
				r.render(e)
			}
			for _, w := range c.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%q", w, out.String())
				}
			}
			for _, a := range c.avoid {
				if strings.Contains(out.String(), a) {
					t.Errorf("output has %q:\n%q", a, out.String())
				}
			}
			if stats != 1 || r.stats.TDD != "red" || r.tests != "go: failed — 1 failed" {
				t.Errorf("kept: stats %d %+v, tests %q", stats, r.stats, r.tests)
			}
		})
	}
	var out bytes.Buffer
	r := &renderer{w: &out, asJSON: true}
	r.render(toolEvents()[1])
	if !strings.HasPrefix(out.String(), `{"session":"","seq":0,"type":"text"`) {
		t.Errorf("json: %s", out.String())
	}
}

func TestStatusText(t *testing.T) {
	cases := []struct {
		s     kernel.Stats
		extra string
		want  string
	}{
		{kernel.Stats{Model: "anthropic/claude-sonnet-4-5", Turns: 3, Usage: llm.Usage{InputTokens: 1234567, OutputTokens: 89}, Cost: 0.01234, TDD: "green", Mode: "explore"}, "s1",
			"anthropic/claude-sonnet-4-5 · turn 3 · tokens 1,234,567 in / 89 out · $0.0123 · tdd green (explore) · s1"},
		{kernel.Stats{Model: "replay//abs/path/red.jsonl"}, "", "replay/red.jsonl · turn 0 · tokens 0 in / 0 out · $0.0000"},
		{kernel.Stats{Model: "replay/demo", Usage: llm.Usage{InputTokens: 999}}, "no session yet", "replay/demo · turn 0 · tokens 999 in / 0 out · $0.0000 · no session yet"},
	}
	for _, c := range cases {
		if got := statusText(c.s, c.extra); got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
	}
}

// BenchmarkRenderEvent: one tool result line plus a status update, the
// per-event cost of the terminal UI.
func BenchmarkRenderEvent(b *testing.B) {
	evs := toolEvents()
	var out bytes.Buffer
	bar := tui.NewBar(&out, func() (int, int, error) { return 120, 40, nil })
	bar.Start()
	r := &renderer{w: bar, caps: tui.Caps{TTY: true, Color: true}}
	r.onStats = func() { bar.Set(statusText(r.stats, "s1")) }
	for b.Loop() {
		out.Reset()
		r.render(evs[3])
		r.render(evs[0])
	}
}

// TestPump: events are queued without bound while nobody reads, handed on
// in order, and the output closes after the input once drained.
func TestPump(t *testing.T) {
	in := make(chan ipc.Event)
	out := pump(in)
	const n = 2000 // far over the IPC client's buffer
	for i := range n {
		in <- ipc.Event{Topic: fmt.Sprint(i)}
	}
	close(in)
	i := 0
	for ev := range out {
		if ev.Topic != fmt.Sprint(i) {
			t.Fatalf("event %d is %q", i, ev.Topic)
		}
		i++
	}
	if i != n {
		t.Fatalf("got %d events, want %d", i, n)
	}
}

// hostileCorpus is internal/tui/termsafe's corpus of hostile text.
func hostileCorpus(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../tui/termsafe/testdata/hostile.txt")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := strconv.Unquote(line)
		if err != nil {
			t.Fatalf("hostile.txt:%d: %v", n+1, err)
		}
		out = append(out, s)
	}
	return out
}

// fluffySGR is the only sequence the renderer emits itself (Paint).
var fluffySGR = regexp.MustCompile(`\x1b\[[0-9]*m`)

// TestRendererHostile puts each hostile text in every field of every event
// the model, a tool or the kernel fills, and checks that nothing but
// fluffy's own colours reaches the output, in colour, plain and JSON.
func TestRendererHostile(t *testing.T) {
	for _, s := range hostileCorpus(t) {
		args, _ := json.Marshal(map[string]string{"path": s})
		call := &llm.ToolCall{ID: "c1", Name: "fs.read" + s, Args: args}
		events := []kernel.Event{
			{Type: kernel.Type(agent.EventText), Agent: &agent.Event{Text: s}},
			{Type: kernel.Type(agent.EventToolCall), Agent: &agent.Event{Call: call}},
			{Type: kernel.Type(agent.EventToolResult), Agent: &agent.Event{Call: call, Result: &agent.Result{Content: s, Decision: "allow: " + s}}},
			{Type: kernel.Type(agent.EventToolResult), Agent: &agent.Event{Call: &llm.ToolCall{Name: "test.run"}, Result: &agent.Result{Content: s, IsError: true}}},
			{Type: kernel.Type(agent.EventContext), Agent: &agent.Event{Text: s}},
			{Type: kernel.Type(agent.EventStop), Agent: &agent.Event{Reason: agent.Reason(s)}},
			{Type: kernel.TypeError, Fault: &kernel.Fault{Class: kernel.FaultClass(s), Message: s, Fix: s}},
			{Type: kernel.TypeApproval, Text: "Approval a1 for session s1: " + s + "\n"},
		}
		for _, caps := range []tui.Caps{{}, {TTY: true, Color: true}} {
			for _, asJSON := range []bool{false, true} {
				var out bytes.Buffer
				r := &renderer{w: &out, caps: caps, asJSON: asJSON}
				for _, e := range events {
					r.render(e)
				}
				got := fluffySGR.ReplaceAllString(out.String(), "")
				if !utf8.ValidString(got) {
					t.Fatalf("%q (colour %v, json %v): invalid UTF-8 reached the output:\n%q", s, caps.Color, asJSON, got)
				}
				for i, c := range got {
					if c == '\n' || c == '\t' && !asJSON {
						continue
					}
					if termsafe.Hidden(c) {
						t.Fatalf("%q (colour %v, json %v): %U at %d reached the output:\n%q", s, caps.Color, asJSON, c, i, got)
					}
				}
				if r.tests != "" && !termsafe.Safe(r.tests) {
					t.Fatalf("%q: the tests line %q", s, r.tests)
				}
			}
		}
	}
}
