package wiring

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/sandbox/native"
	"github.com/fluffy-agent/fluffy/internal/sandboxrun"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// The sandbox server builds each run's successor ahead (Host.prepareNext) on
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
	env := []string{"HOME=" + dir, "XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "FLUFFY_HOME=" + filepath.Join(dir, "data")}
	core := New()
	host := core.NewSandboxHost(&userenv.Env{Environ: env, Cwd: ws, Self: "/nonexistent"})
	closed := false
	defer func() {
		if !closed {
			host.Close()
		}
	}()
	var dirs []string
	for i := range 4 {
		out, errF := tempFile(t), tempFile(t)
		early := false
		req := sandboxrun.Request{User: &userenv.Env{Environ: env, Cwd: ws, Self: "/nonexistent"},
			Argv: []string{"sh", "-c", `cat f.txt; echo "run $N" > f.txt; echo "$N" >&2; ls -a`}, Env: []string{"N=" + strconv.Itoa(i)},
			Stdin: strings.NewReader(""), Stdout: out, Stderr: errF, Host: host,
			Early: func(sandboxrun.Outcome, error) { early = true }}
		got, err := core.RunSandbox(context.Background(), req)
		if err != nil || got.Code != 0 || !early {
			b, _ := os.ReadFile(errF.Name())
			t.Fatalf("run %d: outcome %+v, %v (answered early: %v); stderr %s", i, got, err, early, b)
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
		notes := strings.Join(got.Notes, "\n")
		discarded := strings.Contains(notes, "1 change(s) to the workspace were discarded") ||
			strings.Contains(notes, "the changes to the workspace were discarded (the throw-away change set was in memory)")
		if string(e) != strconv.Itoa(i)+"\n" || !discarded {
			t.Errorf("run %d: stderr %q, notes %q", i, e, got.Notes)
		}
		// The one made ahead for the next run (this run's is gone).
		if next := scratchDirs(t); len(next) == 1 {
			dirs = append(dirs, next[0])
		} else {
			t.Errorf("run %d: throw-away change sets %v, want the next run's", i, next)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "f.txt")); string(b) != "base\n" {
		t.Errorf("the workspace changed: %q", b)
	}
	rt, err := host.Runtime(false)
	if err != nil {
		t.Fatal(err)
	}
	if sr, ok := rt.(slotRuntime); ok {
		rt = sr.AheadRuntime // sched.sandboxes' host slots (the default 2)
	}
	used, _ := rt.(*native.Runtime).AheadStats()
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

// scratchDirs lists this process's throw-away change sets.
func scratchDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	for _, parent := range []string{"/dev/shm", os.TempDir()} {
		m, err := filepath.Glob(filepath.Join(parent, "fluffy-changeset-"+strconv.Itoa(os.Getpid())+"-*"))
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, m...)
	}
	return dirs
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
