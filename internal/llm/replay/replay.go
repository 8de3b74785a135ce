// Package replay is an llm.Provider that plays a scripted conversation
// from a JSONL file instead of calling a model. It drives the demo and the
// end-to-end tests through the same agent loop as the real providers, and
// it checks the loop as it goes: every tool call it made must come back
// with a result, and results can be asserted, failing loudly on mismatch.
//
// # Format
//
// One JSON object per line; blank lines and lines starting with # are
// ignored. Each object has exactly one key:
//
//	{"turn": {"text": "...", "tool_calls": [{"id": "c1", "name": "fs.read", "args": {"path": "go.mod"}}]}}
//	{"expect": {"id": "c1", "contains": "module", "equals": "...", "is_error": false}}
//	{"end": {}}
//
// A turn is one model response: optional text, optional tool calls (ids
// unique in the script, args a JSON object), optionally "stop"
// ("end", "tool_use", "max_tokens", "refusal") to force a stop reason,
// and optionally "system", text the request's system prompt must
// contain.
// Expect lines follow the turn whose call they name and are checked
// against the tool results of the next request; every field but id is
// optional. End (or the end of the file) closes the conversation: one
// more request is an error.
//
//	{"task": "Summarize"}
//
// starts another conversation in the same file, played for a session
// whose task (its first message) starts with that text: a sub-agent's,
// spawned by the conversation above it. The full reference is
// docs/models.md.
package replay

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"strings"
	"sync"

	"github.com/fluffy-agent/fluffy/internal/llm"
)

//go:embed scripts/*.jsonl
var embedded embed.FS

// Turn is one scripted model response.
type Turn struct {
	Text      string     `json:"text,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	Stop      string     `json:"stop,omitempty"`
	// System, when set, must be part of the system prompt of the
	// request this turn answers (what a session's prompt carries).
	System string `json:"system,omitempty"`
	// Line is where the turn is in the script.
	Line int `json:"-"`
}

// ToolCall is a scripted tool call.
type ToolCall struct {
	ID   string          `json:"id"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args,omitempty"`
}

// Expect asserts the result of a tool call.
type Expect struct {
	ID       string  `json:"id"`
	Contains string  `json:"contains,omitempty"`
	Equals   *string `json:"equals,omitempty"`
	IsError  *bool   `json:"is_error,omitempty"`
	Line     int     `json:"-"`
}

// Step is one line of a script: a turn and the expectations on its
// calls' results.
type Step struct {
	Turn    Turn
	Expects []Expect
}

// Script is a parsed replay script.
type Script struct {
	Name  string
	Steps []Step
	// Task, in a conversation of Tasks, is the start of the task it is
	// played for.
	Task string
	// Tasks are the script's other conversations ({"task": ...} lines),
	// in order; the first whose Task starts a session's task is played
	// for it, Steps for any other.
	Tasks []*Script
}

// For returns the conversation of s played for a session whose task is
// task.
func (s *Script) For(task string) *Script {
	for _, t := range s.Tasks {
		if strings.HasPrefix(task, t.Task) {
			return t
		}
	}
	return s
}

// ParseError locates a problem in a script.
type ParseError struct {
	Name string
	Line int
	Msg  string
}

func (e *ParseError) Error() string { return fmt.Sprintf("%s:%d: %s", e.Name, e.Line, e.Msg) }

// MaxLine bounds one script line (1 MiB).
const MaxLine = 1 << 20

var stops = map[string]llm.StopReason{"end": llm.StopEnd, "tool_use": llm.StopToolUse, "max_tokens": llm.StopMaxTokens, "refusal": llm.StopRefusal}

// Parse reads a script. name is used in errors.
func Parse(name string, r io.Reader) (*Script, error) {
	top := &Script{Name: name}
	s := top
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLine)
	ids := map[string]bool{}
	lastCalls := map[string]bool{} // calls of the last turn not yet followed by another turn
	expected := map[string]bool{}
	ended := false
	line := 0
	fail := func(format string, a ...any) error {
		return &ParseError{Name: name, Line: line, Msg: fmt.Sprintf(format, a...)}
	}
	for sc.Scan() {
		line++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 || text[0] == '#' {
			continue
		}
		var obj struct {
			Turn   *Turn           `json:"turn"`
			Expect *Expect         `json:"expect"`
			End    json.RawMessage `json:"end"`
			Task   *string         `json:"task"`
		}
		dec := json.NewDecoder(bytes.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&obj); err != nil {
			return nil, fail("%v", err)
		}
		if dec.More() {
			return nil, fail("more than one JSON value on the line")
		}
		n := 0
		for _, set := range []bool{obj.Turn != nil, obj.Expect != nil, obj.End != nil, obj.Task != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			return nil, fail(`want exactly one of "turn", "expect", "end", "task"`)
		}
		if ended && obj.Task == nil {
			return nil, fail("nothing but a task may follow end")
		}
		switch {
		case obj.Task != nil:
			if *obj.Task == "" {
				return nil, fail("a task needs the start of a session's task")
			}
			if len(s.Steps) == 0 && s != top {
				return nil, fail("task %q has no turn", s.Task)
			}
			s = &Script{Name: name, Task: *obj.Task}
			top.Tasks = append(top.Tasks, s)
			lastCalls, expected, ended = map[string]bool{}, map[string]bool{}, false
		case obj.Turn != nil:
			t := *obj.Turn
			t.Line = line
			if t.Stop != "" {
				if _, ok := stops[t.Stop]; !ok {
					return nil, fail("unknown stop %q (want end, tool_use, max_tokens or refusal)", t.Stop)
				}
			}
			if t.Text == "" && len(t.ToolCalls) == 0 {
				return nil, fail("a turn needs text or tool calls")
			}
			lastCalls = map[string]bool{}
			expected = map[string]bool{}
			for i := range t.ToolCalls {
				c := &t.ToolCalls[i]
				if c.ID == "" || c.Name == "" {
					return nil, fail("tool call %d needs an id and a name", i+1)
				}
				if ids[c.ID] {
					return nil, fail("tool call id %q used twice", c.ID)
				}
				ids[c.ID] = true
				lastCalls[c.ID] = true
				args, err := llm.NormalizeArgs(c.Args)
				if err != nil {
					return nil, fail("tool call %q: args: %v", c.ID, err)
				}
				c.Args = args
			}
			s.Steps = append(s.Steps, Step{Turn: t})
		case obj.Expect != nil:
			e := *obj.Expect
			e.Line = line
			if !lastCalls[e.ID] {
				return nil, fail("expect names %q, which is not a tool call of the turn before it", e.ID)
			}
			if expected[e.ID] {
				return nil, fail("second expect for %q", e.ID)
			}
			expected[e.ID] = true
			last := &s.Steps[len(s.Steps)-1]
			last.Expects = append(last.Expects, e)
		default:
			if t := bytes.TrimSpace(obj.End); !bytes.Equal(t, []byte("{}")) && !bytes.Equal(t, []byte("true")) {
				return nil, fail(`end takes {} or true`)
			}
			ended = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, &ParseError{Name: name, Line: line + 1, Msg: err.Error()}
	}
	if len(s.Steps) == 0 && s != top {
		return nil, &ParseError{Name: name, Line: line, Msg: fmt.Sprintf("task %q has no turn", s.Task)}
	}
	if len(top.Steps) == 0 {
		return nil, &ParseError{Name: name, Line: line, Msg: "the script has no turn"}
	}
	return top, nil
}

// Load reads a script: an embedded one by bare name ("demo"), else a file.
func Load(name string) (*Script, error) {
	if !strings.ContainsAny(name, `/\.`) {
		data, err := embedded.ReadFile("scripts/" + name + ".jsonl")
		if err != nil {
			return nil, fmt.Errorf("replay: no built-in script %q (give a path to a .jsonl file)", name)
		}
		return Parse(name, bytes.NewReader(data))
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	defer f.Close()
	return Parse(name, f)
}

// ErrScriptEnded is returned for a request after the last turn.
var ErrScriptEnded = errors.New("replay: the script has ended")

// ExpectationError is a tool result that does not match the script.
type ExpectationError struct {
	Script string
	Line   int
	ID     string
	Msg    string
}

func (e *ExpectationError) Error() string {
	return fmt.Sprintf("replay: %s:%d: tool result %s: %s", e.Script, e.Line, e.ID, e.Msg)
}

// Provider plays a script. It is safe for concurrent use, though a
// conversation is sequential by nature.
type Provider struct {
	script *Script
	// Chunk is the size of text and argument pieces (default 8 bytes):
	// small, so that the consumer's joining is exercised.
	Chunk int

	mu   sync.Mutex
	next int
	// chosen is set once the conversation for the session's task is
	// picked (the first request, or Resume).
	chosen bool
}

// choose picks the conversation of script for the task in msgs;
// p.mu is held.
func (p *Provider) choose(msgs []llm.Message) {
	if p.chosen {
		return
	}
	p.chosen = true
	if len(msgs) > 0 && msgs[0].Role == llm.RoleUser {
		p.script = p.script.For(msgs[0].Text())
	}
}

var _ llm.Provider = (*Provider)(nil)

// New returns a provider playing s from its start.
func New(s *Script) *Provider { return &Provider{script: s} }

// Remaining reports how many turns are left.
func (p *Provider) Remaining() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.script.Steps) - p.next
}

// Resume positions the provider after the model turns already in history,
// the conversation of a session being resumed, so that the script
// continues where the session stopped instead of starting over. The
// position is the number of assistant messages in history (the session
// persists every turn as it ends); each must be the script's turn at its
// place, with the same tool call ids in the same order, or Resume fails
// with a *ResumeError and the position is unchanged: a script edited
// since the session started is refused rather than replayed out of step.
// A turn whose response was lost with a crashed kernel is not in history
// and is played again, as a real model would be asked again.
func (p *Provider) Resume(history []llm.Message) error {
	p.mu.Lock()
	p.choose(history)
	p.mu.Unlock()
	n := 0
	for _, m := range history {
		if m.Role != llm.RoleAssistant {
			continue
		}
		if n >= len(p.script.Steps) {
			return &ResumeError{Script: p.script.Name, Turn: n + 1, Msg: fmt.Sprintf("the conversation has more model turns than the script (%d)", len(p.script.Steps))}
		}
		t := p.script.Steps[n].Turn
		var got []string
		for _, b := range m.Content {
			if b.Type == llm.BlockToolCall {
				got = append(got, b.ID)
			}
		}
		var want []string
		for _, c := range t.ToolCalls {
			want = append(want, c.ID)
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			return &ResumeError{Script: p.script.Name, Turn: n + 1, Line: t.Line,
				Msg: fmt.Sprintf("the conversation's tool calls [%s] are not the script's [%s]", strings.Join(got, " "), strings.Join(want, " "))}
		}
		n++
	}
	p.mu.Lock()
	p.next = n
	p.mu.Unlock()
	return nil
}

// Position reports how many turns were played (or skipped by Resume).
func (p *Provider) Position() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.next
}

// ResumeError says why a conversation cannot be resumed on a script.
type ResumeError struct {
	Script string
	Turn   int // the model turn of the conversation, from 1
	Line   int // the script line of the turn, when known
	Msg    string
}

func (e *ResumeError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("replay: cannot resume on %s: turn %d (line %d): %s", e.Script, e.Turn, e.Line, e.Msg)
	}
	return fmt.Sprintf("replay: cannot resume on %s: turn %d: %s", e.Script, e.Turn, e.Msg)
}

// Stream implements llm.Provider.
func (p *Provider) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Event, error] {
	return func(yield func(llm.Event, error) bool) {
		turn, err := p.take(req)
		if err != nil {
			yield(llm.Event{}, err)
			return
		}
		for _, ev := range p.events(req, turn) {
			if err := ctx.Err(); err != nil {
				yield(llm.Event{}, &llm.Error{Provider: "replay", Err: err})
				return
			}
			if !yield(ev, nil) {
				return
			}
		}
	}
}

// take checks the request against the previous step and advances.
func (p *Provider) take(req llm.Request) (Turn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.choose(req.Messages)
	if p.next > 0 {
		if err := p.check(p.script.Steps[p.next-1], req); err != nil {
			return Turn{}, err
		}
	}
	if p.next >= len(p.script.Steps) {
		return Turn{}, ErrScriptEnded
	}
	t := p.script.Steps[p.next].Turn
	if t.System != "" && !strings.Contains(req.System, t.System) {
		return Turn{}, &ExpectationError{Script: p.script.Name, Line: t.Line, ID: "system",
			Msg: fmt.Sprintf("the system prompt does not contain %q", t.System)}
	}
	p.next++
	return t, nil
}

func (p *Provider) check(prev Step, req llm.Request) error {
	if len(prev.Turn.ToolCalls) == 0 {
		return nil
	}
	results := map[string]llm.Block{}
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == llm.RoleUser {
		for _, b := range req.Messages[n-1].Content {
			if b.Type == llm.BlockToolResult {
				results[b.ID] = b
			}
		}
	}
	for _, c := range prev.Turn.ToolCalls {
		if _, ok := results[c.ID]; !ok {
			return &ExpectationError{Script: p.script.Name, Line: prev.Turn.Line, ID: c.ID, Msg: "no result in the next request"}
		}
	}
	for _, e := range prev.Expects {
		got := results[e.ID]
		switch {
		case e.IsError != nil && got.IsError != *e.IsError:
			return &ExpectationError{Script: p.script.Name, Line: e.Line, ID: e.ID, Msg: fmt.Sprintf("is_error = %v, want %v (content %q)", got.IsError, *e.IsError, clip(got.Text))}
		case e.Equals != nil && got.Text != *e.Equals:
			return &ExpectationError{Script: p.script.Name, Line: e.Line, ID: e.ID, Msg: fmt.Sprintf("got %q, want %q", clip(got.Text), *e.Equals)}
		case e.Contains != "" && !strings.Contains(got.Text, e.Contains):
			return &ExpectationError{Script: p.script.Name, Line: e.Line, ID: e.ID, Msg: fmt.Sprintf("%q does not contain %q", clip(got.Text), e.Contains)}
		}
	}
	return nil
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// events renders a turn as a stream, split in small pieces.
func (p *Provider) events(req llm.Request, t Turn) []llm.Event {
	n := p.Chunk
	if n <= 0 {
		n = 8
	}
	var evs []llm.Event
	for _, piece := range split(t.Text, n) {
		evs = append(evs, llm.Event{Type: llm.EventText, Text: piece})
	}
	out := len(t.Text)
	for i, c := range t.ToolCalls {
		evs = append(evs, llm.Event{Type: llm.EventToolCallStart, Index: i, ID: c.ID, Name: c.Name})
		for _, piece := range split(string(c.Args), n) {
			evs = append(evs, llm.Event{Type: llm.EventToolCallDelta, Index: i, ID: c.ID, Text: piece})
		}
		call := llm.ToolCall{ID: c.ID, Name: c.Name, Args: c.Args}
		evs = append(evs, llm.Event{Type: llm.EventToolCallEnd, Index: i, ID: c.ID, Name: c.Name, Call: &call})
		out += len(c.Name) + len(c.Args)
	}
	stop := llm.StopEnd
	if len(t.ToolCalls) > 0 {
		stop = llm.StopToolUse
	}
	if t.Stop != "" {
		stop = stops[t.Stop]
	}
	u := llm.Usage{InputTokens: llm.EstimateRequest(req), OutputTokens: (out + 3) / 4}
	return append(evs, llm.Event{Type: llm.EventUsage, Usage: &u}, llm.Event{Type: llm.EventStop, Stop: stop, Text: string(stop)})
}

// split cuts s into pieces of about n bytes without splitting a UTF-8
// sequence.
func split(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		i := min(n, len(s))
		for i < len(s) && i > 0 && s[i]&0xC0 == 0x80 {
			i++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}
