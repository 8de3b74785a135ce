package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/tool"
	"github.com/fluffy-agent/fluffy/internal/tool/router"
)

type confinedIn struct {
	Hosts []string `json:"hosts,omitempty"`
	Creds bool     `json:"creds,omitempty"`
}

// A confined command gets exactly what it states: its mounts (then the
// masks), no workspace overlay, its stdin, its credentials through
// ConfinedSecrets and its hosts through ConfinedEgress; never the
// session's declared uses (Secrets) or network (Egress).
func TestConfinedCommand(t *testing.T) {
	rt := &specRuntime{}
	mask := sandbox.Mount{Source: "/dev/null", Target: "/ws/.fluffy/policy.yaml"}
	skillDir := sandbox.Mount{Source: "/srv/skills/shop", Target: "/skills/shop"}
	var sessionAsked, sessionNet int
	var gotCreds []tool.Credential
	var gotHosts []string
	eg := &fakeEgress{}
	e := newEnv(t, setup{sandbox: true, hook: func(o *router.Options) {
		rt.Runtime = o.Runtime
		o.Runtime = rt
		o.Masks = []sandbox.Mount{mask}
		o.Secrets = func(context.Context, string, string, []string) (router.SandboxSecrets, error) {
			sessionAsked++
			return router.SandboxSecrets{Env: []string{"SESSION_TOKEN=x"}}, nil
		}
		o.Egress = func(context.Context, string) (router.Egress, error) {
			sessionNet++
			return &fakeEgress{}, nil
		}
		o.ConfinedSecrets = func(_ context.Context, _ string, creds []tool.Credential) (router.SandboxSecrets, error) {
			gotCreds = creds
			return router.SandboxSecrets{Env: []string{"SHOP_TOKEN=t0ken"}}, nil
		}
		o.ConfinedEgress = func(_ context.Context, _ string, hosts []string) (router.Egress, error) {
			gotHosts = hosts
			return eg, nil
		}
	}})
	tl, err := tool.New(tool.Definition[confinedIn]{
		Name: "test.confined", Description: "a confined command", Action: operation.Exec, Tags: []string{tool.TagExec},
		Execution: tool.Execution{Class: tool.Sandbox, Template: "skill"},
		Normalize: func(_ context.Context, _ *tool.Resolver, _ *confinedIn, op *operation.Operation) error {
			op.Argv = []string{"printf", "x"}
			return nil
		},
		Command: func(_ context.Context, in *confinedIn) (tool.Command, error) {
			c := &tool.Confinement{Mounts: []sandbox.Mount{skillDir}, Hosts: in.Hosts, Stdin: []byte(`{"item":"x"}`), Workspace: in.Creds}
			if in.Creds {
				c.Image = "fluffy-skill/shop:0123456789ab"
				c.Credentials = []tool.Credential{{Ref: "env:SHOP", As: "env", Name: "SHOP_TOKEN"}}
			}
			return tool.Command{Argv: []string{"/skills/shop/run.sh"}, Confine: c}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.reg.Register(tl); err != nil {
		t.Fatal(err)
	}

	// Without hosts or credentials: no network, no secret at all.
	if res, err := e.r.Call(t.Context(), tc("test.confined", map[string]any{})); err != nil || res.IsError {
		t.Fatalf("call: %+v, %v", res, err)
	}
	s := rt.specs[0]
	if s.Workspace != "" || s.ChangeSet != "" || s.Network != sandbox.NetworkNone || s.ProxySocket != "" || s.Image != "" {
		t.Fatalf("spec: workspace %q change set %q network %q image %q", s.Workspace, s.ChangeSet, s.Network, s.Image)
	}
	if !slices.Equal(s.Mounts, []sandbox.Mount{skillDir, mask}) {
		t.Fatalf("mounts %v", s.Mounts)
	}
	if in, _ := io.ReadAll(s.Stdin); string(in) != `{"item":"x"}` {
		t.Fatalf("stdin %q", in)
	}
	if sessionAsked != 0 || sessionNet != 0 || slices.Contains(s.Env, "SESSION_TOKEN=x") {
		t.Fatalf("the session's secrets (%d) or network (%d) reached a confined command", sessionAsked, sessionNet)
	}

	// With them: exactly those.
	if _, err := e.r.Call(t.Context(), tc("test.confined", map[string]any{"hosts": []string{"shop.example"}, "creds": true})); err != nil {
		t.Fatal(err)
	}
	s = rt.specs[1]
	if s.Workspace != e.cs.Workspace() || s.ChangeSet != e.cs.UpperDir() || !s.WorkspaceReadOnly || s.ChangeSetSize != 0 {
		t.Fatalf("workspace %q change set %q read-only %v size %d: want the session's, read-only", s.Workspace, s.ChangeSet, s.WorkspaceReadOnly, s.ChangeSetSize)
	}
	if !slices.Equal(gotHosts, []string{"shop.example"}) || len(gotCreds) != 1 || gotCreds[0].Name != "SHOP_TOKEN" {
		t.Fatalf("asked for hosts %v, credentials %v", gotHosts, gotCreds)
	}
	if s.Image != "fluffy-skill/shop:0123456789ab" {
		t.Fatalf("image %q: want the confinement's", s.Image)
	}
	if s.Network != sandbox.NetworkProxy || s.Seccomp != "standard-net" || !slices.Contains(s.Env, "SHOP_TOKEN=t0ken") || !eg.closed {
		t.Fatalf("spec: network %q seccomp %q env %v closed %v", s.Network, s.Seccomp, s.Env, eg.closed)
	}
	if sessionAsked != 0 || sessionNet != 0 {
		t.Fatal("the session's hooks were asked for a confined command")
	}
}

// A Normalize failure that says what to do instead is refused with its
// rule and advice, not the generic one about paths.
func TestNormalizeErrorAdvice(t *testing.T) {
	e := newEnv(t, setup{})
	tl, err := tool.New(tool.Definition[confinedIn]{
		Name: "test.advice", Description: "refuses", Action: operation.Read, Execution: tool.Execution{Class: tool.FastPath},
		Normalize: func(context.Context, *tool.Resolver, *confinedIn, *operation.Operation) error {
			return &tool.NormalizeError{Rule: "skill", Instead: "call skill.load shop first", Err: errors.New("no entrypoint \"sell\"")}
		},
		Run: func(context.Context, *confinedIn) (tool.Result, error) { return tool.Result{}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.reg.Register(tl); err != nil {
		t.Fatal(err)
	}
	res, err := e.r.Call(t.Context(), tc("test.advice", map[string]any{}))
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(res.Content, "call skill.load shop first") || strings.Contains(res.Content, "name paths inside the workspace") || !strings.Contains(res.Content, "rule skill") {
		t.Fatalf("result: %s", res.Content)
	}
}

type imageIn struct {
	Declared bool `json:"declared,omitempty"`
	Image    bool `json:"image,omitempty"`
}

// In a session whose runtime starts no images, a command in an image of
// its own (its operation tagged tool.TagImage) runs on the image runtime,
// and exec.start names that runtime; the session's other commands stay on
// its own. A command naming an image it did not declare is refused, and
// an engine that does not answer refuses the run: nothing falls back to
// the session's runtime.
func TestImageRuntime(t *testing.T) {
	own, img := &specRuntime{}, &specRuntime{}
	var engineErr error
	connects := 0
	e := newEnv(t, setup{sandbox: true, hook: func(o *router.Options) {
		o.Runtime, o.RuntimeName = own, "native"
		o.ImageRuntime = func(context.Context) (sandbox.Runtime, error) {
			connects++
			if engineErr != nil {
				return nil, engineErr
			}
			return img, nil
		}
		o.ImageRuntimeName = "docker"
	}})
	tl, err := tool.New(tool.Definition[imageIn]{
		Name: "test.image", Description: "a command in an image", Action: operation.Exec, Tags: []string{tool.TagExec},
		Execution: tool.Execution{Class: tool.Sandbox, Template: "skill"},
		Normalize: func(_ context.Context, _ *tool.Resolver, in *imageIn, op *operation.Operation) error {
			op.Argv = []string{"printf", "x"}
			if in.Declared {
				op.Tags = append(op.Tags, tool.TagImage)
			}
			return nil
		},
		Command: func(_ context.Context, in *imageIn) (tool.Command, error) {
			c := &tool.Confinement{Workspace: true}
			if in.Image {
				c.Image = "fluffy-skill/stamp:0123456789ab"
			}
			return tool.Command{Argv: []string{"/skills/stamp/run.sh"}, Confine: c}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	must(t, e.reg.Register(tl))
	runtimes := func(from uint64) []string {
		var out []string
		for _, en := range e.entries(from) {
			var p audit.ExecStart
			if en.Kind == audit.KindExecStart && json.Unmarshal(en.Payload.(json.RawMessage), &p) == nil {
				out = append(out, p.Runtime)
			}
		}
		return out
	}

	from := e.last()
	if res, err := e.r.Call(t.Context(), tc("test.image", map[string]any{"declared": true, "image": true})); err != nil || res.IsError {
		t.Fatalf("call: %+v, %v", res, err)
	}
	if len(img.specs) != 1 || len(own.specs) != 0 || img.specs[0].Image != "fluffy-skill/stamp:0123456789ab" {
		t.Fatalf("ran %d on the image runtime, %d on the session's", len(img.specs), len(own.specs))
	}
	if s := img.specs[0]; s.Workspace != e.cs.Workspace() || s.ChangeSet != e.cs.UpperDir() || !s.WorkspaceReadOnly {
		t.Fatalf("workspace %q change set %q read-only %v: want the session's, read-only", s.Workspace, s.ChangeSet, s.WorkspaceReadOnly)
	}
	if got := runtimes(from); !slices.Equal(got, []string{"docker"}) {
		t.Fatalf("exec.start runtimes %v, want [docker]", got)
	}

	from = e.last()
	if res, err := e.r.Call(t.Context(), tc("test.image", map[string]any{})); err != nil || res.IsError {
		t.Fatalf("call: %+v, %v", res, err)
	}
	if len(own.specs) != 1 || len(img.specs) != 1 || connects != 1 {
		t.Fatalf("a command without an image: %d on the session's runtime, %d on the image runtime, %d connects", len(own.specs), len(img.specs), connects)
	}
	if got := runtimes(from); !slices.Equal(got, []string{"native"}) {
		t.Fatalf("exec.start runtimes %v, want [native]", got)
	}

	res, err := e.r.Call(t.Context(), tc("test.image", map[string]any{"image": true}))
	if err != nil || !res.IsError || !strings.Contains(res.Content, "does not declare") || len(own.specs) != 1 || len(img.specs) != 1 {
		t.Fatalf("an undeclared image: %+v, %v; ran %d, %d", res, err, len(own.specs), len(img.specs))
	}

	engineErr = errors.New("no container engine answers at unix:///nowhere")
	res, err = e.r.Call(t.Context(), tc("test.image", map[string]any{"declared": true, "image": true}))
	if err != nil || !res.IsError || !strings.Contains(res.Content, "no container engine answers") || len(own.specs) != 1 || len(img.specs) != 1 {
		t.Fatalf("no engine: %+v, %v; ran %d, %d", res, err, len(own.specs), len(img.specs))
	}
}
