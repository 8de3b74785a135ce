package docker

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

func TestOwnerAlive(t *testing.T) {
	self, err := ownerLabel(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(os.Getpid())
	for _, c := range []struct {
		label string
		want  bool
	}{
		{self, true},
		{pid + ":1", false}, // same pid, another start time: reused
		{"999999999:1", false},
		{"", false},
		{"x:y", false},
		{"-1:5", false},
		{pid, false},
	} {
		if got := ownerAlive(c.label); got != c.want {
			t.Errorf("ownerAlive(%q) = %v, want %v", c.label, got, c.want)
		}
	}
}

func TestCgroupEvents(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "memory.oom_control"), []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "pids.events"), []byte("max 7\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "memory.events"), []byte("low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\n"), 0o644)
	v1 := cgroupPaths{memory: dir, pids: dir}
	if e := v1.events(); e.oomKills != 3 || e.pidsMax != 7 {
		t.Errorf("v1 events %+v", e)
	}
	v2 := cgroupPaths{memory: dir, pids: dir, v2: true}
	if e := v2.events(); e.oomKills != 2 || e.pidsMax != 7 {
		t.Errorf("v2 events %+v", e)
	}
	if e := (cgroupPaths{}).events(); e != (cgEvents{}) {
		t.Errorf("no cgroup: %+v", e)
	}
}

func TestCapped(t *testing.T) {
	var live bytes.Buffer
	c := &capped{max: 5, live: &live}
	for _, s := range []string{"abc", "defg", "hij"} {
		if n, err := c.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("write %q: %d %v", s, n, err)
		}
	}
	if got := string(c.bytes()); got != "abcde"+sandbox.TruncationMarker {
		t.Errorf("captured %q", got)
	}
	if live.String() != "abcde" || !c.cut {
		t.Errorf("live %q cut %v", live.String(), c.cut)
	}
	if b := (&capped{max: 5}).bytes(); b == nil || len(b) != 0 {
		t.Errorf("empty capture %v", b)
	}
}

// The build context is deterministic: same content, same hash, whatever
// the insertion order; any change changes it.
func TestTarDeterministic(t *testing.T) {
	build := func(order []int, data string) (string, []string) {
		tb := newTarBuilder()
		ops := []func(){
			func() { tb.file("Dockerfile", []byte("FROM scratch\n"), 0o644) },
			func() { tb.file("req.txt", []byte(data), 0o644) },
			func() { tb.symlink("link", "req.txt") },
			func() { tb.dir("sub") },
		}
		for _, i := range order {
			ops[i]()
		}
		b, sum, err := tb.finish()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		tr := tar.NewReader(bytes.NewReader(b))
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			if !h.ModTime.Equal(h.ModTime.Truncate(0)) || h.ModTime.Unix() != 0 || h.Uid != 0 {
				t.Errorf("%s: time %v uid %d", h.Name, h.ModTime, h.Uid)
			}
			names = append(names, h.Name)
		}
		return sum, names
	}
	a, names := build([]int{0, 1, 2, 3}, "a==1\n")
	b, _ := build([]int{3, 2, 1, 0}, "a==1\n")
	c, _ := build([]int{0, 1, 2, 3}, "a==2\n")
	if a != b {
		t.Errorf("order changed the hash: %s %s", a, b)
	}
	if a == c {
		t.Error("a changed file kept the hash")
	}
	want := []string{"Dockerfile", "link", "req.txt", "sub/"}
	if len(names) != len(want) {
		t.Fatalf("entries %v", names)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Errorf("entries %v, want %v", names, want)
		}
	}
}

func TestMountOverlayRefusals(t *testing.T) {
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	os.MkdirAll(ws, 0o755)
	for _, c := range []struct{ name, ws, cs string }{
		{"changeset inside workspace", ws, filepath.Join(ws, "cs")},
		{"workspace inside changeset", ws, base},
		{"comma in path", ws, filepath.Join(base, "a,b")},
		{"missing workspace", filepath.Join(base, "nope"), filepath.Join(base, "cs")},
	} {
		t.Run(c.name, func(t *testing.T) {
			ov, err := mountOverlay(filepath.Join(base, "state"), "1:2", c.ws, c.cs, overlayOptions{})
			if err == nil {
				ov.release()
				t.Fatal("mounted")
			}
		})
	}
}

// A read-only workspace is the change set over the workspace as two
// lower layers: whiteouts and opaque folders hide what they cover (the
// opaque mark read where the change set's writer kept it: userxattr for
// a native session's), nothing can be written, and no work directory is
// made beside the change set, which is never this mount's upper.
func TestMountOverlayReadOnly(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting an overlay needs root")
	}
	for _, c := range []struct {
		name, attr string
		userXattr  bool
	}{
		{"native change set", "user.overlay.opaque", true},
		{"container change set", "trusted.overlay.opaque", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			ws, cs := filepath.Join(base, "ws"), filepath.Join(base, "cs", "upper")
			for _, d := range []string{filepath.Join(ws, "sub"), filepath.Join(cs, "sub")} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for p, data := range map[string]string{"ws/sub/old": "old", "ws/gone": "gone", "ws/kept": "kept", "cs/upper/sub/new": "new"} {
				if err := os.WriteFile(filepath.Join(base, p), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := unix.Mknod(filepath.Join(cs, "gone"), unix.S_IFCHR, 0); err != nil {
				t.Fatal(err)
			}
			if err := unix.Lsetxattr(filepath.Join(cs, "sub"), c.attr, []byte("y"), 0); err != nil {
				t.Fatal(err)
			}
			ov, err := mountOverlay(filepath.Join(base, "state"), "1:2", ws, cs, overlayOptions{readOnly: true, userXattr: c.userXattr})
			if err != nil {
				t.Fatal(err)
			}
			defer ov.release()
			var names []string
			ents, err := os.ReadDir(filepath.Join(ov.merged, "sub"))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if len(names) != 1 || names[0] != "new" {
				t.Errorf("sub holds %v, want [new]: the opaque folder hides the workspace's", names)
			}
			if _, err := os.Lstat(filepath.Join(ov.merged, "gone")); !os.IsNotExist(err) {
				t.Errorf("gone: %v, want it hidden by its whiteout", err)
			}
			if b, err := os.ReadFile(filepath.Join(ov.merged, "kept")); err != nil || string(b) != "kept" {
				t.Errorf("kept: %q, %v", b, err)
			}
			if err := os.WriteFile(filepath.Join(ov.merged, "x"), nil, 0o644); !errors.Is(err, unix.EROFS) {
				t.Errorf("a write: %v, want EROFS", err)
			}
			if ov.work != "" {
				t.Errorf("work directory %s", ov.work)
			}
			if ents, _ := os.ReadDir(filepath.Dir(cs)); len(ents) != 1 {
				t.Errorf("beside the change set: %v", ents)
			}
		})
	}
}

// A mount left by a dead owner is released; a live owner's is kept.
func TestGCMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting an overlay needs root")
	}
	base := t.TempDir()
	state := filepath.Join(base, "state")
	ws := filepath.Join(base, "ws")
	os.MkdirAll(ws, 0o755)
	self, err := ownerLabel(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	live, err := mountOverlay(state, self, ws, filepath.Join(base, "cs1"), overlayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer live.release()
	dead, err := mountOverlay(state, "999999999:1", ws, filepath.Join(base, "cs2"), overlayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := gcMounts(state)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != dead.merged {
		t.Fatalf("gcMounts = %v, want [%s]", got, dead.merged)
	}
	if _, err := os.Stat(dead.merged); !os.IsNotExist(err) {
		t.Errorf("dead mount point still there: %v", err)
	}
	if _, err := os.Stat(dead.work); !os.IsNotExist(err) {
		t.Errorf("dead work dir still there: %v", err)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if !bytes.Contains(mi, []byte(live.merged)) || bytes.Contains(mi, []byte(dead.merged)) {
		t.Errorf("mount table: live mounted %v, dead mounted %v", bytes.Contains(mi, []byte(live.merged)), bytes.Contains(mi, []byte(dead.merged)))
	}
}

// TestStartEgressRefusesReusedPid: a pid whose start time is not the
// container init's (the container died and the pid was reused) is not
// entered: the proxy's port must never open in another process's network
// namespace.
func TestStartEgressRefusesReusedPid(t *testing.T) {
	self := os.Getpid()
	start, err := procStart(self)
	if err != nil {
		t.Fatal(err)
	}
	f, err := startEgress(self, start+"0", filepath.Join(t.TempDir(), "egress.sock"))
	if err == nil {
		f.stop()
		t.Fatal("startEgress entered the network namespace of a process that is not the container's init")
	}
	if !errors.Is(err, sandbox.ErrSetup) || !strings.Contains(err.Error(), "is gone") {
		t.Fatalf("error %v, want ErrSetup saying the init is gone", err)
	}
}
