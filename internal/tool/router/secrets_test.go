package router_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/tool/router"
)

// A sandboxed command gets what Options.Secrets gives its call (asked
// with the template and every program of the command line), and Close
// runs when the command has ended; an error refuses the command.
func TestSandboxSecrets(t *testing.T) {
	rt := &specRuntime{}
	var gotProgs []string
	var gotTemplate string
	closed := 0
	fail := false
	e := newEnv(t, setup{sandbox: true, hook: func(o *router.Options) {
		rt.Runtime = o.Runtime
		o.Runtime = rt
		o.Secrets = func(_ context.Context, call, template string, progs []string) (router.SandboxSecrets, error) {
			if fail {
				return router.SandboxSecrets{}, errors.New("the person did not approve")
			}
			gotProgs, gotTemplate = progs, template
			return router.SandboxSecrets{Env: []string{"TOKEN=t0ken"}, Stdin: []byte("in-value"),
				Mounts: []sandbox.Mount{{Source: "/dev/shm/x", Target: "/run/secrets"}}, Close: func() { closed++ }}, nil
		}
	}})
	first, err := e.r.Call(t.Context(), tc("shell.exec", map[string]any{"command": "cat README.md; cat go.mod"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(rt.specs) != 1 {
		t.Fatalf("specs %d: %+v", len(rt.specs), first)
	}
	s := rt.specs[0]
	in, _ := io.ReadAll(s.Stdin)
	if !slices.Contains(s.Env, "TOKEN=t0ken") || string(in) != "in-value" || !slices.ContainsFunc(s.Mounts, func(m sandbox.Mount) bool { return m.Target == "/run/secrets" }) {
		t.Errorf("spec: env %v stdin %q mounts %v", s.Env, in, s.Mounts)
	}
	if !slices.Contains(gotProgs, "cat") || len(gotProgs) != 2 || gotTemplate != "code-executor" {
		t.Errorf("asked with programs %v, template %q", gotProgs, gotTemplate)
	}
	if closed != 1 {
		t.Errorf("Close ran %d times", closed)
	}
	fail = true
	res, err := e.r.Call(t.Context(), tc("shell.exec", map[string]any{"command": "cat README.md"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(rt.specs) != 1 || !res.IsError || !strings.Contains(res.Content, "did not approve") {
		t.Errorf("a refused secret ran the command: specs %d, result %+v", len(rt.specs), res)
	}
}
