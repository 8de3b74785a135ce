package sandboxd

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const nobody = 65534

func fakeCore(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fluffy-core")
	if err := os.WriteFile(p, []byte("core"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSocketPathDirectory(t *testing.T) {
	core := fakeCore(t)
	uid := os.Geteuid()
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, runtime, tmp string) // may change runtime and tmp
		root    bool                                    // needs root (chown)
		wantDir func(runtime, tmp string) string        // "" with wantErr
		wantErr string
	}{
		{"runtime dir", nil, false, func(rt, _ string) string { return filepath.Join(rt, "fluffy") }, ""},
		{"runtime dir's fluffy exists", func(t *testing.T, rt, _ string) { os.Mkdir(filepath.Join(rt, "fluffy"), 0o700) }, false,
			func(rt, _ string) string { return filepath.Join(rt, "fluffy") }, ""},
		{"runtime dir of another user: /tmp", func(t *testing.T, rt, _ string) { os.Chown(rt, nobody, nobody) }, true,
			func(_, tmp string) string { return filepath.Join(tmp, "fluffy-"+strconv.Itoa(uid)) }, ""},
		{"runtime dir missing: /tmp", func(t *testing.T, rt, _ string) { os.Remove(rt) }, false,
			func(_, tmp string) string { return filepath.Join(tmp, "fluffy-"+strconv.Itoa(uid)) }, ""},
		{"fluffy a symlink", func(t *testing.T, rt, _ string) {
			os.Mkdir(filepath.Join(rt, "elsewhere"), 0o700)
			os.Symlink("elsewhere", filepath.Join(rt, "fluffy"))
		}, false, nil, "is a symlink"},
		{"fluffy a file", func(t *testing.T, rt, _ string) { os.WriteFile(filepath.Join(rt, "fluffy"), nil, 0o600) }, false, nil, "is not a directory"},
		{"fluffy open to others", func(t *testing.T, rt, _ string) {
			os.Mkdir(filepath.Join(rt, "fluffy"), 0o700)
			os.Chmod(filepath.Join(rt, "fluffy"), 0o755)
		}, false, nil, "mode 755): restrict it (chmod 700"},
		{"fluffy open to the group", func(t *testing.T, rt, _ string) {
			os.Mkdir(filepath.Join(rt, "fluffy"), 0o700)
			os.Chmod(filepath.Join(rt, "fluffy"), 0o710)
		}, false, nil, "open to group or others"},
		{"fluffy of another user", func(t *testing.T, rt, _ string) {
			os.Mkdir(filepath.Join(rt, "fluffy"), 0o700)
			os.Chown(filepath.Join(rt, "fluffy"), nobody, nobody)
		}, true, nil, "belongs to uid 65534"},
		{"tmp dir planted by another user", func(t *testing.T, rt, tmp string) {
			os.Remove(rt)
			d := filepath.Join(tmp, "fluffy-"+strconv.Itoa(uid))
			os.Mkdir(d, 0o700)
			os.Chown(d, nobody, nobody)
		}, true, nil, "belongs to uid 65534, not to you"},
		{"tmp dir a symlink to ours", func(t *testing.T, rt, tmp string) {
			os.Remove(rt)
			os.Mkdir(filepath.Join(tmp, "mine"), 0o700)
			os.Symlink(filepath.Join(tmp, "mine"), filepath.Join(tmp, "fluffy-"+strconv.Itoa(uid)))
		}, false, nil, "is a symlink: remove it (rm "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root && uid != 0 {
				t.Skip("needs root to chown")
			}
			base := shortDir(t)
			rt, tmp := filepath.Join(base, "run"), filepath.Join(base, "tmp")
			os.Mkdir(rt, 0o700)
			os.Mkdir(tmp, 0o1777)
			if tc.setup != nil {
				tc.setup(t, rt, tmp)
			}
			sock, err := socketPath(core, rt, tmp, uid)
			if tc.wantErr != "" {
				var de *DirError
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.As(err, &de) || !errors.Is(err, ErrUnsafeDir) {
					t.Fatalf("socketPath = %q, %v; want an ErrUnsafeDir mentioning %q", sock, err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), de.Path) || !strings.Contains(err.Error(), "FLUFFY_SANDBOX_SERVER=off") {
					t.Errorf("error %q does not name the path and the way out", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			dir := tc.wantDir(rt, tmp)
			if filepath.Dir(sock) != dir {
				t.Errorf("socket %s, want it in %s", sock, dir)
			}
			var st syscall.Stat_t
			if err := syscall.Lstat(dir, &st); err != nil || st.Mode&0o7777 != 0o700 || int(st.Uid) != uid {
				t.Errorf("%s: mode %o uid %d (%v), want 0700 and ours", dir, st.Mode&0o7777, st.Uid, err)
			}
		})
	}
}

// TestSocketPathCreatesPrivateDirUnderAnyUmask: a umask that takes the
// owner's bits does not leave an unusable directory.
func TestSocketPathCreatesPrivateDirUnderAnyUmask(t *testing.T) {
	core := fakeCore(t)
	old := syscall.Umask(0o277)
	defer syscall.Umask(old)
	base := shortDir(t)
	sock, err := socketPath(core, "", base, os.Geteuid())
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Dir(sock))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("mode %v (%v), want 0700", fi.Mode(), err)
	}
}

// TestSocketName: another binary, a rebuilt binary or another umask gets
// another socket; the same one gets the same.
func TestSocketName(t *testing.T) {
	core := fakeCore(t)
	name := func() string {
		t.Helper()
		n, err := socketName(core)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	first := name()
	if !strings.HasPrefix(first, "sandbox-") || !strings.HasSuffix(first, ".sock") {
		t.Errorf("name %q", first)
	}
	if again := name(); again != first {
		t.Errorf("same binary: %q then %q", first, again)
	}
	old := syscall.Umask(0o077)
	other := name()
	syscall.Umask(old)
	if other == first && old != 0o077 {
		t.Errorf("umask %o and 077 share a socket", old)
	}
	later := time.Now().Add(time.Hour)
	os.Chtimes(core, later, later)
	if rebuilt := name(); rebuilt == first {
		t.Error("a binary with another mtime keeps the socket")
	}
	if _, err := socketName(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing binary got a socket name")
	}
}

func TestSocketPathTooLong(t *testing.T) {
	core := fakeCore(t)
	base := shortDir(t)
	long := filepath.Join(base, strings.Repeat("d", 90))
	os.Mkdir(long, 0o1777)
	// A runtime dir too long for a socket is passed over for tmp...
	sock, err := socketPath(core, long, base, os.Geteuid())
	if err != nil || filepath.Dir(filepath.Dir(sock)) != base {
		t.Errorf("long runtime dir: %q, %v; want the socket under %s", sock, err, base)
	}
	// ... and a tmp too long is an error that says what to do.
	if _, err := socketPath(core, "", long, os.Geteuid()); err == nil || !strings.Contains(err.Error(), "shorter directory") {
		t.Errorf("long tmp: %v", err)
	}
}

func TestReadIdentity(t *testing.T) {
	old := syscall.Umask(0o027)
	id, err := readIdentity("/proc/self")
	syscall.Umask(old)
	if err != nil || id.Umask != "0027" {
		t.Fatalf("readIdentity = %+v, %v; want umask 0027", id, err)
	}
	for i, ns := range id.NS {
		if !strings.HasPrefix(ns, nsNames[i]+":[") {
			t.Errorf("namespace %s: %q", nsNames[i], ns)
		}
	}
	if g := strings.Fields(id.Gid); len(g) != 4 || g[1] != strconv.Itoa(os.Getegid()) {
		t.Errorf("gid %q, want %d", id.Gid, os.Getegid())
	}
	parent, err := readIdentity("/proc/" + strconv.Itoa(os.Getppid()))
	if err != nil {
		t.Fatal(err)
	}
	id.Umask = parent.Umask
	if d := id.diff(parent); d != "" {
		t.Errorf("this process and its parent differ in %s", d)
	}
	other := id
	other.NS[1] = "mnt:[1]"
	other.NNP = "1"
	if d := id.diff(other); d != "no_new_privs, mnt namespace" {
		t.Errorf("diff = %q, want no_new_privs, mnt namespace", d)
	}
	// Each compared field, changed alone, is named and changes the key.
	for _, tc := range []struct {
		name   string
		change func(*identity)
	}{
		{"user ids", func(i *identity) { i.Uid += "1" }},
		{"permitted capabilities", func(i *identity) { i.CapPrm = "0" }},
		{"inheritable capabilities", func(i *identity) { i.CapInh = "1" }},
		{"ambient capabilities", func(i *identity) { i.CapAmb = "1" }},
		{"seccomp filters", func(i *identity) { i.Filters += "1" }},
		{"resource limits", func(i *identity) { i.Limits += "x" }},
		{"cgroups", func(i *identity) { i.Cgroup = "0::/other" }},
		{"time namespace", func(i *identity) { i.NS[len(nsNames)-1] = "time:[1]" }},
	} {
		o := id
		tc.change(&o)
		if d := id.diff(o); d != tc.name {
			t.Errorf("%s changed: diff = %q", tc.name, d)
		}
		if o.key() == id.key() {
			t.Errorf("%s changed: same socket key", tc.name)
		}
	}
	if _, err := readIdentity("/proc/does-not-exist"); err == nil {
		t.Error("identity of no process")
	}
}

func TestServerEnv(t *testing.T) {
	got := ServerEnv([]string{"PATH=/bin", "OPENAI_API_KEY=sk-1", "HOME=/root", "AWS_SECRET_ACCESS_KEY=x", "XDG_RUNTIME_DIR=/run/user/0", "PATHX=1", "noequals", "TMPDIR=/t", "USER=u", "LOGNAME=u"})
	want := "PATH=/bin HOME=/root XDG_RUNTIME_DIR=/run/user/0 TMPDIR=/t USER=u LOGNAME=u"
	if strings.Join(got, " ") != want {
		t.Errorf("ServerEnv = %q, want %q", got, want)
	}
}

func TestForwardable(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"sandbox", "run", "--", "/bin/true"}, true},
		{[]string{"sandbox", "run", "--help"}, true},
		{[]string{"--home", "/h", "--debug", "sandbox", "run", "true"}, true},
		{[]string{"--debug=true", "sandbox", "run", "true"}, true},
		{[]string{"--set=sandbox.memory=1G", "--config", "c.yaml", "--log-level=warn", "sandbox", "run", "true"}, true},
		{[]string{"--set", "a=b", "--home=/x", "--config=c", "--log-level", "debug", "sandbox", "run"}, true},
		{[]string{"version"}, false}, // the front answers version itself, the server never
		{nil, false},                 // interactive session
		{[]string{"fix the tests"}, false},
		{[]string{"sandbox"}, false},
		{[]string{"sandbox", "serve", "--socket", "s"}, false},
		{[]string{"sandbox", "diff", "--changeset", "d"}, false},
		{[]string{"sandbox", "gc"}, false},
		{[]string{"--help"}, false},
		{[]string{"-h", "sandbox", "run"}, false},
		{[]string{"--runtime", "docker", "sandbox", "run"}, false}, // not a global flag
		{[]string{"session", "ls"}, false},
		{[]string{"--home", "sandbox", "run"}, false}, // "sandbox" is --home's value
		{[]string{"run", "sandbox"}, false},
		{[]string{"kernel", "version"}, false},
		{[]string{"--home"}, false},
	} {
		if got := Forwardable(tc.args); got != tc.want {
			t.Errorf("Forwardable(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// BenchmarkSocketPath is the client's cost of finding its socket (stat of
// the binary, its own identity from /proc, the directory checks).
func BenchmarkSocketPath(b *testing.B) {
	core, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	tmp := shortDir(b)
	for b.Loop() {
		if _, err := socketPath(core, "", tmp, os.Geteuid()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadIdentity(b *testing.B) {
	for b.Loop() {
		if _, err := readIdentity("/proc/self"); err != nil {
			b.Fatal(err)
		}
	}
}
