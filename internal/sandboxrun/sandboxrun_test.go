package sandboxrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandboxd"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// fakeRuntime stands in for a sandbox backend: it records the spec it is
// given and answers with run.
type fakeRuntime struct {
	specs []sandbox.Spec
	run   func(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error)
}

func (f *fakeRuntime) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	f.specs = append(f.specs, spec)
	if f.run == nil {
		return sandbox.Result{}, nil
	}
	return f.run(ctx, spec)
}

// nopObserver keeps the audit log out of the tests that are not about it.
type nopObserver struct{}

func (nopObserver) Start(context.Context, sandbox.Spec) error { return nil }
func (nopObserver) End(context.Context, sandbox.Spec, sandbox.Result, error) error {
	return nil
}

// fakeEgress is a proxy that is never reached.
type fakeEgress struct{ closed bool }

func (e *fakeEgress) Socket() string { return "/nonexistent/egress.sock" }
func (e *fakeEgress) Env() []string  { return []string{"HTTP_PROXY=http://proxy", "NO_PROXY="} }
func (e *fakeEgress) Close()         { e.closed = true }

// setup returns a workspace, a request for it with env added to the
// caller's environment, and a runner on rt.
func setup(t *testing.T, rt *fakeRuntime, env ...string) (string, Request, *Runner) {
	t.Helper()
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	environ := append([]string{"HOME=" + dir, "FLUFFY_HOME=" + filepath.Join(dir, "data"),
		"XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "TMPDIR=" + filepath.Join(dir), "PATH=/usr/bin:/bin"}, env...)
	req := Request{User: &userenv.Env{Environ: environ, Cwd: ws, Self: "/nonexistent", Stderr: io.Discard},
		Argv: []string{"true"}, Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard, Observer: nopObserver{}}
	r := &Runner{Backends: Backends{
		Runtime: func(context.Context, RuntimeRequest) (sandbox.Runtime, func(), error) { return rt, func() {}, nil },
		Egress: func(context.Context, EgressRequest) (Egress, error) {
			t.Fatal("the egress proxy was started")
			return nil, nil
		},
	}}
	return ws, req, r
}

// The throw-away change set exists while the command runs, holds its
// writes, and is gone once Run returns; one given with --changeset is
// kept.
func TestThrowawayChangeSetRemoved(t *testing.T) {
	var during string
	rt := &fakeRuntime{run: func(_ context.Context, spec sandbox.Spec) (sandbox.Result, error) {
		during = spec.ChangeSet
		if _, err := os.Stat(filepath.Dir(spec.ChangeSet)); err != nil {
			t.Errorf("the change set's directory is missing during the run: %v", err)
		}
		return sandbox.Result{}, nil
	}}
	ws, req, r := setup(t, rt)
	o, err := r.Run(t.Context(), req)
	if err != nil || o.Code != 0 {
		t.Fatalf("outcome %+v, %v", o, err)
	}
	if during == "" || filepath.Base(during) != "upper" || strings.HasPrefix(during, ws) {
		t.Fatalf("change set %q, want a throw-away one", during)
	}
	if _, err := os.Stat(filepath.Dir(during)); !os.IsNotExist(err) {
		t.Errorf("%s left behind after the run (%v)", filepath.Dir(during), err)
	}

	kept := filepath.Join(t.TempDir(), "cs")
	req.ChangeSet = kept
	if _, err := r.Run(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if got := rt.specs[len(rt.specs)-1].ChangeSet; got != kept {
		t.Errorf("change set %q, want %q", got, kept)
	}
}

// --env KEY=VALUE sets a variable; --env KEY passes the caller's value
// of KEY, and is a usage error when the caller has none.
func TestEnvFlags(t *testing.T) {
	rt := &fakeRuntime{}
	_, req, r := setup(t, rt, "TOKEN=from-the-caller")
	req.Env = []string{"A=1", "TOKEN"}
	if _, err := r.Run(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	env := rt.specs[0].Env
	if !slices.Contains(env, "A=1") || !slices.Contains(env, "TOKEN=from-the-caller") {
		t.Errorf("env %q", env)
	}
	for _, bad := range []string{"MISSING", "=x"} {
		req.Env = []string{bad}
		if _, err := r.Run(t.Context(), req); !errors.Is(err, userenv.ErrUsage) {
			t.Errorf("--env %s: %v, want a usage error", bad, err)
		}
	}
	if len(rt.specs) != 1 {
		t.Errorf("%d runs, want none after a usage error", len(rt.specs)-1)
	}
}

// --allow-host and --egress-log without --net proxy are usage errors,
// found before anything runs; with it, the proxy's variables come
// before --env (which wins), the seccomp profile lets the command reach
// the forwarder, and the proxy is closed after the run.
func TestNetFlags(t *testing.T) {
	rt := &fakeRuntime{}
	_, req, r := setup(t, rt)
	for _, tc := range []struct {
		hosts []string
		log   string
	}{{[]string{"pypi.org"}, ""}, {nil, "egress.log"}} {
		req.AllowHosts, req.EgressLog = tc.hosts, tc.log
		if _, err := r.Run(t.Context(), req); !errors.Is(err, userenv.ErrUsage) {
			t.Errorf("%v %q without --net proxy: %v, want a usage error", tc.hosts, tc.log, err)
		}
	}
	req.Net = "bogus"
	if _, err := r.Run(t.Context(), req); !errors.Is(err, userenv.ErrUsage) {
		t.Errorf("--net bogus: %v, want a usage error", err)
	}
	if len(rt.specs) != 0 {
		t.Fatalf("%d runs after usage errors", len(rt.specs))
	}

	eg := &fakeEgress{}
	var asked EgressRequest
	r.Backends.Egress = func(_ context.Context, er EgressRequest) (Egress, error) { asked = er; return eg, nil }
	req.Net, req.AllowHosts, req.EgressLog = "proxy", []string{"pypi.org"}, ""
	req.Env = []string{"NO_PROXY=mine"}
	if _, err := r.Run(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	spec := rt.specs[0]
	proxy, mine := slices.Index(spec.Env, "NO_PROXY="), slices.Index(spec.Env, "NO_PROXY=mine")
	if proxy < 0 || mine < proxy || spec.ProxySocket != eg.Socket() || spec.Network != sandbox.NetworkProxy {
		t.Errorf("env %q, socket %q, network %q", spec.Env, spec.ProxySocket, spec.Network)
	}
	if spec.Seccomp != "standard-net" {
		t.Errorf("seccomp %q, want standard-net", spec.Seccomp)
	}
	if !eg.closed || !slices.Equal(asked.AllowHosts, []string{"pypi.org"}) {
		t.Errorf("proxy closed %v, asked for %v", eg.closed, asked.AllowHosts)
	}
}

// Every way a run ends has its Reason and exit status.
func TestReasons(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name   string
		res    sandbox.Result
		err    error
		cause  error // the context's, when cancelled
		reason Reason
		code   int
		msg    string
	}{
		{"exit 0", sandbox.Result{}, nil, nil, ReasonExit, 0, ""},
		{"exit 3", sandbox.Result{ExitCode: 3}, nil, nil, ReasonExit, 3, ""},
		{"signal", sandbox.Result{ExitCode: -1, Signal: 9}, nil, nil, ReasonSignal, 137, "killed by signal 9"},
		{"timeout", sandbox.Result{Killed: sandbox.LimitTime, Signal: 9}, nil, nil, ReasonTimeout, ExitTimeout, "the timeout"},
		{"cpu", sandbox.Result{Killed: sandbox.LimitCPU, Signal: 9}, nil, nil, ReasonLimit, ExitLimit, "limit was reached"},
		{"change set full, exit 0", sandbox.Result{Hit: []sandbox.Limit{sandbox.LimitChangeSet}}, nil, nil, ReasonLimit, ExitLimit, "size bound"},
		{"change set full, exit 1", sandbox.Result{ExitCode: 1, Hit: []sandbox.Limit{sandbox.LimitChangeSet}}, nil, nil, ReasonExit, 1, ""},
		{"not found", sandbox.Result{}, fmt.Errorf("%w: %w: nope", sandbox.ErrInvalidSpec, sandbox.ErrCommandNotFound), nil, ReasonNotFound, ExitNotFound, "sandbox: "},
		{"set-up", sandbox.Result{}, fmt.Errorf("%w: %w", sandbox.ErrSetup, boom), nil, ReasonSetup, ExitSetup, "boom"},
		{"interrupted", sandbox.Result{}, context.Canceled, &Interrupted{Signal: syscall.SIGINT}, ReasonInterrupted, 130, "interrupted by SIGINT"},
		{"interrupted through the server", sandbox.Result{}, context.Canceled, &sandboxd.SignalError{Signal: syscall.SIGTERM}, ReasonInterrupted, 143, "interrupted by SIGTERM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			if tc.cause != nil {
				c, cancel := context.WithCancelCause(ctx)
				cancel(tc.cause)
				ctx = c
			}
			rt := &fakeRuntime{run: func(context.Context, sandbox.Spec) (sandbox.Result, error) { return tc.res, tc.err }}
			_, req, r := setup(t, rt)
			o, err := r.Run(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if o.Reason != tc.reason || o.Code != tc.code || !strings.Contains(o.Msg, tc.msg) || (tc.msg == "") != (o.Msg == "") {
				t.Errorf("outcome %v %d %q, want %v %d with %q", o.Reason, o.Code, o.Msg, tc.reason, tc.code, tc.msg)
			}
		})
	}

	// A spec the backend refuses is the caller's mistake, not a run.
	rt := &fakeRuntime{run: func(context.Context, sandbox.Spec) (sandbox.Result, error) {
		return sandbox.Result{}, fmt.Errorf("%w: bad mount", sandbox.ErrInvalidSpec)
	}}
	_, req, r := setup(t, rt)
	if _, err := r.Run(t.Context(), req); !errors.Is(err, userenv.ErrUsage) {
		t.Errorf("invalid spec: %v, want a usage error", err)
	}
	// A runtime that cannot be built: nothing ran.
	r.Backends.Runtime = func(context.Context, RuntimeRequest) (sandbox.Runtime, func(), error) {
		return nil, nil, fmt.Errorf("%w: no user namespaces", sandbox.ErrUnavailable)
	}
	if o, err := r.Run(t.Context(), req); err != nil || o.Reason != ReasonSetup || o.Code != ExitSetup || !strings.Contains(o.Msg, "no user namespaces") {
		t.Errorf("no runtime: %+v, %v", o, err)
	}
}

// Warnings become notes, DEGRADED ones even with --quiet; a discarded
// write to the throw-away change set is told.
func TestNotes(t *testing.T) {
	rt := &fakeRuntime{run: func(_ context.Context, spec sandbox.Spec) (sandbox.Result, error) {
		if err := os.MkdirAll(spec.ChangeSet, 0o755); err != nil {
			return sandbox.Result{}, err
		}
		err := os.WriteFile(filepath.Join(spec.ChangeSet, "new.txt"), []byte("x"), 0o644)
		return sandbox.Result{Warnings: []string{"DEGRADED: no landlock", "cpu limit by rlimit"}, ChangeSetWritten: true}, err
	}}
	_, req, r := setup(t, rt)
	req.Quiet = true
	o, err := r.Run(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"sandbox: DEGRADED: no landlock", "sandbox: 1 change(s) to the workspace were discarded; pass --changeset DIR to keep them"}
	if !slices.Equal(o.Notes, want) {
		t.Errorf("notes %q, want %q", o.Notes, want)
	}
}

// In the sandbox server the caller gets the outcome before Run returns
// (Early), the same outcome Run returns.
func TestEarly(t *testing.T) {
	rt := &fakeRuntime{run: func(context.Context, sandbox.Spec) (sandbox.Result, error) { return sandbox.Result{ExitCode: 4}, nil }}
	_, req, r := setup(t, rt)
	req.Host = NewHost(HostOptions{})
	defer req.Host.Close()
	var early []Outcome
	req.Early = func(o Outcome, err error) { early = append(early, o) }
	o, err := r.Run(t.Context(), req)
	if err != nil || o.Code != 4 || len(early) != 1 || early[0].Code != 4 {
		t.Errorf("outcome %+v, %v; early %+v", o, err, early)
	}
}
