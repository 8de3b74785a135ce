package replay_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/llm/llmtest"
	"github.com/fluffy-agent/fluffy/internal/llm/replay"
)

func load(t *testing.T, name string) *replay.Provider {
	t.Helper()
	s, err := replay.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	return replay.New(s)
}

func results(blocks ...llm.Block) llm.Request {
	return llm.Request{Messages: []llm.Message{
		{Role: llm.RoleUser, Content: []llm.Block{llm.Text("task")}},
		{Role: llm.RoleAssistant, Content: []llm.Block{llm.Text("...")}},
		{Role: llm.RoleUser, Content: blocks},
	}}
}

func TestPlay(t *testing.T) {
	p := load(t, "testdata/basic.jsonl")
	var evs []llm.Event
	resp, err := llm.Collect(p.Stream(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{llm.Text("go")}}}}), func(ev llm.Event) { evs = append(evs, ev) })
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, ev := range evs {
		line, _ := json.Marshal(ev)
		buf.Write(append(line, '\n'))
	}
	llmtest.Golden(t, "basic.golden.jsonl", buf.Bytes())
	calls := resp.Message.ToolCalls()
	if len(calls) != 2 || calls[1].ID != "b" || resp.Stop != llm.StopToolUse {
		t.Fatalf("calls = %+v, stop %q", calls, resp.Stop)
	}
	resp, err = llm.Collect(p.Stream(t.Context(), results(
		llm.ToolResult("a", "read_file", "module x", false),
		llm.ToolResult("b", "read_file", "no such file", true))), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Text() != "Done." || resp.Stop != llm.StopEnd {
		t.Errorf("second turn = %q / %q", resp.Message.Text(), resp.Stop)
	}
	if _, err := llm.Collect(p.Stream(t.Context(), results()), nil); !errors.Is(err, replay.ErrScriptEnded) {
		t.Errorf("after end: err = %v, want ErrScriptEnded", err)
	}
}

func TestExpectations(t *testing.T) {
	for _, tc := range []struct {
		name    string
		results []llm.Block
		want    string // in the error; "" for success
	}{
		{"all match", []llm.Block{llm.ToolResult("a", "read_file", "module x", false), llm.ToolResult("b", "read_file", "denied", true)}, ""},
		{"missing result", []llm.Block{llm.ToolResult("a", "read_file", "module x", false)}, "b: no result"},
		{"content mismatch", []llm.Block{llm.ToolResult("a", "read_file", "package x", false), llm.ToolResult("b", "", "", true)}, `does not contain "module"`},
		{"error flag mismatch", []llm.Block{llm.ToolResult("a", "read_file", "module x", false), llm.ToolResult("b", "", "ok", false)}, "is_error = false, want true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := load(t, "testdata/basic.jsonl")
			if _, err := llm.Collect(p.Stream(t.Context(), llm.Request{}), nil); err != nil {
				t.Fatal(err)
			}
			_, err := llm.Collect(p.Stream(t.Context(), results(tc.results...)), nil)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ee *replay.ExpectationError
			if !errors.As(err, &ee) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want an ExpectationError containing %q", err, tc.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ script, want string }{
		{``, "no turn"},
		{`{"turn": {}}`, ":1: a turn needs text or tool calls"},
		{`{"turn": {"text": "x"}, "end": {}}`, "exactly one"},
		{`{"turns": {"text": "x"}}`, "unknown field"},
		{`{"turn": {"text": "x", "tool_calls": [{"id": "a", "name": "n", "args": [1]}]}}`, "want an object"},
		{`{"turn": {"text": "x", "tool_calls": [{"id": "a", "name": "n", "args": {"k": 1} }, {"id": "a", "name": "n"}]}}`, `"a" used twice`},
		{`{"turn": {"text": "x", "tool_calls": [{"name": "n"}]}}`, "needs an id"},
		{"{\"turn\": {\"text\": \"x\"}}\n{\"expect\": {\"id\": \"z\"}}", ":2: expect names \"z\""},
		{"{\"turn\": {\"text\": \"x\"}}\n{\"end\": {}}\n{\"turn\": {\"text\": \"y\"}}", ":3: nothing but a task may follow end"},
		{`{"turn": {"text": "x", "stop": "bored"}}`, "unknown stop"},
		{`{"turn": {"text": "x"}} {"end": {}}`, "more than one JSON value"},
		{`not json`, ":1: invalid character"},
		{"{\"turn\": {\"text\": \"x\"}}\n{\"task\": \"\"}", ":2: a task needs"},
		{"{\"turn\": {\"text\": \"x\"}}\n{\"task\": \"a\"}\n{\"task\": \"b\"}\n{\"turn\": {\"text\": \"y\"}}", `:3: task "a" has no turn`},
		{"{\"turn\": {\"text\": \"x\"}}\n{\"task\": \"a\"}", `task "a" has no turn`},
		{"{\"task\": \"a\"}\n{\"turn\": {\"text\": \"y\"}}", "the script has no turn"},
	} {
		_, err := replay.Parse("s.jsonl", strings.NewReader(tc.script))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tc.script, err, tc.want)
		}
	}
}

func TestBuiltinDemo(t *testing.T) {
	p := load(t, "demo")
	if p.Remaining() < 2 {
		t.Fatalf("demo has %d turns", p.Remaining())
	}
	if _, err := replay.Load("nosuch"); err == nil {
		t.Error("Load of an unknown built-in succeeded")
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"testdata/basic.jsonl", "scripts/demo.jsonl"} {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"turn": {"text": "x", "tool_calls": [{"id": "a", "name": "n", "args": {"k": "\u00e9"}}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := replay.Parse("fuzz", bytes.NewReader(data))
		if err != nil {
			var pe *replay.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		// A script that parses plays through Collect without error, and
		// its tool calls come out whole, ids unique.
		p := replay.New(s)
		p.Chunk = 3
		seen := map[string]bool{}
		for _, st := range s.Steps {
			resp, err := llm.Collect(p.Stream(t.Context(), llm.Request{}), nil)
			if err != nil {
				if _, ok := errors.AsType[*replay.ExpectationError](err); ok {
					return // the empty request carries no results
				}
				t.Fatal(err)
			}
			calls := resp.Message.ToolCalls()
			if len(calls) != len(st.Turn.ToolCalls) {
				t.Fatalf("got %d calls, want %d", len(calls), len(st.Turn.ToolCalls))
			}
			for i, c := range calls {
				if seen[c.ID] || !json.Valid(c.Args) || !bytes.Equal(c.Args, st.Turn.ToolCalls[i].Args) {
					t.Fatalf("call %+v", c)
				}
				seen[c.ID] = true
			}
		}
	})
}

// TestResume: a resumed conversation continues the script where it
// stopped; a conversation that does not match the script is refused.
func TestResume(t *testing.T) {
	task := llm.Message{Role: llm.RoleUser, Content: []llm.Block{llm.Text("go")}}
	first := llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{llm.Text("Let me read two files at once."),
		llm.ToolCall{ID: "a", Name: "read_file"}.Block(), llm.ToolCall{ID: "b", Name: "read_file"}.Block()}}
	res := llm.Message{Role: llm.RoleUser, Content: []llm.Block{
		llm.ToolResult("a", "read_file", "module x", false), llm.ToolResult("b", "read_file", "no such file", true)}}
	history := []llm.Message{task, first, res}

	p := load(t, "testdata/basic.jsonl")
	if err := p.Resume(history); err != nil {
		t.Fatal(err)
	}
	if p.Position() != 1 {
		t.Fatalf("position = %d, want 1", p.Position())
	}
	// The next request gets the second turn, and the first turn's
	// expectations are checked against its results.
	resp, err := llm.Collect(p.Stream(t.Context(), llm.Request{Messages: history}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Text() != "Done." {
		t.Errorf("after resume: %q, want the second turn", resp.Message.Text())
	}

	// Resuming with a result that breaks an expectation fails at the
	// next request, as it would have without the crash.
	p = load(t, "testdata/basic.jsonl")
	bad := []llm.Message{task, first, {Role: llm.RoleUser, Content: []llm.Block{
		llm.ToolResult("a", "read_file", "interrupted", true), llm.ToolResult("b", "read_file", "x", true)}}}
	if err := p.Resume(bad); err != nil {
		t.Fatal(err)
	}
	var ee *replay.ExpectationError
	if _, err := llm.Collect(p.Stream(t.Context(), llm.Request{Messages: bad}), nil); !errors.As(err, &ee) {
		t.Errorf("err = %v, want an ExpectationError", err)
	}

	// Only the task: the script starts from its first turn.
	p = load(t, "testdata/basic.jsonl")
	if err := p.Resume([]llm.Message{task}); err != nil || p.Position() != 0 {
		t.Errorf("fresh: %v, position %d", err, p.Position())
	}

	for name, h := range map[string][]llm.Message{
		"other calls": {task, {Role: llm.RoleAssistant, Content: []llm.Block{llm.ToolCall{ID: "zz", Name: "read_file"}.Block()}}},
		"too long":    {task, first, res, {Role: llm.RoleAssistant, Content: []llm.Block{llm.Text("Done.")}}, {Role: llm.RoleAssistant, Content: []llm.Block{llm.Text("more")}}},
	} {
		p := load(t, "testdata/basic.jsonl")
		var re *replay.ResumeError
		if err := p.Resume(h); !errors.As(err, &re) {
			t.Errorf("%s: err = %v, want a ResumeError", name, err)
		}
		if p.Position() != 0 {
			t.Errorf("%s: position moved to %d on a failed resume", name, p.Position())
		}
	}
}

// A script with task sections plays, for each session, the conversation
// of its task: the sub-agents' beside the parent's.
func TestTasks(t *testing.T) {
	s, err := replay.Parse("t.jsonl", strings.NewReader(`{"turn": {"text": "parent"}}
{"end": {}}
{"task": "Count"}
{"turn": {"text": "counted"}}
{"task": "List"}
{"turn": {"text": "listed"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	for task, want := range map[string]string{"Count the files": "counted", "List them": "listed", "Do it all": "parent"} {
		p := replay.New(s)
		var got string
		for ev, err := range p.Stream(t.Context(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{llm.Text(task)}}}}) {
			if err != nil {
				t.Fatal(err)
			}
			if ev.Type == llm.EventText {
				got += ev.Text
			}
		}
		if got != want {
			t.Errorf("task %q: played %q, want %q", task, got, want)
		}
	}
}

// A turn's "system" must be part of the request's system prompt.
func TestSystemExpectation(t *testing.T) {
	s, err := replay.Parse("sys", strings.NewReader(`{"turn": {"text": "hi", "system": "- shop: Buys things."}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := llm.Collect(replay.New(s).Stream(t.Context(), llm.Request{System: "no skills"}), nil); err == nil || !strings.Contains(err.Error(), "system prompt does not contain") {
		t.Fatalf("err = %v", err)
	}
	if _, err := llm.Collect(replay.New(s).Stream(t.Context(), llm.Request{System: "# Skills\n- shop: Buys things.\n"}), nil); err != nil {
		t.Fatal(err)
	}
}
