package docker_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
	"github.com/fluffy-agent/fluffy/internal/sandbox/sandboxtest"
)

func countContainers(t *testing.T, session string) int {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label=dev.fluffy.session="+session).Output()
	if err != nil {
		t.Fatal(err)
	}
	return len(strings.Fields(string(out)))
}

func TestPool(t *testing.T) {
	rt := engine(t)
	session := "test-" + t.Name()
	ctx := context.Background()
	p, err := docker.NewPool(docker.PoolOptions{Starter: rt, Spec: sandbox.Spec{Env: []string{"PATH=/bin"}, Limits: sandbox.Limits{Wall: 10 * time.Second}},
		Size: 2, Max: 3, IdleTimeout: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Warm(ctx); err != nil {
		t.Fatal(err)
	}
	if p.Idle() != 2 || countContainers(t, session) != 2 {
		t.Fatalf("after Warm: %d idle, %d containers; want 2", p.Idle(), countContainers(t, session))
	}
	// State persists within a container of the session.
	res, err := p.Exec(ctx, []string{"sh", "-c", "echo hi"})
	if err != nil || string(res.Stdout) != "hi\n" {
		t.Fatalf("exec: %v %q", err, res.Stdout)
	}
	// Concurrency: 5 commands at once never exceed Max containers.
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r, err := p.Exec(ctx, []string{"sleep", "0.3"}); err != nil || r.ExitCode != 0 {
				t.Errorf("exec: %v %+v", err, r)
			}
		}()
	}
	time.Sleep(150 * time.Millisecond)
	if n := countContainers(t, session); n > 3 {
		t.Errorf("%d containers alive, Max is 3", n)
	}
	wg.Wait()
	// Idle ones go after the timeout.
	deadline := time.Now().Add(10 * time.Second)
	for (p.Idle() > 0 || countContainers(t, session) > 0) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if p.Idle() != 0 || countContainers(t, session) != 0 {
		t.Fatalf("after the idle timeout: %d idle, %d containers", p.Idle(), countContainers(t, session))
	}
	// Pre-warm again on the next message.
	if err := p.Warm(ctx); err != nil || p.Idle() != 2 {
		t.Fatalf("re-warm: %v, %d idle", err, p.Idle())
	}
	p.Close()
	if n := countContainers(t, session); n != 0 {
		t.Errorf("%d containers left after Close", n)
	}
}

func TestInstanceTimeoutKills(t *testing.T) {
	rt := engine(t)
	ctx := context.Background()
	inst, err := rt.Start(ctx, sandbox.Spec{Env: []string{"PATH=/bin"}, Limits: sandbox.Limits{Wall: 300 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	res, err := inst.Exec(ctx, []string{"sleep", "60"})
	if err != nil || res.Killed != sandbox.LimitTime {
		t.Fatalf("res %+v err %v, want killed by time", res, err)
	}
	if _, err := inst.Exec(ctx, []string{"true"}); err == nil {
		t.Fatal("exec in a killed container succeeded")
	}
}

// BenchmarkContainer compares, in one run: a one-shot Run (create, start,
// exec, remove), the first command in a pre-warmed container (Pool.Exec
// right after Warm) and repeated exec in a warm container.
func BenchmarkContainer(b *testing.B) {
	rt := engine(b)
	ctx := context.Background()
	spec := sandbox.Spec{Env: []string{"PATH=/bin"}, Limits: sandbox.Limits{Memory: 1 << 30, Pids: 256}}
	b.Run("cold-run", func(b *testing.B) {
		s := spec
		s.Argv = []string{"true"}
		for b.Loop() {
			if _, err := rt.Run(ctx, s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("prewarmed-first-command", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			p, err := docker.NewPool(docker.PoolOptions{Starter: rt, Spec: spec, Size: 1})
			if err != nil {
				b.Fatal(err)
			}
			if err := p.Warm(ctx); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if _, err := p.Exec(ctx, []string{"true"}); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			p.Close()
			b.StartTimer()
		}
	})
	// A session's command as the router runs it: Pool.Run in the
	// container warmed ahead, until Run returns (the container killed;
	// its removal finishes in the background, as in a session).
	b.Run("session-first-command", func(b *testing.B) {
		s := spec
		s.Argv = []string{"true"}
		for b.Loop() {
			b.StopTimer()
			p, err := docker.NewPool(docker.PoolOptions{Starter: rt, Spec: spec, Size: 1})
			if err != nil {
				b.Fatal(err)
			}
			if err := p.Warm(ctx); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if _, err := p.Run(ctx, s); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			p.Close()
			b.StartTimer()
		}
	})
	b.Run("warm-exec", func(b *testing.B) {
		inst, err := rt.Start(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		defer inst.Close()
		for b.Loop() {
			if _, err := inst.Exec(ctx, []string{"true"}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestPoolRunFreshContainer: every command of Pool.Run takes a warm
// container of its own: what one command leaves in /tmp the next one does
// not see, and the container is gone when Run returns.
func TestPoolRunFreshContainer(t *testing.T) {
	rt := engine(t)
	session := "test-" + t.Name()
	ctx := context.Background()
	spec := sandbox.Spec{Env: []string{"PATH=/bin"}, Limits: sandbox.Limits{Wall: 10 * time.Second, Pids: 64}}
	p, err := docker.NewPool(docker.PoolOptions{Starter: rt, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	before := containerIDs(t, session) // a crashed earlier run's, if any
	if err := p.Warm(ctx); err != nil || p.Idle() != 1 {
		t.Fatalf("warm: %v, %d idle", err, p.Idle())
	}
	var warm []string
	for _, id := range containerIDs(t, session) {
		if !slices.Contains(before, id) {
			warm = append(warm, id)
		}
	}
	first := spec
	first.Argv = []string{"sh", "-c", "echo left > /tmp/mark; hostname"}
	res, err := p.Run(ctx, first)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("first: %v %+v", err, res)
	}
	host := strings.TrimSpace(string(res.Stdout))
	if len(warm) != 1 || !strings.HasPrefix(warm[0], host) {
		t.Fatalf("the first command ran in %q, not in the pre-warmed container %q", host, warm)
	}
	second := spec
	second.Argv = []string{"sh", "-c", "hostname; cat /tmp/mark 2>/dev/null || echo none"}
	second.Env = []string{"PATH=/bin", "X=per-command"}
	second.Limits.Wall = 5 * time.Second // per command: same container shape
	res, err = p.Run(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(res.Stdout))
	if len(lines) != 2 || lines[0] == host || lines[1] != "none" {
		t.Fatalf("second command: %q; want another container and no /tmp/mark", res.Stdout)
	}
	// Another shape (a different pids limit) is a cold container.
	other := spec
	other.Limits.Pids = 32
	other.Argv = []string{"hostname"}
	idle := containerIDs(t, session)
	if res, err = p.Run(ctx, other); err != nil || res.ExitCode != 0 {
		t.Fatalf("cold run of another shape: %v %+v", err, res)
	}
	for _, id := range idle {
		if strings.HasPrefix(id, strings.TrimSpace(string(res.Stdout))) {
			t.Fatalf("a command of another shape ran in the pool's container %s", id)
		}
	}
}

func containerIDs(t *testing.T, session string) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-aq", "--no-trunc", "--filter", "label=dev.fluffy.session="+session).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))
}

// TestPoolRunStopsLeftovers: a process a command leaves running in the
// background is dead when Pool.Run returns, although the container's
// removal goes on after: it writes nothing more to the change set.
func TestPoolRunStopsLeftovers(t *testing.T) {
	rt := engine(t)
	ws, cs := t.TempDir(), filepath.Join(t.TempDir(), "cs")
	spec := sandbox.Spec{Env: []string{"PATH=/bin"}, Workspace: ws, ChangeSet: cs, Limits: sandbox.Limits{Wall: 10 * time.Second}}
	p, err := docker.NewPool(docker.PoolOptions{Starter: rt, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Warm(t.Context()); err != nil {
		t.Fatal(err)
	}
	run := spec
	run.Argv = []string{"sh", "-c", "(while :; do echo tick >> tick; usleep 2000; done) >/dev/null 2>&1 & usleep 50000"}
	if res, err := p.Run(t.Context(), run); err != nil || res.ExitCode != 0 {
		t.Fatalf("run: %v %+v", err, res)
	}
	before, err := os.ReadFile(filepath.Join(cs, "tick"))
	if err != nil || len(before) == 0 {
		t.Fatalf("the background loop wrote nothing: %v", err)
	}
	p.Close() // waits for the container's removal
	after, err := os.ReadFile(filepath.Join(cs, "tick"))
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Fatalf("a process the command left wrote to the change set after Run returned: %d bytes, then %d", len(before), len(after))
	}
}

// TestSameContainer: what a command brings may differ; what the container
// fixed when it started may not.
func TestSameContainer(t *testing.T) {
	base := sandbox.Spec{Argv: []string{"true"}, Env: []string{"A=1"}, Workspace: "/w", ChangeSet: "/c",
		Mounts: []sandbox.Mount{{Source: "/m"}}, TmpSize: 1 << 20, Seccomp: "standard",
		Limits: sandbox.Limits{Wall: time.Second, Output: 10, Pids: 5, Memory: 1 << 30, CPU: time.Second, FileSize: 1, OpenFiles: 9}}
	same := []func(*sandbox.Spec){
		func(s *sandbox.Spec) { s.Argv = []string{"sh"} },
		func(s *sandbox.Spec) { s.Env = nil },
		func(s *sandbox.Spec) { s.Dir = "/w/sub" },
		func(s *sandbox.Spec) { s.Limits.Wall, s.Limits.Output = time.Minute, 99 },
		func(s *sandbox.Spec) { s.Seccomp = "" }, // the default is standard
		// Network mode proxy is the command's when the container has none.
		func(s *sandbox.Spec) { s.Network, s.ProxySocket = sandbox.NetworkProxy, "/p" },
	}
	other := []func(*sandbox.Spec){
		func(s *sandbox.Spec) { s.Workspace = "/x" },
		func(s *sandbox.Spec) { s.ChangeSet = "/x" },
		func(s *sandbox.Spec) { s.Mounts[0].Writable = true },
		func(s *sandbox.Spec) { s.Mounts = nil },
		func(s *sandbox.Spec) { s.TmpSize = 2 },
		func(s *sandbox.Spec) { s.Network = sandbox.NetworkNone; s.ProxySocket = "/p" },
		func(s *sandbox.Spec) { s.Seccomp = "strict" },
		func(s *sandbox.Spec) { s.Limits.Pids = 6 },
		func(s *sandbox.Spec) { s.Limits.Memory = 1 },
		func(s *sandbox.Spec) { s.Limits.CPU = 2 * time.Second },
		func(s *sandbox.Spec) { s.Limits.FileSize = 2 },
		func(s *sandbox.Spec) { s.Limits.OpenFiles = 10 },
		func(s *sandbox.Spec) { s.Image = "fluffy-skill/x:0123456789ab" },
		func(s *sandbox.Spec) { s.WorkspaceReadOnly = true },
	}
	for want, changes := range map[bool][]func(*sandbox.Spec){true: same, false: other} {
		for i, change := range changes {
			s := base
			s.Mounts = slices.Clone(base.Mounts)
			change(&s)
			if got := docker.SameContainer(base, s); got != want {
				t.Errorf("change %d (same %v): SameContainer = %v", i, want, got)
			}
		}
	} // A container started with a proxy keeps its own: not another
	// socket's, and not for a command without network.
	withProxy := base
	withProxy.Network, withProxy.ProxySocket = sandbox.NetworkProxy, "/p"
	elsewhere := withProxy
	elsewhere.ProxySocket = "/q"
	if docker.SameContainer(withProxy, base) || docker.SameContainer(withProxy, elsewhere) || !docker.SameContainer(withProxy, withProxy) {
		t.Error("a container with a proxy of its own is taken for another network")
	}
}

// TestPoolRunProxyPerCommand: a command with network mode proxy runs in
// the pool's warm container (started without network) with a forwarder
// of its own to the proxy's socket, which is closed when the command
// returns: a later command in the same container finds nothing listening.
func TestPoolRunProxyPerCommand(t *testing.T) {
	testPoolProxy(t, engine(t), "test-"+t.Name())
}

// labelled lists the ids of rt's engine's containers of session.
func labelled(t *testing.T, rt *docker.Runtime, session string) []string {
	t.Helper()
	list, err := rt.Client().ContainerList(t.Context(), client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", docker.LabelSession+"="+session)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range list.Items {
		ids = append(ids, c.ID)
	}
	return ids
}

// testPoolProxy is TestPoolRunProxyPerCommand on rt, whose containers
// carry the label of session.
func testPoolProxy(t *testing.T, rt *docker.Runtime, session string) {
	ctx := t.Context()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "egress.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	spec := sandbox.Spec{Env: []string{"PATH=/bin", "FLUFFY_SANDBOX_PROBE=1"}, Seccomp: "standard-net",
		Mounts: []sandbox.Mount{{Source: self, Target: "/opt/probe"}}, Limits: sandbox.Limits{Wall: 20 * time.Second}}
	connect := []string{"sh", "-c", "hostname; exec /opt/probe connect " + sandbox.ProxyListen}
	withProxy := spec
	withProxy.Network, withProxy.ProxySocket, withProxy.Argv = sandbox.NetworkProxy, sock, connect

	p, err := docker.NewPool(docker.PoolOptions{Starter: rt, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	before := labelled(t, rt, session)
	if err := p.Warm(ctx); err != nil {
		t.Fatal(err)
	}
	var warm string
	for _, id := range labelled(t, rt, session) {
		if !slices.Contains(before, id) {
			warm = id
		}
	}
	res, err := p.Run(ctx, withProxy)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("a command with the proxy: %v exit %d stdout %q stderr %q", err, res.ExitCode, res.Stdout, res.Stderr)
	}
	if host, _, _ := strings.Cut(string(res.Stdout), "\n"); warm == "" || !strings.HasPrefix(warm, host) {
		t.Errorf("the command ran in %q, not in the pre-warmed container %q", host, warm)
	}
	if accepted.Load() == 0 {
		t.Error("the proxy's socket saw no connection")
	}

	// One container, two commands: the first one's forwarder is gone
	// when the second runs.
	inst, err := rt.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	in := inst.(*docker.Instance)
	if res, err := in.Run(ctx, withProxy); err != nil || res.ExitCode != 0 {
		t.Fatalf("first command: %v exit %d stdout %q stderr %q", err, res.ExitCode, res.Stdout, res.Stderr)
	}
	without := spec
	without.Argv = connect
	res, err = in.Run(ctx, without)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != sandboxtest.ProbeRefusedExit {
		t.Fatalf("a command without the proxy reached %s (exit %d, stdout %q): the previous command's forwarder survived", sandbox.ProxyListen, res.ExitCode, res.Stdout)
	}
}
