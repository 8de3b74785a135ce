package main

import (
	"context"
	"encoding/json"
	"fmt"
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
// and answers every approval request with ANSWER ("/approve", "/deny
// reason") through session.approve. It prints one line per tool result
// ("result ID DECISION: CONTENT") and approval ("approval ID"), then
// "done REASON".
func ipcSession(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: ipc-session MODEL TASK ANSWER")
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
				ts.Check(c.Call(ctx, kernel.MethodApprove, kernel.ApproveParams{Request: e.Approval.ID, Answer: args[2], Name: "script"}, nil))
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
