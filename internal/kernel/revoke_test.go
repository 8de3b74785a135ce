package kernel_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
)

// revokeLog records the sessions a Revoker was told to end.
type revokeLog []string

func (r *revokeLog) EndSession(id string) { *r = append(*r, id) }

// TestCloseAndRemoveRevoke: what a person granted a session (here a real
// capability token) stops counting the moment the session is closed, or
// removed while open (--force): every Revoker is told, once per session.
func TestCloseAndRemoveRevoke(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	toks, err := policy.NewTokens(bytes.Repeat([]byte{3}, 32), nil)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.Compile(policy.Options{Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	var log revokeLog
	k, err := kernel.Start(ctx, kernel.Options{DB: e.db, Audit: e.audit, DataDir: e.dir, Models: scriptModels(writeScript),
		Tools: func(_ context.Context, env kernel.Env) (agent.Tools, error) {
			return &writeTools{env: env}, nil
		},
		Revokers: []kernel.Revoker{toks, &log}})
	if err != nil {
		t.Fatal(err)
	}

	// covered reports whether a token issued to session id still turns
	// the policy's approve into allow.
	issue := func(id string) operation.Operation {
		op := operation.Operation{Tool: "shell.exec", Action: operation.Exec, Argv: []string{"make", "install"}, Session: operation.Session{ID: id, Workspace: e.ws}}
		tok, err := toks.Issue(policy.Scope{Session: id, Tool: "shell.exec", Action: operation.Exec, Argv: op.Argv, Op: op.Signature(), Policy: eng.Digest()}, time.Hour, 5)
		if err != nil {
			t.Fatal(err)
		}
		op.Tokens = []string{tok}
		return op
	}
	covered := func(op operation.Operation) bool { return eng.Explain(ctx, op).Effect == policy.Allow }

	for _, c := range []struct {
		name string
		end  func(id string) error
	}{
		{"close", func(id string) error { _, err := k.Close(ctx, kernel.CloseParams{ID: id}); return err }},
		{"rm --force", func(id string) error { _, err := k.Remove(ctx, kernel.RemoveParams{ID: id, Force: true}); return err }},
	} {
		t.Run(c.name, func(t *testing.T) {
			log = nil
			info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "t", Model: "replay/test"})
			if err != nil {
				t.Fatal(err)
			}
			op := issue(info.ID)
			if !covered(op) {
				t.Fatalf("the token does not cover its operation before the session ends: %+v", eng.Explain(ctx, op))
			}
			if err := c.end(info.ID); err != nil {
				t.Fatal(err)
			}
			if covered(op) {
				t.Errorf("%s: the session's token still turns approve into allow", c.name)
			}
			if len(log) != 1 || log[0] != info.ID {
				t.Errorf("%s: revokers told %v, want [%s]", c.name, log, info.ID)
			}
		})
	}
}
