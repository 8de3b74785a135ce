package wiring

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native"
	"github.com/fluffy-agent/fluffy/internal/secret"
	"github.com/fluffy-agent/fluffy/internal/tdd"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

func TestMain(m *testing.M) {
	if native.IsInit() {
		os.Exit(native.InitMain())
	}
	os.Exit(m.Run())
}

// nativeSessions opens sessions whose tools are the kernel's (sessionTools)
// on boxes, with a policy that allows every command; this test binary
// is the sandbox's init.
type nativeSessions struct {
	tb    testing.TB
	dir   string
	u     *userenv.Env
	log   *slog.Logger
	al    *audit.Log
	j     *tdd.Journal
	m     *tdd.Machine
	tools kernel.ToolsFactory
}

func newNativeSessions(tb testing.TB, boxes func(u *userenv.Env, log *slog.Logger) *sessionBoxes) *nativeSessions {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root (CI runs as root)")
	}
	dir := tb.TempDir()
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	rd, err := os.MkdirTemp("", "fk")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(rd) })
	u := &userenv.Env{Cwd: dir, Self: self, Environ: []string{"HOME=" + dir, "FLUFFY_HOME=" + filepath.Join(dir, "data"),
		"XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "XDG_RUNTIME_DIR=" + rd, "PATH=/usr/bin:/bin"}}
	log := slog.New(slog.DiscardHandler)
	s := &nativeSessions{tb: tb, dir: dir, u: u, log: log}
	s.al, s.j, s.m = sessionStores(tb, dir)
	allow := "rules:\n  - id: run-anything\n    effect: allow\n    match:\n      action: exec\n"
	if err := os.MkdirAll(filepath.Join(dir, "config", "fluffy"), 0o700); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config", "fluffy", "policy.yaml"), []byte(allow), 0o600); err != nil {
		tb.Fatal(err)
	}
	b := boxes(u, log)
	tb.Cleanup(b.Close)
	s.tools = sessionTools(u, log, nil, &livePolicy{u: u, log: log, audit: s.al}, nil, b, nil, memoryDeps{now: time.Now}, nil, nil, observe{})
	return s
}

// open starts session name over a new workspace holding file.txt.
func (s *nativeSessions) open(name string) (agent.Tools, string, *changeset.ChangeSet) {
	s.tb.Helper()
	ws := filepath.Join(s.dir, name)
	if err := os.MkdirAll(ws, 0o755); err != nil {
		s.tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "file.txt"), []byte(name+"\n"), 0o644); err != nil {
		s.tb.Fatal(err)
	}
	cs, err := changeset.Begin(context.Background(), ws, filepath.Join(s.dir, "cs-"+name))
	if err != nil {
		s.tb.Fatal(err)
	}
	id := "test-ahead-" + name + "-" + strconv.Itoa(os.Getpid())
	st, err := tdd.Resume(context.Background(), s.j, s.m, id, tdd.Explore)
	if err != nil {
		s.tb.Fatal(err)
	}
	r, err := s.tools(context.Background(), kernel.Env{Session: id, Workspace: ws, ChangeSet: cs, TDD: st, Audit: s.al})
	if err != nil {
		s.tb.Fatal(err)
	}
	return r, id, cs
}

// shell runs cmd through r's shell.exec and returns its output.
func shell(tb testing.TB, r agent.Tools, cmd string) string {
	tb.Helper()
	args, _ := json.Marshal(map[string]string{"command": cmd})
	res, err := r.Call(context.Background(), llm.ToolCall{ID: "c", Name: "shell.exec", Args: args})
	if err != nil || res.IsError {
		tb.Fatalf("shell.exec %q: %v %s", cmd, err, res.Content)
	}
	return res.Content
}

// BenchmarkSessionShellExec is a session's shell.exec through every gate
// (policy, TDD state, audit, the change set) on the runtime the kernel
// gives sessions (sessionRuntime: native here). Calls are 20 ms apart,
// outside the timing: a model answers between two calls (far slower),
// and a runtime that builds the next sandbox ahead does it then.
func BenchmarkSessionShellExec(b *testing.B) {
	s := newNativeSessions(b, func(u *userenv.Env, log *slog.Logger) *sessionBoxes {
		return newSessionBoxes(log, func() resolved { return sessionRuntime(context.Background(), u, log, nil) })
	})
	r, _, _ := s.open("bench")
	shell(b, r, "cat file.txt") // the first call detects the host
	var ds []time.Duration
	for b.Loop() {
		b.StopTimer()
		time.Sleep(20 * time.Millisecond)
		b.StartTimer()
		t := time.Now()
		shell(b, r, "cat file.txt")
		ds = append(ds, time.Since(t))
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "median-ms")
}

// TestSessionSandboxAhead: with the native runtime, a session's second
// shell.exec takes the sandbox built ahead after its first, and sees
// what the first wrote; another session has a runtime of its own and
// never takes (nor discards) the first one's; an idle session's sandbox
// built ahead is discarded and its next command built on demand; a
// session that ends loses its sandbox built ahead.
func TestSessionSandboxAhead(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts sandboxes")
	}
	var (
		mu   sync.Mutex
		rts  []*native.Runtime
		bxs  *sessionBoxes
		self string
	)
	s := newNativeSessions(t, func(u *userenv.Env, log *slog.Logger) *sessionBoxes {
		self = u.Self
		bxs = newSessionBoxes(log, func() resolved {
			return resolved{name: "native", native: func() (aheadRuntime, error) {
				rt, err := native.New(native.Options{Self: self, Logger: log})
				if err == nil {
					mu.Lock()
					rts = append(rts, rt)
					mu.Unlock()
				}
				return rt, err
			}}
		})
		return bxs
	})
	// settled waits for the sandbox built ahead after session's last
	// command and returns the runtime holding it.
	settled := func(session string) *native.Runtime {
		t.Helper()
		bxs.mu.Lock()
		b := bxs.natives[session]
		bxs.mu.Unlock()
		if b == nil {
			t.Fatalf("session %s has no native runtime of its own", session)
		}
		b.mu.Lock()
		cur := b.cur
		b.mu.Unlock()
		cur.prepare.Wait()
		return cur.rt.(*native.Runtime)
	}
	// stats are rt's ahead starts used and discarded, once they are
	// want (a discard ends in the background), or after 10 s.
	stats := func(rt *native.Runtime, want [2]int64) [2]int64 {
		deadline := time.Now().Add(10 * time.Second)
		for {
			u, d := rt.AheadStats()
			if now := [2]int64{u, d}; now == want || time.Now().After(deadline) {
				return now
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	ra, a, csA := s.open("a")
	shell(t, ra, "cat file.txt; echo from-first > written.txt")
	rtA := settled(a)
	if got := stats(rtA, [2]int64{0, 0}); got != [2]int64{0, 0} {
		t.Fatalf("session a's first command: ahead stats %v, want none used", got)
	}
	// While the sandbox built ahead waits, the kernel writes to the
	// change set (file.write) and the person to the workspace.
	if err := os.WriteFile(filepath.Join(csA.UpperDir(), "kernel.txt"), []byte("from-kernel\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "a", "person.txt"), []byte("from-person\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := shell(t, ra, "cat file.txt written.txt kernel.txt person.txt")
	if got := stats(rtA, [2]int64{1, 0}); got != [2]int64{1, 0} {
		t.Fatalf("session a's second command did not take the sandbox built ahead: stats %v", got)
	}
	if !strings.Contains(out, "a\nfrom-first\nfrom-kernel\nfrom-person") {
		t.Fatalf("the sandbox built ahead does not show session a's workspace and change set:\n%s", out)
	}
	settled(a)

	// The session's next message comes with another shape (here a new
	// change set): the sandbox built ahead on the old one is not used,
	// the command is built on demand and sees only the new change set.
	cs2, err := changeset.Begin(context.Background(), filepath.Join(s.dir, "a"), filepath.Join(s.dir, "cs-a2"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := tdd.Resume(context.Background(), s.j, s.m, a, tdd.Explore)
	if err != nil {
		t.Fatal(err)
	}
	ra, err = s.tools(context.Background(), kernel.Env{Session: a, Workspace: filepath.Join(s.dir, "a"), ChangeSet: cs2, TDD: st, Audit: s.al})
	if err != nil {
		t.Fatal(err)
	}
	out = shell(t, ra, "ls")
	settled(a)
	if got := stats(rtA, [2]int64{1, 1}); got != [2]int64{1, 1} {
		t.Fatalf("a command of another shape: stats %v, want the old sandbox built ahead discarded, not used", got)
	}
	if strings.Contains(out, "written.txt") || strings.Contains(out, "kernel.txt") || !strings.Contains(out, "person.txt") {
		t.Fatalf("the command on the new change set sees the old one:\n%s", out)
	}

	rb, b, _ := s.open("b")
	out = shell(t, rb, "cat file.txt; ls")
	rtB := settled(b)
	if rtB == rtA {
		t.Fatal("sessions a and b share a runtime")
	}
	if got := stats(rtB, [2]int64{0, 0}); got != [2]int64{0, 0} {
		t.Fatalf("session b's first command: stats %v, want it built on demand", got)
	}
	if got := stats(rtA, [2]int64{1, 1}); got != [2]int64{1, 1} {
		t.Fatalf("session b's command touched session a's sandbox built ahead: stats %v", got)
	}
	if strings.Contains(out, "written.txt") || !strings.HasPrefix(strings.TrimSpace(out), "b") {
		t.Fatalf("session b sees session a's sandbox:\n%s", out)
	}

	// Idle: the sandbox built ahead goes; the next command is built on
	// demand, on a new runtime, and builds the next one ahead again.
	bxs.natives[b].expire()
	if got := stats(rtB, [2]int64{0, 1}); got != [2]int64{0, 1} {
		t.Fatalf("an idle session's sandbox built ahead: stats %v, want discarded", got)
	}
	shell(t, rb, "true")
	rtB2 := settled(b)
	if got := stats(rtB2, [2]int64{0, 0}); rtB2 == rtB || got != [2]int64{0, 0} {
		t.Fatalf("after the idle timeout: runtime replaced %v, stats %v", rtB2 != rtB, got)
	}
	shell(t, rb, "true")
	if got := stats(rtB2, [2]int64{1, 0}); got != [2]int64{1, 0} {
		t.Fatalf("after the idle timeout, the next sandbox is not built ahead again: stats %v", got)
	}

	// A session that ends loses its sandbox built ahead; the other
	// keeps its own.
	bxs.EndSession(a)
	if got := stats(rtA, [2]int64{1, 2}); got != [2]int64{1, 2} {
		t.Fatalf("session a ended: stats %v, want its sandbox built ahead discarded", got)
	}
	args, _ := json.Marshal(map[string]string{"command": "true"})
	if res, err := ra.Call(context.Background(), llm.ToolCall{ID: "c", Name: "shell.exec", Args: args}); err == nil && !res.IsError {
		t.Fatal("an ended session's shell.exec still ran")
	}
	settled(b)
	shell(t, rb, "true")
	if got := stats(rtB2, [2]int64{2, 0}); got != [2]int64{2, 0} {
		t.Fatalf("session b after a ended: stats %v", got)
	}
}

// A sandbox built ahead after a command that had secret files is built
// without their folder (removed when the command ended) and without
// anything else of that command's alone; the session's other mounts stay.
func TestAheadSpecDropsCommandParts(t *testing.T) {
	sc := &secret.Arena{}
	spec := sandbox.Spec{
		Argv: []string{"cat", "/run/secrets/token"}, Env: []string{"TOKEN=x"}, Stdin: strings.NewReader("x"), Scratch: sc,
		Workspace: "/ws", Mounts: []sandbox.Mount{{Source: "/dev/shm/fluffy-secrets-1", Target: SecretsMount}, {Source: "/cache/go", Target: "/home/sandbox/go"}},
	}
	got := aheadSpec(spec)
	if got.Argv != nil || got.Env != nil || got.Stdin != nil || got.Scratch != nil {
		t.Errorf("kept the command's own parts: %+v", got)
	}
	if len(got.Mounts) != 1 || got.Mounts[0].Target != "/home/sandbox/go" || got.Workspace != "/ws" {
		t.Errorf("mounts %+v, workspace %q: want only the cache, and the workspace", got.Mounts, got.Workspace)
	}
	if len(spec.Mounts) != 2 {
		t.Errorf("changed the command's own spec: %+v", spec.Mounts)
	}
}

// The kernel's hold on a session's change set (kernel.Options.HoldUpper,
// for apply and discard) has the sandbox built ahead on it discarded: the
// session's native runtime holds its change sets in the boxes' registry.
func TestHoldUpperDiscardsSandboxAhead(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts sandboxes")
	}
	var bxs *sessionBoxes
	s := newNativeSessions(t, func(u *userenv.Env, log *slog.Logger) *sessionBoxes {
		bxs = sharedBoxes(context.Background(), u, log)
		return bxs
	})
	r, id, cs := s.open("held")
	shell(t, r, "echo from-sandbox > w.txt")
	bxs.mu.Lock()
	b := bxs.natives[id]
	bxs.mu.Unlock()
	b.mu.Lock()
	cur := b.cur
	b.mu.Unlock()
	cur.prepare.Wait()
	if !bxs.ups.Held(cs.UpperDir()) {
		t.Fatal("no sandbox built ahead holds the change set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	release, err := bxs.HoldUpper(ctx, cs.UpperDir())
	if err != nil {
		t.Fatalf("the kernel's hold beside the session's sandbox built ahead: %v", err)
	}
	// The count follows the release of the change set.
	discarded := int64(0)
	for deadline := time.Now().Add(10 * time.Second); discarded != 1 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		_, discarded = cur.rt.(*native.Runtime).AheadStats()
	}
	if discarded != 1 {
		t.Errorf("%d sandboxes built ahead discarded, want 1", discarded)
	}
	release()
	if out := shell(t, r, "cat w.txt"); !strings.Contains(out, "from-sandbox") {
		t.Fatalf("after the hold: %s", out)
	}
}
