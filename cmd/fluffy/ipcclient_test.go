package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
)

func init() { scriptCmds["ipc-session"] = ipcSession }

// ipcSession is a scripted IPC client of the running kernel (start one
// first, e.g. with 'fluffy status'): ipc-session MODEL TASK ANSWER creates
// a session over the current directory, attaches to its events, runs it,
// and answers approval requests through session.approve: the first with
// the first ANSWER ("/approve", "/deny reason"), the next with the next,
// the last ANSWER all that follow. An argument --cp=SRC,DST before an
// ANSWER copies the file SRC to DST before that answer is given (to
// change a file while the session waits). It prints one line per tool
// result ("result ID DECISION: CONTENT"), for each approval its id
// ("approval ID"), summary ("summary TEXT") and steps' notes ("note N
// TEXT"), then "done REASON". With --untrusted=SOURCE first, the session is
// marked as having read untrusted data (session.mark_untrusted) before
// it runs, as the assistant daemon marks one fed a webhook payload.
func ipcSession(ts *testscript.TestScript, neg bool, args []string) {
	var untrusted string
	if len(args) > 0 {
		if src, ok := strings.CutPrefix(args[0], "--untrusted="); ok {
			untrusted, args = src, args[1:]
		}
	}
	if neg || len(args) < 3 {
		ts.Fatalf("usage: ipc-session [--untrusted=SOURCE] MODEL TASK [--cp=SRC,DST]... ANSWER...")
	}
	type answer struct {
		copies [][2]string
		text   string
	}
	var answers []answer
	var copies [][2]string
	for _, a := range args[2:] {
		if c, ok := strings.CutPrefix(a, "--cp="); ok {
			src, dst, ok := strings.Cut(c, ",")
			if !ok {
				ts.Fatalf("--cp=SRC,DST: %q", a)
			}
			copies = append(copies, [2]string{ts.MkAbs(src), ts.MkAbs(dst)})
			continue
		}
		answers = append(answers, answer{copies: copies, text: a})
		copies = nil
	}
	if len(answers) == 0 || copies != nil {
		ts.Fatalf("usage: ipc-session MODEL TASK [--cp=SRC,DST]... ANSWER...")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	home := filepath.Join(ts.Getenv("XDG_DATA_HOME"), "fluffy")
	c, err := ipc.Dial(ctx, ipc.SocketPath(ts.Getenv("XDG_RUNTIME_DIR"), home), ipc.ClientOptions{Name: "ipc-session"})
	ts.Check(err)
	defer c.Close()
	model := args[0]
	if p, ok := strings.CutPrefix(model, "replay/./"); ok {
		model = "replay/" + ts.MkAbs(p)
	}
	var info kernel.Info
	ts.Check(c.Call(ctx, kernel.MethodCreate, kernel.CreateParams{Workspace: ts.MkAbs("."), Task: args[1], Model: model}, &info))
	if untrusted != "" {
		ts.Check(c.Call(ctx, kernel.MethodMarkUntrusted, kernel.MarkUntrustedParams{ID: info.ID, Source: untrusted}, nil))
	}
	ts.Check(c.Subscribe(ctx, kernel.Topic(info.ID)))
	done := make(chan error, 1)
	go func() { done <- c.Call(ctx, kernel.MethodRun, kernel.IDParams{ID: info.ID}, nil) }()
	out := ts.Stdout()
	for {
		select {
		case ev, ok := <-c.Events():
			if !ok {
				ts.Fatalf("the kernel went away: %v", c.Err())
			}
			var e kernel.Event
			ts.Check(json.Unmarshal(ev.Data, &e))
			switch {
			case e.Type == kernel.TypeApproval && e.Approval != nil:
				fmt.Fprintf(out, "approval %s\n", e.Approval.ID)
				fmt.Fprintf(out, "summary %s\n", e.Approval.Summary)
				for _, it := range e.Approval.Items {
					fmt.Fprintf(out, "note %d %s\n", it.N, it.Note)
				}
				a := answers[0]
				if len(answers) > 1 {
					answers = answers[1:]
				} else {
					answers[0].copies = nil
				}
				for _, cp := range a.copies {
					data, err := os.ReadFile(cp[0])
					ts.Check(err)
					ts.Check(os.WriteFile(cp[1], data, 0o644))
				}
				ts.Check(c.Call(ctx, kernel.MethodApprove, kernel.ApproveParams{Request: e.Approval.ID, Answer: a.text, Name: "script"}, nil))
			case e.Type == kernel.Type(agent.EventToolResult) && e.Agent != nil && e.Agent.Result != nil:
				fmt.Fprintf(out, "result %s %s: %s\n", e.Agent.Call.ID, e.Agent.Result.Decision, strings.Join(strings.Fields(e.Agent.Result.Content), " "))
			case e.Type == kernel.TypeDone && e.Result != nil:
				fmt.Fprintf(out, "done %s\n", e.Result.Reason)
				if e.Result.Fault != nil {
					fmt.Fprintf(out, "fault %s\n", e.Result.Fault.Message)
				}
				return
			}
		case err := <-done:
			ts.Check(err)
			done = nil
		case <-ctx.Done():
			ts.Fatalf("the session did not end: %v", ctx.Err())
		}
	}
}
