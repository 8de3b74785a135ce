package router_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/tool/router"
)

// specRuntime records the spec of each command instead of running it.
type specRuntime struct {
	sandbox.Runtime
	mu    sync.Mutex
	specs []sandbox.Spec
}

func (r *specRuntime) Run(_ context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.specs = append(r.specs, spec)
	return sandbox.Result{}, nil
}

type fakeEgress struct {
	closed bool
	mounts []sandbox.Mount
}

var _ router.EgressMounts = (*fakeEgress)(nil)

func (f *fakeEgress) Mounts() []sandbox.Mount { return f.mounts }

func (f *fakeEgress) Socket() string { return "/run/test/egress.sock" }
func (f *fakeEgress) Env() []string  { return []string{"HTTP_PROXY=http://127.0.0.1:3128"} }
func (f *fakeEgress) Close()         { f.closed = true }

// A sandboxed command gets the network Options.Egress gives its call (the
// proxy's socket, standard-net, the proxy variables, Options.NetEnv in
// place of the offline values, the files it mounts), closed when the
// command ends; without
// one it keeps none, and the offline values.
func TestSandboxEgress(t *testing.T) {
	for _, give := range []bool{true, false} {
		t.Run(map[bool]string{true: "egress", false: "none"}[give], func(t *testing.T) {
			rt := &specRuntime{}
			ca := sandbox.Mount{Source: "/run/test/ca-bundle.pem", Target: sandbox.CABundlePath}
			eg := &fakeEgress{mounts: []sandbox.Mount{ca}}
			var asked []string
			e := newEnv(t, setup{sandbox: true, hook: func(o *router.Options) {
				rt.Runtime = o.Runtime
				o.Runtime = rt
				o.Env = append(o.Env, "GOPROXY=off")
				o.NetEnv = []string{"GOPROXY=http://proxy.test"}
				o.Egress = func(_ context.Context, call string) (router.Egress, error) {
					asked = append(asked, call)
					if !give {
						return nil, nil
					}
					return eg, nil
				}
			}})
			c := tc("shell.exec", map[string]any{"command": "cat README.md"})
			if _, err := e.r.Call(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			if len(rt.specs) != 1 || !slices.Equal(asked, []string{c.ID}) {
				t.Fatalf("specs %d, asked %v (call %s)", len(rt.specs), asked, c.ID)
			}
			s := rt.specs[0]
			goproxy := slices.DeleteFunc(slices.Clone(s.Env), func(v string) bool { return !strings.HasPrefix(v, "GOPROXY=") })
			if !give {
				if !slices.Equal(goproxy, []string{"GOPROXY=off"}) {
					t.Fatalf("no egress: %v", goproxy)
				}
				if s.Network != sandbox.NetworkNone || s.ProxySocket != "" || s.Seccomp != "standard" || slices.ContainsFunc(s.Env, func(v string) bool { return strings.HasPrefix(v, "HTTP_PROXY=") }) {
					t.Fatalf("no egress: network %q socket %q seccomp %q env %v", s.Network, s.ProxySocket, s.Seccomp, s.Env)
				}
				return
			}
			if s.Network != sandbox.NetworkProxy || s.ProxySocket != eg.Socket() || s.Seccomp != "standard-net" || !slices.Contains(s.Env, "HTTP_PROXY=http://127.0.0.1:3128") {
				t.Fatalf("egress: network %q socket %q seccomp %q env %v", s.Network, s.ProxySocket, s.Seccomp, s.Env)
			}
			if !slices.Equal(goproxy, []string{"GOPROXY=http://proxy.test"}) {
				t.Fatalf("egress: %v, want NetEnv's GOPROXY alone", goproxy)
			}
			if !slices.Contains(s.Mounts, ca) {
				t.Fatalf("egress: mounts %v lack the proxy's %v", s.Mounts, ca)
			}
			if !eg.closed {
				t.Fatal("the egress was not closed after the command")
			}
		})
	}
}
