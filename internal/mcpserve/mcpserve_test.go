package mcpserve_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fluffy-agent/fluffy/internal/mcpserve"
)

// fakeSession stands in for a kernel session: it records the calls it
// gets and refuses a second call while one runs, as the kernel does.
type fakeSession struct {
	mu        sync.Mutex
	calls     []string
	running   atomic.Int32
	block     chan struct{} // when set, "shell__exec" waits for it
	approvals chan mcpserve.Approval
}

func (f *fakeSession) ID() string { return "s1" }

func (f *fakeSession) Tools(context.Context) ([]mcpserve.Tool, error) {
	return []mcpserve.Tool{
		{Name: "fs__read", Description: "read", Schema: json.RawMessage(`{"type": "object", "properties": {"path": {"type": "string"}}}`)},
		{Name: "shell__exec", Description: "run", Schema: json.RawMessage(`{"type": "object", "properties": {"command": {"type": "string"}}}`)},
		{Name: "memory__write", Description: "not offered"},
		{Name: "sessions__spawn", Description: "not offered"},
	}, nil
}

func (f *fakeSession) Call(ctx context.Context, name string, args json.RawMessage) (mcpserve.Result, error) {
	if f.running.Add(1) > 1 {
		f.running.Add(-1)
		return mcpserve.Result{}, errors.New("kernel: session is running")
	}
	defer f.running.Add(-1)
	f.mu.Lock()
	f.calls = append(f.calls, name+" "+string(args))
	f.mu.Unlock()
	if name == "shell__exec" && f.block != nil {
		f.approvals <- mcpserve.Approval{ID: "r1", Prompt: "run it?"}
		select {
		case <-f.block:
		case <-ctx.Done():
			return mcpserve.Result{}, ctx.Err()
		}
		return mcpserve.Result{Content: "refused by the approval gate", IsError: true, Decision: "approve: rule fallback (denied)"}, nil
	}
	return mcpserve.Result{Content: "hello", Decision: "allow: rule r1"}, nil
}

func (f *fakeSession) Diff(context.Context, []string) (string, error) { return "+x", nil }

func (f *fakeSession) Audit(_ context.Context, limit int) ([]string, error) {
	return []string{"1\ttool.call", "2\ttool.result"}[:min(limit, 2)], nil
}

func (f *fakeSession) Approvals() <-chan mcpserve.Approval { return f.approvals }

func connect(t *testing.T, f *fakeSession, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx := t.Context()
	s, err := mcpserve.New(ctx, mcpserve.Options{Session: f, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	go func() { _ = s.Run(ctx, st) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func text(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

// Only the offered tools are listed, under the router's wire names; a
// call reaches the session with its arguments,
// and the gates' decision comes back in _meta.
func TestToolsAndCall(t *testing.T) {
	f := &fakeSession{approvals: make(chan mcpserve.Approval, 1)}
	cs := connect(t, f, nil)
	ctx := t.Context()
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range lt.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	if want := []string{"audit__log", "changes__diff", "fs__read", "shell__exec"}; !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fs__read", Arguments: map[string]any{"path": "a.txt"}})
	if err != nil || res.IsError || text(res) != "hello" || res.Meta["fluffy/decision"] != "allow: rule r1" || res.Meta["fluffy/session"] != "s1" {
		t.Fatalf("call: %+v %v", res, err)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "memory__write", Arguments: map[string]any{}}); err == nil {
		t.Error("a tool that is not offered was called")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := []string{`fs__read {"path":"a.txt"}`}; !slices.Equal(f.calls, want) {
		t.Errorf("session calls %q, want %q", f.calls, want)
	}
}

// The session's own tools: its diff and its audit entries, with their
// arguments checked.
func TestChangesAndAudit(t *testing.T) {
	cs := connect(t, &fakeSession{}, nil)
	ctx := t.Context()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "changes__diff", Arguments: map[string]any{}})
	if err != nil || res.IsError || text(res) != "+x" {
		t.Fatalf("changes__diff: %+v %v", res, err)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "audit__log", Arguments: map[string]any{"limit": 1}})
	if err != nil || res.IsError || text(res) != "1\ttool.call" {
		t.Fatalf("audit__log: %q %v", text(res), err)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "audit__log", Arguments: map[string]any{"limit": 100000}})
	if err != nil || !res.IsError {
		t.Fatalf("audit__log over the bound: %+v %v", res, err)
	}
}

// A client's parallel calls run one at a time (the kernel would refuse
// the second as busy), each told why it waits: a call waiting for a
// person's approval tells the client so, without taking an answer from
// it, and the call after it tells it waits its turn.
func TestParallelCallsAndApprovalNotice(t *testing.T) {
	f := &fakeSession{block: make(chan struct{}), approvals: make(chan mcpserve.Approval, 1)}
	notes := make(chan string, 4)
	cs := connect(t, f, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		notes <- fmt.Sprint(r.Params.ProgressToken) + ": " + r.Params.Message
	}})
	ctx := t.Context()
	type outcome struct {
		name string
		res  *mcp.CallToolResult
		err  error
	}
	results := make(chan outcome, 2)
	call := func(name string) {
		p := &mcp.CallToolParams{Name: name, Arguments: map[string]any{}}
		p.SetProgressToken(name)
		res, err := cs.CallTool(ctx, p)
		results <- outcome{name, res, err}
	}
	go call("shell__exec")
	if n := <-notes; !strings.HasPrefix(n, "shell__exec: ") || !strings.Contains(n, "fluffy approve r1") {
		t.Fatalf("approval notice %q", n)
	}
	go call("fs__read")
	select {
	case n := <-notes:
		if !strings.HasPrefix(n, "fs__read: waiting for the session's earlier call") {
			t.Fatalf("second call's notice %q", n)
		}
	case o := <-results:
		t.Fatalf("the second call ran beside the first: %+v %v", o.res, o.err)
	}
	close(f.block)
	for range 2 {
		o := <-results
		if o.err != nil {
			t.Errorf("%s: %v", o.name, o.err)
		}
	}
}
