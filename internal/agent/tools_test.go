package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/llm"
)

// workspace is a real, small tool set over an in-memory file tree: it
// validates arguments strictly, refuses paths outside the workspace,
// and can block (until cancelled) or fail its runtime on demand. It
// stands in for the tool router, which implements agent.Tools the same
// way.
type workspace struct {
	mu     sync.Mutex
	files  map[string]string
	calls  []string
	broken bool // Call returns a runtime error (e.g. audit unavailable)
}

var _ agent.Tools = (*workspace)(nil)

func newWorkspace(files map[string]string) *workspace {
	if files == nil {
		files = map[string]string{}
	}
	return &workspace{files: files}
}

func (w *workspace) Definitions() []llm.Tool {
	return []llm.Tool{
		{Name: "read_file", Description: "Read a file of the workspace.", Schema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}`)},
		{Name: "write_file", Description: "Write a file of the workspace.", Schema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"],"additionalProperties":false}`)},
		{Name: "list", Description: "List the workspace.", Schema: json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)},
		{Name: "wait", Description: "Wait until interrupted.", Schema: json.RawMessage(`{"type":"object"}`)},
	}
}

func decode(args json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func clean(p string) (string, error) {
	if p == "" || path.IsAbs(p) {
		return "", fmt.Errorf("path %q must be relative to the workspace", p)
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("path %q leaves the workspace", p)
	}
	return c, nil
}

func (w *workspace) Call(ctx context.Context, c llm.ToolCall) (agent.Result, error) {
	w.mu.Lock()
	w.calls = append(w.calls, c.Name)
	broken := w.broken
	w.mu.Unlock()
	if broken {
		return agent.Result{}, errors.New("audit log unavailable")
	}
	bad := func(err error) (agent.Result, error) {
		return agent.Result{Content: "invalid arguments: " + err.Error(), IsError: true, Decision: "decode: refused"}, nil
	}
	switch c.Name {
	case "read_file":
		var a struct{ Path string }
		if err := decode(c.Args, &a); err != nil {
			return bad(err)
		}
		p, err := clean(a.Path)
		if err != nil {
			return agent.Result{Content: err.Error(), IsError: true, Decision: "block: outside workspace"}, nil
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		data, ok := w.files[p]
		if !ok {
			return agent.Result{Content: "no such file: " + p, IsError: true, Decision: "allow"}, nil
		}
		return agent.Result{Content: data, Decision: "allow"}, nil
	case "write_file":
		var a struct{ Path, Content string }
		if err := decode(c.Args, &a); err != nil {
			return bad(err)
		}
		if a.Path == "" {
			return bad(errors.New("path is required"))
		}
		p, err := clean(a.Path)
		if err != nil {
			return agent.Result{Content: err.Error(), IsError: true, Decision: "block: outside workspace"}, nil
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.files[p] = a.Content
		return agent.Result{Content: fmt.Sprintf("wrote %d bytes to %s", len(a.Content), p), Decision: "allow"}, nil
	case "list":
		if err := decode(c.Args, &struct{}{}); err != nil {
			return bad(err)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		var names []string
		for n := range w.files {
			names = append(names, n)
		}
		sort.Strings(names)
		return agent.Result{Content: strings.Join(names, "\n"), Decision: "allow"}, nil
	case "wait":
		<-ctx.Done()
		return agent.Result{}, ctx.Err()
	}
	return agent.Result{Content: "unknown tool " + c.Name, IsError: true, Decision: "decode: unknown tool"}, nil
}
