package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/buildinfo"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/mcpserve"
)

func newMCPCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{Use: "mcp", Short: "fluffy and the Model Context Protocol"}
	var workspace string
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Serve a fluffy session's gated tools to an MCP client over stdio",
		Long: `serve speaks MCP on stdin and stdout for one client (Claude Code, Codex, any
MCP client): the connection is one fluffy session over the workspace, and each
call the client makes takes the session's gates (TDD state, policy, a person's
approval), runs commands in the sandbox and writes into the session's change
set, recorded in the audit log. A call that needs approval waits for an answer
from fluffy's own channels ('fluffy approve', the terminal, the daemon's
channels), never from the client. When the client goes, a session with
changes stays open for review (fluffy session diff, fluffy session close
--apply); one without is closed. See docs/mcp-serve.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ws := a.Cwd
			if workspace != "" {
				ws = workspace
				if !filepath.IsAbs(ws) {
					ws = filepath.Join(a.Cwd, ws)
				}
			}
			return a.serveMCP(cmd.Context(), repoRoot(filepath.Clean(ws)))
		},
	}
	serve.Flags().StringVar(&workspace, "workspace", "", "the workspace (default: the repository holding the current directory)")
	cmd.AddCommand(serve)
	return cmd
}

// mcpTask is the task of a session an MCP client drives.
const mcpTask = "calls of an MCP client (fluffy mcp serve)"

// serveMCP serves one MCP client on stdio as a session over ws.
func (a *App) serveMCP(ctx context.Context, ws string) error {
	if st, err := os.Stat(ws); err != nil || !st.IsDir() {
		return fmt.Errorf("%w: workspace %s is not a directory", errUsage, ws)
	}
	c, err := a.connectKernel(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var info kernel.Info
	if err := c.Call(ctx, kernel.MethodCreate, kernel.CreateParams{Workspace: ws, Task: mcpTask, Model: kernel.ModelExternal}, &info); err != nil {
		return fmt.Errorf("open a session: %w", err)
	}
	s := &mcpSession{a: a, c: c, id: info.ID, approvals: make(chan mcpserve.Approval, 8)}
	if err := s.watch(ctx); err != nil {
		return err
	}
	// stdout is the protocol's: everything for the person goes to stderr
	// (the clients show it in their MCP logs).
	fmt.Fprintf(a.Stderr, "fluffy mcp serve: session %s over %s\n", info.ID, ws)
	srv, err := mcpserve.New(ctx, mcpserve.Options{Session: s, Version: buildinfo.Get().Version})
	if err != nil {
		return err
	}
	runErr := srv.Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(a.Stdin), Writer: nopWriteCloser{a.Stdout}})
	return a.endMCP(context.WithoutCancel(ctx), c, info.ID, runErr)
}

// endMCP leaves a session with changes open for review and closes one
// without (a client that only looked, or whose writes were all refused).
func (a *App) endMCP(ctx context.Context, c *ipc.Client, id string, runErr error) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var d kernel.DiffResult
	if err := c.Call(ctx, kernel.MethodDiff, kernel.DiffParams{ID: id}, &d); err != nil {
		fmt.Fprintf(a.Stderr, "fluffy mcp serve: session %s stays open (its change set could not be read: %v)\n", id, err)
		return runErr
	}
	if len(d.Changes) == 0 {
		if err := c.Call(ctx, kernel.MethodClose, kernel.CloseParams{ID: id}, nil); err != nil {
			fmt.Fprintf(a.Stderr, "fluffy mcp serve: close session %s: %v\n", id, err)
		}
		return runErr
	}
	fmt.Fprintf(a.Stderr, "fluffy mcp serve: session %s has %d pending changes: review them with 'fluffy session diff %s', apply with 'fluffy session close --apply %s'\n",
		id, len(d.Changes), id, id)
	return runErr
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// mcpSession is a kernel session as the MCP server reaches it: the
// session.* methods over the kernel's IPC.
type mcpSession struct {
	a         *App
	c         *ipc.Client
	id        string
	approvals chan mcpserve.Approval

	auditMu sync.Mutex // one audit reader open at a time
}

var _ mcpserve.ApprovalWatcher = (*mcpSession)(nil)

func (s *mcpSession) ID() string { return s.id }

func (s *mcpSession) Tools(ctx context.Context) ([]mcpserve.Tool, error) {
	var defs []mcpserve.Tool
	if err := s.c.Call(ctx, kernel.MethodTools, kernel.IDParams{ID: s.id}, &defs); err != nil {
		return nil, err
	}
	return defs, nil
}

func (s *mcpSession) Call(ctx context.Context, name string, args json.RawMessage) (mcpserve.Result, error) {
	var res mcpserve.Result
	err := s.c.Call(ctx, kernel.MethodCall, kernel.CallParams{ID: s.id, Name: name, Args: args}, &res)
	return res, err
}

func (s *mcpSession) Diff(ctx context.Context, paths []string) (string, error) {
	var d kernel.DiffResult
	if err := s.c.Call(ctx, kernel.MethodDiff, kernel.DiffParams{ID: s.id, Paths: paths}, &d); err != nil {
		return "", err
	}
	return d.Diff, nil
}

// Audit reads the audit log as 'fluffy audit log --session' does: the
// kernel has flushed a call's entries before it answered the call.
func (s *mcpSession) Audit(ctx context.Context, limit int) ([]string, error) {
	s.auditMu.Lock()
	defer s.auditMu.Unlock()
	r, _, err := openAuditReader(ctx, s.a)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var lines []string
	err = r.Entries(ctx, audit.Filter{Session: s.id, Limit: limit, Last: true}, func(e audit.Entry) error {
		payload, _ := e.Payload.(json.RawMessage)
		lines = append(lines, strings.Join([]string{fmt.Sprint(e.Seq), e.Time.UTC().Format(time.RFC3339Nano), e.Session, string(e.Kind), e.Actor, string(payload)}, "\t"))
		return nil
	})
	return lines, err
}

func (s *mcpSession) Approvals() <-chan mcpserve.Approval { return s.approvals }

// watch subscribes to the session's events and passes on its approval
// requests (dropped when the server is not waiting on a call).
func (s *mcpSession) watch(ctx context.Context) error {
	if err := s.c.Subscribe(ctx, kernel.Topic(s.id)); err != nil {
		return fmt.Errorf("watch session %s: %w", s.id, err)
	}
	go func() {
		for ev := range s.c.Events() {
			var e kernel.Event
			if json.Unmarshal(ev.Data, &e) != nil || e.Type != kernel.TypeApproval || e.Approval == nil {
				continue
			}
			select {
			case s.approvals <- mcpserve.Approval{ID: e.Approval.ID, Prompt: e.Text}:
			default:
			}
		}
	}()
	return nil
}
