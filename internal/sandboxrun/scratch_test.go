package sandboxrun

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// TestThrowawayChangeSet: a throw-away change set of the native runtime
// goes to memory when TMPDIR is unset or empty and /dev/shm is usable;
// a TMPDIR, or another runtime, keeps it on disk in the temporary
// directory.
func TestThrowawayChangeSet(t *testing.T) {
	tmp := t.TempDir()
	mem := memScratchUsable()
	cases := []struct {
		name, runtime string
		env           []string
		inMemory      bool
		under         string
	}{
		{"no TMPDIR", "native", []string{"PATH=/usr/bin"}, mem, ""},
		{"empty TMPDIR", "native", []string{"TMPDIR="}, mem, ""},
		{"TMPDIR", "native", []string{"TMPDIR=" + tmp}, false, tmp},
		{"docker", "docker", []string{"TMPDIR="}, false, os.TempDir()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, inMemory, err := throwawayChangeSet(&userenv.Env{Environ: c.env}, c.runtime)
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
			if inMemory != c.inMemory {
				t.Errorf("in memory %v, want %v (dir %s)", inMemory, c.inMemory, dir)
			}
			under := c.under
			if under == "" {
				under = os.TempDir()
				if mem {
					under = memScratch
				}
			}
			if filepath.Dir(dir) != under || !strings.HasPrefix(filepath.Base(dir), "fluffy-changeset-") {
				t.Errorf("dir %s, want a fluffy-changeset-* in %s", dir, under)
			}
			if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
				t.Errorf("dir %s: %v, mode %v: want private to this user", dir, err, st.Mode())
			}
		})
	}
}

// TestMemoryLimitMessage: a run killed at its memory limit says, when
// its throw-away change set was in memory and holds a real part of the
// limit, how much the workspace writes took and how to keep them on
// disk; otherwise (a plain memory hog, or a change set on disk) it does
// not.
func TestMemoryLimitMessage(t *testing.T) {
	for _, c := range []struct {
		name     string
		inMemory bool
		written  int // bytes in the change set
		hint     string
	}{
		{"in memory, 8MiB written", true, 8 << 20, "the 8MiB the command wrote to the workspace count against it"},
		{"in memory, 4KiB written", true, 4 << 10, ""},
		{"in memory, a sparse file", true, -(32 << 20), ""},
		{"on disk, 8MiB written", false, 8 << 20, ""},
	} {
		upper := filepath.Join(t.TempDir(), "upper")
		if err := os.MkdirAll(filepath.Join(upper, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(filepath.Join(upper, "sub", "out.bin"))
		if err != nil {
			t.Fatal(err)
		}
		if c.written > 0 {
			_, err = f.Write(make([]byte, c.written))
		} else {
			err = f.Truncate(int64(-c.written))
		}
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		r := &run{req: Request{Quiet: true}, tempCS: upper, tempInMemory: c.inMemory,
			spec: sandbox.Spec{Limits: sandbox.Limits{Memory: 64 << 20}}}
		res := sandbox.Result{Killed: sandbox.LimitMemory, ExitCode: -1, Signal: 9}
		o, err := r.result(context.Background(), res, nil)
		if err != nil || o.Reason != ReasonLimit || o.Code != ExitLimit {
			t.Fatalf("%s: outcome %+v, %v, want exit %d", c.name, o, err, ExitLimit)
		}
		hint := strings.Contains(o.Msg, "the throw-away change set is in memory") && strings.Contains(o.Msg, "--changeset DIR")
		if !strings.Contains(o.Msg, "memory limit (64MiB) was reached") || hint != (c.hint != "") || !strings.Contains(o.Msg, c.hint) {
			t.Errorf("%s: message %q", c.name, o.Msg)
		}
	}
}

// sweepScratch removes the throw-away change sets of processes that are
// gone, with what an overlay leaves in them (a work directory of mode
// 0), and keeps those of running ones and other names.
func TestSweepScratch(t *testing.T) {
	if !memScratchUsable() {
		t.Skipf("%s is not a usable tmpfs here", memScratch)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid
	mk := func(name string) string {
		d := filepath.Join(memScratch, name)
		if err := os.MkdirAll(filepath.Join(d, ".fluffy-work-1", "work"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(d, "upper", "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(d, ".fluffy-work-1", "work"), 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = removeScratch(d) })
		return d
	}
	gone := mk(fmt.Sprintf("fluffy-changeset-%d-123", dead))
	mine := mk(scratchPrefix() + "456")
	other := mk("fluffy-changeset-notapid-789")
	n, err := sweepScratch()
	if err != nil {
		t.Fatal(err)
	}
	if n < 1 {
		t.Errorf("removed %d", n)
	}
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Errorf("%s (pid %d is gone) was kept: %v", gone, dead, err)
	}
	for _, d := range []string{mine, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
}
