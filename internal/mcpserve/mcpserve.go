// Package mcpserve owns fluffy as an MCP server ("fluffy mcp serve",
// docs/mcp-serve.md): it offers one fluffy session's gated tools — the
// sandboxed shell and test runs, reads and searches, writes into the
// change set — and two views of the session itself (its change set's diff,
// its audit entries) to an MCP client such as Claude Code or Codex.
//
// It reaches the session only through the Session interface its caller
// implements (internal/cli, over the kernel's IPC): every call is the
// session router's to judge (state gate, policy, approval, sandbox,
// sanitize, audit), exactly as a call of fluffy's own agent loop. This
// package decides only which of the router's tools are offered and how
// they are named and annotated for MCP.
package mcpserve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Tool is one of the session router's tools, under its wire name (dots
// as double underscores: "shell__exec"), which the router and the
// clients' model APIs accept alike.
type Tool struct {
	Name        string
	Description string
	Schema      json.RawMessage
}

// Result is a call's outcome as the router gives it: a refusal (state
// gate, policy, a denied or expired approval) or a failed command is a
// Result with IsError, never an error.
type Result struct {
	Content  string
	IsError  bool
	Decision string // the gates' summary ("allow: rule r12")
}

// Approval is a person's approval a call waits on.
type Approval struct {
	ID     string
	Prompt string
}

// Session is the fluffy session an MCP client's calls go to. Its methods
// may be called from several goroutines.
type Session interface {
	// ID is the session's id, as the audit log and "fluffy session"
	// name it.
	ID() string
	// Tools lists the session router's tools.
	Tools(ctx context.Context) ([]Tool, error)
	// Call runs one call through the session's router. The error is for
	// a call that could not run at all (the kernel went away, the
	// session was closed).
	Call(ctx context.Context, name string, args json.RawMessage) (Result, error)
	// Diff is the session's pending change set as a unified diff,
	// limited to paths when any are given.
	Diff(ctx context.Context, paths []string) (string, error)
	// Audit returns the session's newest audit entries, at most limit,
	// oldest first, one line each.
	Audit(ctx context.Context, limit int) ([]string, error)
}

// ApprovalWatcher is a Session that tells of the approval requests its
// calls wait on. The channel is never closed while calls run; a request
// may be dropped when nobody reads it.
type ApprovalWatcher interface {
	Approvals() <-chan Approval
}

// offered are the router's tools an MCP client gets, by fluffy name,
// with whether they only read. Everything else the router has (the
// memory, sub-agent and git commit tools, plugins' tools) stays fluffy's
// own.
var offered = map[string]bool{
	"fs.read":     true,
	"fs.list":     true,
	"fs.exists":   true,
	"search.grep": true,
	"search.glob": true,
	"git.status":  true,
	"git.diff":    true,
	"git.log":     true,
	"fs.write":    false,
	"fs.edit":     false,
	"shell.exec":  false,
	"test.run":    false,
}

// sandboxed are the offered tools that run commands in the sandbox.
var sandboxed = map[string]bool{"shell__exec": true, "test__run": true}

// The session's own tools, served here rather than by the router: they
// read fluffy's record of the session, never the workspace.
const (
	toolChanges = "changes__diff"
	toolAudit   = "audit__log"
	// maxAudit bounds audit__log's limit.
	maxAudit = 500
)

// Options configure New. Session is required.
type Options struct {
	Session Session
	// Version is fluffy's version, told to the client.
	Version string
	// Logger receives the server's diagnostics (nil: discarded).
	Logger *slog.Logger
}

// Server is the MCP server of one session.
type Server struct {
	o   Options
	srv *mcp.Server
	// turn lets one call run at a time: the kernel runs one call of a
	// session at a time, and a client's parallel calls wait their turn
	// here instead of being refused as busy.
	turn chan struct{}
}

// New builds the server: the offered tools of the session's router and
// the session's own two.
func New(ctx context.Context, o Options) (*Server, error) {
	if o.Session == nil {
		return nil, errors.New("mcpserve: Options.Session is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	defs, err := o.Session.Tools(ctx)
	if err != nil {
		return nil, fmt.Errorf("mcpserve: the session's tools: %w", err)
	}
	s := &Server{o: o, turn: make(chan struct{}, 1)}
	s.srv = mcp.NewServer(&mcp.Implementation{Name: "fluffy", Title: "fluffy (sandboxed, gated tools)", Version: o.Version},
		&mcp.ServerOptions{Logger: o.Logger, Instructions: instructions(o.Session.ID())})
	for _, d := range defs {
		readOnly, ok := offered[strings.ReplaceAll(d.Name, "__", ".")]
		if !ok {
			continue
		}
		schema := d.Schema
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type": "object"}`)
		}
		a := annotations(readOnly)
		if sandboxed[d.Name] {
			// Policy may give a command network.
			a.OpenWorldHint = nil
		}
		s.srv.AddTool(&mcp.Tool{Name: d.Name, Description: d.Description, InputSchema: schema, Annotations: a},
			s.routed(d.Name))
	}
	s.srv.AddTool(&mcp.Tool{Name: toolChanges, Annotations: annotations(true),
		Description: "The session's change set as a unified diff: every write of this session, none of them in the working tree until a person applies them (fluffy session close --apply " + o.Session.ID() + ").",
		InputSchema: json.RawMessage(`{"type": "object", "properties": {"paths": {"type": "array", "items": {"type": "string"}, "description": "only these workspace-relative paths"}}, "additionalProperties": false}`)},
		s.changes)
	s.srv.AddTool(&mcp.Tool{Name: toolAudit, Annotations: annotations(true),
		Description: "This session's newest audit log entries (tool calls, the gates' decisions, approvals, commands), oldest first, one per line.",
		InputSchema: json.RawMessage(fmt.Sprintf(`{"type": "object", "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": %d, "description": "at most this many entries (default 50)"}}, "additionalProperties": false}`, maxAudit))},
		s.audit)
	return s, nil
}

// instructions tell the client what it is talking to.
func instructions(session string) string {
	return "fluffy runs each tool call through its gates (test-first state machine, policy, a person's approval) " +
		"and runs commands in a sandbox. Writes land in fluffy session " + session + "'s change set, not in the working tree: " +
		"a person reviews and applies them. A call may wait for a person's approval; a refusal says why and what is allowed."
}

func annotations(readOnly bool) *mcp.ToolAnnotations {
	// Writes are additive: they land in the change set, which a person
	// applies or discards.
	f := false
	return &mcp.ToolAnnotations{ReadOnlyHint: readOnly, DestructiveHint: &f, OpenWorldHint: &f}
}

// Run serves the client on t until it disconnects or ctx ends.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error {
	return s.srv.Run(ctx, t)
}

// wait takes the call's turn, telling the client when it has to wait for
// an earlier call; the returned func gives the turn back.
func (s *Server) wait(ctx context.Context, req *mcp.CallToolRequest) (func(), error) {
	select {
	case s.turn <- struct{}{}:
		return func() { <-s.turn }, nil
	default:
	}
	s.progress(ctx, req, "waiting for the session's earlier call to end: fluffy runs a session's calls one at a time")
	select {
	case s.turn <- struct{}{}:
		return func() { <-s.turn }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// progress sends msg as a progress notification when the client asked
// for them on this call.
func (s *Server) progress(ctx context.Context, req *mcp.CallToolRequest, msg string) {
	tok := req.Params.GetProgressToken()
	if tok == nil {
		return
	}
	if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Message: msg}); err != nil {
		s.o.Logger.Debug("progress notification", "err", err)
	}
}

// routed is the handler of one of the router's tools.
func (s *Server) routed(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args := req.Params.Arguments
		if len(args) == 0 || string(args) == "null" {
			args = json.RawMessage(`{}`)
		}
		done, err := s.wait(ctx, req)
		if err != nil {
			return nil, err
		}
		defer done()
		type outcome struct {
			res Result
			err error
		}
		out := make(chan outcome, 1)
		go func() {
			res, err := s.o.Session.Call(ctx, name, args)
			out <- outcome{res, err}
		}()
		var approvals <-chan Approval
		if w, ok := s.o.Session.(ApprovalWatcher); ok {
			approvals = w.Approvals()
		}
		for {
			select {
			case o := <-out:
				if o.err != nil {
					return nil, fmt.Errorf("fluffy could not run %s: %w", name, o.err)
				}
				return s.result(o.res), nil
			case a := <-approvals:
				s.tellWaiting(ctx, req, a)
			}
		}
	}
}

// tellWaiting tells the client, as far as it listens, that the call waits
// for a person. The answer never comes from the client: it is the party
// the approval gates.
func (s *Server) tellWaiting(ctx context.Context, req *mcp.CallToolRequest, a Approval) {
	msg := fmt.Sprintf("waiting for a person's approval (request %s): they answer with 'fluffy approve %s /approve' or '/deny', in fluffy's terminal or its channels", a.ID, a.ID)
	s.o.Logger.Info("call waits for approval", "request", a.ID, "session", s.o.Session.ID())
	s.progress(ctx, req, msg)
	//lint:ignore SA1019 logging is deprecated in the newest protocol but the clients in use read it
	if err := req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "notice", Logger: "fluffy", Data: msg}); err != nil {
		s.o.Logger.Debug("log notification", "err", err)
	}
}

// result is a router result for the client: the (sanitized) content as
// text, the gates' decision in _meta.
func (s *Server) result(r Result) *mcp.CallToolResult {
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: r.Content}}, IsError: r.IsError,
		Meta: mcp.Meta{"fluffy/session": s.o.Session.ID()}}
	if r.Decision != "" {
		res.Meta["fluffy/decision"] = r.Decision
	}
	return res
}

// changes is the changes__diff tool.
func (s *Server) changes(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var a struct {
		Paths []string `json:"paths"`
	}
	if err := strictArgs(req.Params.Arguments, &a); err != nil {
		return errorResult(err.Error()), nil
	}
	d, err := s.o.Session.Diff(ctx, a.Paths)
	if err != nil {
		return nil, fmt.Errorf("fluffy could not read the change set: %w", err)
	}
	if d == "" {
		d = "the change set is empty: nothing written yet"
	}
	return s.result(Result{Content: d}), nil
}

// audit is the audit__log tool.
func (s *Server) audit(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var a struct {
		Limit int `json:"limit"`
	}
	if err := strictArgs(req.Params.Arguments, &a); err != nil {
		return errorResult(err.Error()), nil
	}
	switch {
	case a.Limit == 0:
		a.Limit = 50
	case a.Limit < 0 || a.Limit > maxAudit:
		return errorResult(fmt.Sprintf("limit: 1 to %d", maxAudit)), nil
	}
	lines, err := s.o.Session.Audit(ctx, a.Limit)
	if err != nil {
		return nil, fmt.Errorf("fluffy could not read the audit log: %w", err)
	}
	return s.result(Result{Content: strings.Join(lines, "\n")}), nil
}

// strictArgs decodes a call's arguments, refusing unknown members.
func strictArgs(raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("arguments: %w", err)
	}
	return nil
}

func errorResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, IsError: true}
}
