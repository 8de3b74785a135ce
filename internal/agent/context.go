package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/fluffy-agent/fluffy/internal/llm"
)

// summaryReserve is the room kept for the summary of dropped turns.
const summaryReserve = 1024

// request builds the next model request from s, within the context
// budget: the system prompt, the tools and the task always; then the
// newest turns that fit, starting at an assistant message so that every
// tool result still follows its call. What falls out is summarized into
// the task message (or noted, with NoSummary).
func (a *Agent) request(ctx context.Context, s *Session) (llm.Request, error) {
	req := llm.Request{Model: a.o.Model, System: a.o.System, Tools: a.o.Tools.Definitions(), MaxTokens: a.o.MaxResponseTokens}
	scale := func(n int) int {
		if s.ratio > 0 {
			return int(float64(n)*s.ratio) + 1
		}
		return n
	}
	budget := a.o.Limits.ContextTokens
	fixed := scale(llm.EstimateRequest(llm.Request{System: req.System, Tools: req.Tools}) + llm.EstimateMessage(s.Messages[0]))
	sizes := make([]int, len(s.Messages))
	total := fixed
	for i, m := range s.Messages[1:] {
		sizes[i+1] = scale(llm.EstimateMessage(m))
		total += sizes[i+1]
	}
	if total <= budget && s.Summarized == 0 {
		req.Messages = s.Messages
		return req, nil
	}
	// The smallest cut, at an assistant message, whose suffix fits.
	cut := -1
	suffix := 0
	lastAssistant := -1
	for i := len(s.Messages) - 1; i >= 1; i-- {
		suffix += sizes[i]
		if s.Messages[i].Role != llm.RoleAssistant {
			continue
		}
		if lastAssistant < 0 {
			lastAssistant = i
		}
		if i < s.Summarized {
			break
		}
		if fixed+summaryReserve+suffix <= budget {
			cut = i
		} else {
			break
		}
	}
	if cut < 0 {
		// Not even the newest turn fits: keep it anyway (its tool
		// results are already truncated) rather than lose the thread.
		cut = lastAssistant
	}
	if cut < 0 {
		req.Messages = s.Messages
		return req, nil
	}
	if cut < s.Summarized {
		cut = s.Summarized
	}
	if cut > max(s.Summarized, 1) {
		from := max(s.Summarized, 1)
		summary, err := a.summarize(ctx, s.Summary, s.Messages[from:cut])
		if err != nil {
			return req, err
		}
		a.emit(Event{Type: EventContext, Turn: s.Turns, Text: fmt.Sprintf("dropped messages %d-%d from the context window", from, cut-1)})
		s.Summary, s.Summarized = summary, cut
	}
	task := s.Messages[0]
	task.Content = append(append([]llm.Block(nil), task.Content...), llm.Text(
		"\n\n[fluffy: earlier turns of this session were dropped to fit the context window. Summary of what happened:]\n"+s.Summary))
	req.Messages = append([]llm.Message{task}, s.Messages[s.Summarized:]...)
	return req, nil
}

// summarize folds msgs into prev with the summarizer; without one (or if
// it fails for any reason but cancellation) it notes the omission.
func (a *Agent) summarize(ctx context.Context, prev string, msgs []llm.Message) (string, error) {
	note := prev
	if note != "" {
		note += "\n"
	}
	note += fmt.Sprintf("(%d messages omitted.)", len(msgs))
	if a.o.NoSummary {
		return note, nil
	}
	var b strings.Builder
	if prev != "" {
		fmt.Fprintf(&b, "Summary so far:\n%s\n\n", prev)
	}
	b.WriteString("Transcript to fold in:\n")
	for _, m := range msgs {
		for _, bl := range m.Content {
			switch bl.Type {
			case llm.BlockText:
				t, _ := Truncate(bl.Text, 2048)
				fmt.Fprintf(&b, "%s: %s\n", m.Role, t)
			case llm.BlockToolCall:
				t, _ := Truncate(string(bl.Args), 1024)
				fmt.Fprintf(&b, "tool call %s %s\n", bl.Name, t)
			case llm.BlockToolResult:
				t, _ := Truncate(bl.Text, 1024)
				fmt.Fprintf(&b, "tool result %s (error=%v): %s\n", bl.Name, bl.IsError, t)
			}
		}
	}
	resp, err := llm.Collect(a.o.Summarizer.Stream(ctx, llm.Request{
		Model:     a.o.Model,
		System:    "You summarize an AI agent's working session for the agent itself. Keep facts, decisions, file names, commands and their results, and what remains to do. Be brief.",
		Messages:  []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{llm.Text(b.String())}}},
		MaxTokens: summaryReserve,
	}), nil)
	if err != nil {
		if ctx.Err() != nil {
			return "", err
		}
		a.o.Logger.Warn("summarizing the dropped context failed; noting the omission instead", "err", err)
		return note, nil
	}
	return resp.Message.Text(), nil
}

// Truncate caps s at about limit bytes, keeping its head and tail and a
// note of what was cut, and returns how many bytes were omitted.
func Truncate(s string, limit int) (string, int) {
	if limit <= 0 || len(s) <= limit {
		return s, 0
	}
	head := limit * 2 / 3
	tail := limit - head
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	t := len(s) - tail
	for t < len(s) && !utf8.RuneStart(s[t]) {
		t++
	}
	omitted := t - head
	return fmt.Sprintf("%s\n[... fluffy truncated %d bytes of this tool result ...]\n%s", s[:head], omitted, s[t:]), omitted
}

// PromptOptions are the parts of the system prompt.
type PromptOptions struct {
	// Instructions is fluffy's own instructions.
	Instructions string
	// ProjectDir holds AGENTS.md (and CLAUDE.md, if present).
	ProjectDir string
	// TDDState is the TDD machine's current state, shown to the model.
	TDDState string
	// Tools are listed by name (their schemas travel separately).
	Tools []llm.Tool
}

// projectFileLimit caps each project instruction file.
const projectFileLimit = 64 << 10

// SystemPrompt assembles the system prompt. Project files are read
// without following them out of ProjectDir, capped in size, and quoted
// as the project's words, not fluffy's.
func SystemPrompt(o PromptOptions) (string, error) {
	var b strings.Builder
	b.WriteString(strings.TrimSpace(o.Instructions))
	b.WriteString("\n")
	if len(o.Tools) > 0 {
		b.WriteString("\n# Tools\n\nYou can call: ")
		for i, t := range o.Tools {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(t.Name)
		}
		b.WriteString(". Every call passes fluffy's gates; a refusal explains itself.\n")
	}
	if o.TDDState != "" {
		fmt.Fprintf(&b, "\n# Test-driven state\n\nThe session is in state %q.\n", o.TDDState)
	}
	if o.ProjectDir != "" {
		root, err := os.OpenRoot(o.ProjectDir)
		if err != nil {
			return "", fmt.Errorf("system prompt: %w", err)
		}
		defer root.Close()
		for _, name := range []string{"AGENTS.md", "CLAUDE.md"} {
			data, err := readCapped(root, name)
			if err != nil {
				if os.IsNotExist(err) {
					continue
				}
				return "", fmt.Errorf("system prompt: %s: %w", filepath.Join(o.ProjectDir, name), err)
			}
			t, _ := Truncate(string(data), projectFileLimit)
			fmt.Fprintf(&b, "\n# Project instructions (%s)\n\n%s\n", name, strings.TrimSpace(t))
		}
	}
	return b.String(), nil
}

func readCapped(root *os.Root, name string) ([]byte, error) {
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, projectFileLimit+1)
	n := 0
	for n < len(buf) {
		m, err := f.Read(buf[n:])
		n += m
		if err != nil {
			break
		}
	}
	return buf[:n], nil
}
