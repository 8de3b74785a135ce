package wiring

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/store"
	"github.com/fluffy-agent/fluffy/internal/tdd"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// testUser is an invocation in dir/cwd with its own data directory and
// configuration under dir, and a runtime directory short enough for the
// kernel's socket.
func testUser(t testing.TB, dir, cwd string) *userenv.Env {
	t.Helper()
	rd, err := os.MkdirTemp("", "fk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(rd) })
	return &userenv.Env{Stderr: io.Discard, Cwd: cwd, Self: filepath.Join(dir, "bin", "fluffy-core"),
		Environ: []string{"HOME=" + dir, "FLUFFY_HOME=" + filepath.Join(dir, "data"),
			"XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "XDG_RUNTIME_DIR=" + rd}}
}

// TestRunKernelServesAndRefusesASecond: the kernel daemon answers status
// and shutdown on the user's kernel socket; a second kernel for the same
// socket fails with ipc.ErrInUse (the CLI's "a kernel is already
// serving") and leaves the first serving.
func TestRunKernelServesAndRefusesASecond(t *testing.T) {
	dir := t.TempDir()
	u := testUser(t, dir, dir)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	sock, done, c := startTestKernel(t, ctx, u, kernel.DaemonOptions{})
	defer c.Close()
	l, err := u.Config()
	if err != nil {
		t.Fatal(err)
	}
	var st kernel.DaemonStatus
	if err := c.Call(ctx, kernel.MethodStatus, nil, &st); err != nil {
		t.Fatal(err)
	}
	if st.PID != os.Getpid() || st.Socket != sock || st.Home != l.Config.Home || st.Clients != 1 || st.IdleTimeout != "" {
		t.Errorf("status = %+v; want pid %d, socket %s, home %s, 1 client, no idle exit", st, os.Getpid(), sock, l.Config.Home)
	}

	second := testUser(t, dir, dir)
	second.Environ = u.Environ // the same runtime directory, so the same socket
	if err := runKernel(ctx, second, kernel.DaemonOptions{}); !errors.Is(err, ipc.ErrInUse) {
		t.Fatalf("second kernel: %v; want ipc.ErrInUse", err)
	}
	if err := c.Call(ctx, kernel.MethodStatus, nil, &st); err != nil {
		t.Fatalf("the first kernel after the second's attempt: %v", err)
	}

	if err := c.Call(ctx, kernel.MethodShutdown, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("kernel after shutdown: %v", err)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket outlives the kernel: %v", err)
	}
}

// startTestKernel runs the kernel daemon of u with opts until
// ctx ends and returns its socket, its result and a client of it.
func startTestKernel(t *testing.T, ctx context.Context, u *userenv.Env, opts kernel.DaemonOptions) (string, chan error, *ipc.Client) {
	t.Helper()
	l, err := u.Config()
	if err != nil {
		t.Fatal(err)
	}
	rd, _ := u.Getenv("XDG_RUNTIME_DIR")
	sock := ipc.SocketPath(rd, l.Config.Home)
	done := make(chan error, 1)
	go func() { done <- runKernel(ctx, u, opts) }()
	return sock, done, dialKernel(t, sock, done)
}

// dialKernel connects to the kernel starting at sock; done reports its
// end.
func dialKernel(t *testing.T, sock string, done <-chan error) *ipc.Client {
	t.Helper()
	for {
		c, err := ipc.Dial(t.Context(), sock, ipc.ClientOptions{Name: "test"})
		if err == nil {
			return c
		}
		select {
		case err := <-done:
			t.Fatalf("the kernel ended before serving: %v", err)
		case <-t.Context().Done():
			t.Fatalf("no kernel at %s: %v", sock, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestSessionToolsEnforceTheWorkspacesPolicy: a session's router enforces
// the policy of the session's workspace, not that of the directory the
// kernel was started in: a write B's project policy blocks is refused in
// a session over B, and the same write in a session over the kernel's
// own directory passes.
func TestSessionToolsEnforceTheWorkspacesPolicy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("change sets need root here")
	}
	dir := t.TempDir()
	kernelCwd, wsB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, ws := range []string{kernelCwd, wsB} {
		if err := os.MkdirAll(filepath.Join(ws, ".fluffy"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	block := "rules:\n  - id: no-notes\n    effect: block\n    message: not here\n    match:\n      action: write\n      path: notes.txt\n"
	if err := os.WriteFile(filepath.Join(wsB, ".fluffy", "policy.yaml"), []byte(block), 0o644); err != nil {
		t.Fatal(err)
	}
	u := testUser(t, dir, kernelCwd)
	log := u.Logger()
	al, j, m := sessionStores(t, dir)
	noSandbox := newSessionBoxes(log, func() resolved { return resolved{} })
	tools := sessionTools(u, log, nil, &livePolicy{u: u, log: log, audit: al}, nil, noSandbox, nil, memoryDeps{now: time.Now}, nil, nil, observe{})
	args, _ := json.Marshal(map[string]string{"path": "notes.txt", "content": "hello\n"})
	for _, tc := range []struct {
		ws      string
		blocked bool
	}{{wsB, true}, {kernelCwd, false}} {
		cs, err := changeset.Begin(t.Context(), tc.ws, filepath.Join(dir, "cs-"+filepath.Base(tc.ws)))
		if err != nil {
			t.Fatal(err)
		}
		id := "s-" + filepath.Base(tc.ws)
		// Explore: the state gate lets the write through to the policy.
		st, err := tdd.Resume(t.Context(), j, m, id, tdd.Explore)
		if err != nil {
			t.Fatal(err)
		}
		r, err := tools(t.Context(), kernel.Env{Session: id, Workspace: tc.ws, ChangeSet: cs, TDD: st, Audit: al})
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.Call(t.Context(), llm.ToolCall{ID: "c1", Name: "fs.write", Args: args})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(res.Decision, "rule no-notes"); got != tc.blocked || res.IsError != tc.blocked {
			t.Errorf("fs.write notes.txt in %s: %q (%s); want blocked %v by no-notes", filepath.Base(tc.ws), res.Content, res.Decision, tc.blocked)
		}
	}
}

// sessionStores opens, under dir, what a session's tools are built on:
// an audit log, the TDD journal in fluffy.db and a TDD machine; they are
// closed when the test ends.
func sessionStores(t testing.TB, dir string) (*audit.Log, *tdd.Journal, *tdd.Machine) {
	t.Helper()
	al, err := audit.Open(context.Background(), audit.Options{Path: filepath.Join(dir, "audit.db"), KeyDir: filepath.Join(dir, "keys")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	db, err := store.OpenMain(context.Background(), filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	j, err := tdd.NewJournal(tdd.JournalOptions{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	m, err := tdd.New(tdd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return al, j, m
}
