package cli

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/sandboxd"
)

// The sandbox server builds each run's successor ahead (prepareNext) on
// a throw-away change set of its own: the next run like it takes both,
// runs correctly (its own command, environment, output, writes in its
// own change set, discarded), and closing the server removes what the
// last one left: the change set made ahead, its sandbox.
func TestServeAhead(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CI runs as root)")
	}
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "f.txt"), []byte("base\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	host := NewSandboxHost(SandboxHostOptions{Self: "/nonexistent"})
	closed := false
	defer func() {
		if !closed {
			host.Close()
		}
	}()
	var dirs []string
	for i := range 4 {
		out, errF := tempFile(t), tempFile(t)
		in := &sandboxd.Incoming{
			Request: sandboxd.Request{Args: []string{"sandbox", "run", "--env", "N=" + strconv.Itoa(i), "--", "sh", "-c", `cat f.txt; echo "run $N" > f.txt; echo "$N" >&2; ls -a`},
				Cwd:     ws,
				Environ: []string{"HOME=" + dir, "XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "FLUFFY_HOME=" + filepath.Join(dir, "data")}},
			Stdin: strings.NewReader(""), Stdout: out, Stderr: errF,
		}
		if got := serveCall(context.Background(), "/nonexistent", host, in); got.Code != 0 || got.HandOver {
			b, _ := os.ReadFile(errF.Name())
			t.Fatalf("run %d: reply %+v; stderr %s", i, got, b)
		}
		o, _ := os.ReadFile(out.Name())
		e, _ := os.ReadFile(errF.Name())
		// Each run sees the workspace as it is: the earlier runs'
		// writes went to their own change sets, discarded.
		if !strings.HasPrefix(string(o), "base\n") || !strings.Contains(string(o), "f.txt") {
			t.Errorf("run %d: stdout %q", i, o)
		}
		// (A change set in memory is kept inside the sandbox, where
		// fluffy sees only that it was written to.)
		discarded := strings.Contains(string(e), "1 change(s) to the workspace were discarded") ||
			strings.Contains(string(e), "the changes to the workspace were discarded (the throw-away change set was in memory)")
		if !strings.HasPrefix(string(e), strconv.Itoa(i)+"\n") || !discarded {
			t.Errorf("run %d: stderr %q", i, e)
		}
		host.nextMu.Lock()
		if host.next != nil {
			dirs = append(dirs, host.next.dir)
		}
		host.nextMu.Unlock()
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "f.txt")); string(b) != "base\n" {
		t.Errorf("the workspace changed: %q", b)
	}
	rt, err := host.runtime(false)
	if err != nil {
		t.Fatal(err)
	}
	used, _ := rt.AheadStats()
	if used < 3 {
		t.Errorf("%d of the runs after the first took a sandbox built ahead, want 3", used)
	}
	if len(dirs) != 4 {
		t.Fatalf("change sets made ahead: %v, want one after each run", dirs)
	}
	if err := host.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	// Every change set is gone: those the runs took (each run removes
	// its own) and the last one made ahead (the close).
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s left behind (%v)", d, err)
		}
	}
}

func tempFile(t *testing.T) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// releaseAudits (SIGUSR1 from a process waiting for the writer lock)
// closes a shared log no command holds, and never one a command is
// writing: its exec.end must not wait for the lock it just gave away.
func TestReleaseAudits(t *testing.T) {
	dir := t.TempDir()
	host := NewSandboxHost(SandboxHostOptions{Self: "/nonexistent", AuditIdle: time.Hour})
	defer host.Close()
	s := audit.NewShared(func(ctx context.Context) (*audit.Log, error) {
		return audit.Open(ctx, audit.Options{Path: filepath.Join(dir, "audit.db"), KeyDir: filepath.Join(dir, "keys")})
	}, time.Hour, nil)
	host.audits["x"] = s
	ctx := context.Background()
	cmd := &hostAudit{Shared: s}
	s.Hold()
	if _, err := cmd.Append(ctx, audit.Entry{Kind: audit.KindExecStart, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	host.releaseAudits()
	if !s.IsOpen() {
		t.Fatal("the log was closed while a command held it")
	}
	if _, err := cmd.Append(ctx, audit.Entry{Kind: audit.KindExecEnd, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Close(); err != nil { // a second Close counts once
		t.Fatal(err)
	}
	if s.Held() {
		t.Fatal("held after the command's close")
	}
	host.releaseAudits()
	if s.IsOpen() {
		t.Fatal("the log stayed open with no command holding it")
	}
	// The writer lock is free: another writer gets it at once.
	l, err := audit.Open(ctx, audit.Options{Path: filepath.Join(dir, "audit.db"), KeyDir: filepath.Join(dir, "keys")})
	if err != nil {
		t.Fatalf("after the release: %v", err)
	}
	l.Close()
}
