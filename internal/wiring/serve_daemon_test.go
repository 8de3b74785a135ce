package wiring

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/serve"
)

// replyChannel is a channel that records what the daemon sends it.
type replyChannel struct {
	sent      chan channel.Outbound
	approvals chan approval.Request
}

func (*replyChannel) Name() string { return "chat" }
func (c *replyChannel) Run(ctx context.Context, sink channel.Sink) error {
	sink.Ready("chat", true, nil)
	<-ctx.Done()
	return nil
}
func (c *replyChannel) Send(_ context.Context, _ channel.Conversation, m channel.Outbound) error {
	c.sent <- m
	return nil
}
func (c *replyChannel) SendApproval(_ context.Context, _ channel.Conversation, r approval.Request) error {
	c.approvals <- r
	return nil
}

// firstRequest reports when each run's first turn starts: the model
// request follows at once.
type firstRequest struct {
	serve.Sessions
	started chan time.Time
}

func (f firstRequest) RunMessage(ctx context.Context, id, msg string, on func(kernel.Event)) (kernel.RunResult, error) {
	var once sync.Once
	return f.Sessions.RunMessage(ctx, id, msg, func(ev kernel.Event) {
		if ev.Type == kernel.Type(agent.EventTurnStart) {
			once.Do(func() { f.started <- time.Now() })
		}
		on(ev)
	})
}

// serveKernel starts the kernel (replay model, the assistant workspace
// under dir) and a daemon over it with one channel.
func serveKernel(tb testing.TB, model string, wrap func(serve.Sessions) serve.Sessions) (*serve.Daemon, *replyChannel, *Kernel) {
	tb.Helper()
	dir := tb.TempDir()
	ws := filepath.Join(dir, "workspace")
	script := filepath.Join(dir, "model.jsonl")
	for p, text := range map[string]string{
		filepath.Join(ws, "SOUL.md"): "# Soul\n",
		script:                       model,
		filepath.Join(dir, "config", "fluffy", "config.yaml"): fmt.Sprintf("model: replay/%s\nserve:\n  workspace: %s\n", script, ws),
	} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	u := testUser(tb, dir, dir)
	ctx := tb.Context()
	k, err := StartKernel(ctx, u, ipc.NewMux(), KernelOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(k.Stop)
	var sessions serve.Sessions = k.sessions
	if wrap != nil {
		sessions = wrap(sessions)
	}
	d, err := serve.New(serve.Options{Sessions: sessions, Approvals: k.broker, Audit: auditOnDemand{u: u, held: &k.held}, DB: k.db,
		Workspace: ws, Model: "replay/" + script, Approvers: []string{"@me"}})
	if err != nil {
		tb.Fatal(err)
	}
	ch := &replyChannel{sent: make(chan channel.Outbound, 1), approvals: make(chan approval.Request, 4)}
	if err := d.Start(ctx, []channel.Channel{ch}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d.Stop(sctx)
	})
	return d, ch, k
}

// hello is a replay model that answers once.
const hello = "{\"turn\": {\"text\": \"hello from the daemon\"}}\n{\"end\": {}}\n"

// TestDaemonRunsAMessageOnTheKernel: a message becomes a session of the
// kernel on the assistant workspace, its reply goes back through the
// channel, and the inbound message is in the audit log.
func TestDaemonRunsAMessageOnTheKernel(t *testing.T) {
	d, ch, k := serveKernel(t, hello, nil)
	ctx := t.Context()
	id, err := d.Deliver(ctx, channel.Inbound{Conversation: channel.Conversation{Channel: "chat", Principal: "@me"}, Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-ch.sent:
		if m.Session != id || m.Text != "hello from the daemon" {
			t.Errorf("reply %+v, want the model's text for session %s", m, id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no reply")
	}
	info, err := k.sessions.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(info.Workspace) != "workspace" || info.Task != "hi" {
		t.Errorf("session %+v: want the assistant workspace and the message as its task", info)
	}
	var kind string
	if err := k.db.QueryRowContext(ctx, `SELECT kind FROM sessions WHERE id = ?`, id).Scan(&kind); err != nil || kind != "assistant" {
		t.Errorf("session kind %q (%v), want assistant", kind, err)
	}
	var kinds []string
	rows, err := k.db.QueryContext(ctx, `SELECT session FROM conversations WHERE channel = 'chat' AND principal = '@me'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		kinds = append(kinds, s)
	}
	rows.Close()
	if !slices.Equal(kinds, []string{id}) {
		t.Errorf("conversations %v, want [%s]", kinds, id)
	}
}

// BenchmarkServeInboundToFirstModelRequest: from Deliver of a new
// conversation's first message to its session's first model request
// (replay model): the session's creation, the inbox, the worker and the
// session's start. Reports the median.
func BenchmarkServeInboundToFirstModelRequest(b *testing.B) {
	started := make(chan time.Time, 1)
	d, ch, _ := serveKernel(b, hello, func(s serve.Sessions) serve.Sessions { return firstRequest{Sessions: s, started: started} })
	var ds []time.Duration
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		if _, err := d.Deliver(b.Context(), channel.Inbound{Conversation: channel.Conversation{Channel: "chat", Principal: fmt.Sprintf("@p%d", i)}, Text: "hi"}); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, (<-started).Sub(t0))
		<-ch.sent
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "median-ms")
}

// TestDaemonApprovalGoesToTheChannelAndOneAnswerWins: the kernel's
// approval request for a daemon session reaches the conversation's
// channel; a principal who is no approver cannot answer it, the
// approver's answer decides it, and a second answer is refused as
// already answered.
func TestDaemonApprovalGoesToTheChannelAndOneAnswerWins(t *testing.T) {
	const script = `{"turn": {"text": "Let me run a command.", "tool_calls": [{"id": "x1", "name": "shell.exec", "args": {"command": "echo hello from the sandbox"}}]}}
{"expect": {"id": "x1", "is_error": true}}
{"turn": {"text": "Refused; I stop here."}}
{"end": {}}
`
	d, ch, _ := serveKernel(t, script, nil)
	ctx := t.Context()
	me := channel.Conversation{Channel: "chat", Principal: "@me"}
	if _, err := d.Deliver(ctx, channel.Inbound{Conversation: me, Text: "run echo"}); err != nil {
		t.Fatal(err)
	}
	var req approval.Request
	select {
	case req = <-ch.approvals:
	case <-time.After(30 * time.Second):
		t.Fatal("no approval request reached the channel")
	}
	stranger := channel.Conversation{Channel: "chat", Principal: "@stranger"}
	if err := d.Answer(ctx, channel.Answer{RequestID: req.ID, Text: "/approve", From: stranger}); !errors.Is(err, channel.ErrNotApprover) {
		t.Fatalf("a stranger's answer: %v, want channel.ErrNotApprover", err)
	}
	if err := d.Answer(ctx, channel.Answer{RequestID: req.ID, Text: "/deny not now", From: me}); err != nil {
		t.Fatalf("the approver's answer: %v", err)
	}
	select {
	case m := <-ch.sent:
		if m.Text != "Refused; I stop here." {
			t.Errorf("reply %q", m.Text)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no reply after the answer")
	}
	if err := d.Answer(ctx, channel.Answer{RequestID: req.ID, Text: "/approve", From: me}); !errors.Is(err, approval.ErrUnknownRequest) {
		t.Errorf("a second answer: %v, want approval.ErrUnknownRequest", err)
	}
}

// TestDefaultAssistantWorkspaceIsAProjectOfItsOwn: the default workspace,
// ~/.fluffy/workspace, lies under the home directory's .fluffy, which is
// fluffy's own files for a project rooted at home; no sandbox may run
// over it until the daemon marks the workspace as a project of its own.
func TestDefaultAssistantWorkspaceIsAProjectOfItsOwn(t *testing.T) {
	dir := t.TempDir()
	ws := filepath.Join(dir, ".fluffy", "workspace")
	if err := os.MkdirAll(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	u := testUser(t, dir, dir).WithCwd(ws)
	if _, err := u.SandboxMasks(ws); err == nil {
		t.Fatal("a sandbox over ~/.fluffy/workspace before the mark: no error, want the workspace inside fluffy's own files")
	}
	if err := ownProject(ws); err != nil {
		t.Fatal(err)
	}
	if err := ownProject(ws); err != nil {
		t.Fatalf("a second mark: %v", err)
	}
	if _, err := u.SandboxMasks(ws); err != nil {
		t.Fatalf("a sandbox over the marked workspace: %v", err)
	}
}
