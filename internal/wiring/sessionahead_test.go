package wiring

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native"
	"github.com/fluffy-agent/fluffy/internal/store"
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
	if s.al, err = audit.Open(context.Background(), audit.Options{Path: filepath.Join(dir, "audit.db"), KeyDir: filepath.Join(dir, "keys")}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.al.Close() })
	db, err := store.OpenMain(context.Background(), filepath.Join(dir, "data"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	if s.j, err = tdd.NewJournal(tdd.JournalOptions{DB: db}); err != nil {
		tb.Fatal(err)
	}
	if s.m, err = tdd.New(tdd.Options{}); err != nil {
		tb.Fatal(err)
	}
	allow := "rules:\n  - id: run-anything\n    effect: allow\n    match:\n      action: exec\n"
	if err := os.MkdirAll(filepath.Join(dir, "config", "fluffy"), 0o700); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config", "fluffy", "policy.yaml"), []byte(allow), 0o600); err != nil {
		tb.Fatal(err)
	}
	b := boxes(u, log)
	tb.Cleanup(b.Close)
	s.tools = sessionTools(u, log, nil, &livePolicy{u: u, log: log, audit: s.al}, nil, b)
	return s
}

// open starts session name over a new workspace holding file.txt.
func (s *nativeSessions) open(name string) (agent.Tools, string) {
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
	return r, id
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
// gives sessions (sessionRuntime: native here), one call after another.
func BenchmarkSessionShellExec(b *testing.B) {
	s := newNativeSessions(b, func(u *userenv.Env, log *slog.Logger) *sessionBoxes {
		return newSessionBoxes(log, func() resolved { return sessionRuntime(context.Background(), u, log) })
	})
	r, _ := s.open("bench")
	shell(b, r, "cat file.txt") // the first call detects the host
	var ds []time.Duration
	for b.Loop() {
		t := time.Now()
		shell(b, r, "cat file.txt")
		ds = append(ds, time.Since(t))
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "median-ms")
}
