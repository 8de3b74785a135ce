package changeset

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

var update = flag.Bool("update", false, "rewrite golden files")

// tree describes a directory: rel path -> "file 0644 content",
// "dir 0755", "link target". Whiteouts and opaque markers do not appear:
// it is what a program sees.
type tree map[string]string

func snap(t testing.TB, root string) tree {
	t.Helper()
	out := tree{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			tgt, _ := os.Readlink(p)
			out[rel] = "link " + tgt
		case fi.IsDir():
			out[rel] = fmt.Sprintf("dir %04o", fi.Mode().Perm())
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			out[rel] = fmt.Sprintf("file %04o %s", fi.Mode().Perm(), b)
		default:
			out[rel] = "other " + fi.Mode().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// snapView walks the change set's merged view the same way.
func snapView(t testing.TB, cs *ChangeSet) tree {
	t.Helper()
	out := tree{}
	var walk func(rel string)
	walk = func(rel string) {
		ents, err := cs.ReadDir(rel)
		if err != nil {
			t.Fatalf("ReadDir(%s): %v", rel, err)
		}
		for _, e := range ents {
			switch e.Kind {
			case KindSymlink:
				out[e.Path] = "link " + e.Target
			case KindDir:
				out[e.Path] = fmt.Sprintf("dir %04o", e.Mode.Perm())
				walk(e.Path)
			case KindFile:
				b, err := cs.ReadFile(e.Path)
				if err != nil {
					t.Fatalf("ReadFile(%s): %v", e.Path, err)
				}
				out[e.Path] = fmt.Sprintf("file %04o %s", e.Mode.Perm(), b)
			default:
				out[e.Path] = "other"
			}
		}
	}
	walk(".")
	return out
}

// build creates files from a tree description.
func build(t testing.TB, root string, tr tree) {
	t.Helper()
	keys := make([]string, 0, len(tr))
	for k := range tr {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p := filepath.Join(root, k)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		f := strings.SplitN(tr[k], " ", 3)
		var mode uint32
		if len(f) > 1 {
			fmt.Sscanf(f[1], "%o", &mode)
		}
		var err error
		switch f[0] {
		case "dir":
			if err = os.MkdirAll(p, 0o755); err == nil {
				err = os.Chmod(p, fs.FileMode(mode))
			}
		case "file":
			if err = os.WriteFile(p, []byte(f[2]), 0o600); err == nil {
				err = os.Chmod(p, fs.FileMode(mode))
			}
		case "link":
			err = os.Symlink(strings.TrimPrefix(tr[k], "link "), p)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("overlay mounts and whiteouts need root")
	}
}

// mountOverlay mounts cs over its workspace and returns the merged dir;
// the mount goes away at cleanup (or earlier with the returned func).
func mountOverlay(t *testing.T, cs *ChangeSet) (string, func()) {
	t.Helper()
	return mountOverlayWith(t, cs, ",redirect_dir=off,metacopy=off")
}

// mountOverlayWith is mountOverlay with other mount options after the
// layers: ",userxattr" mounts as a native sandbox does.
func mountOverlayWith(t *testing.T, cs *ChangeSet, more string) (string, func()) {
	t.Helper()
	requireRoot(t)
	privateMountNS(t)
	merged := filepath.Join(t.TempDir(), "merged")
	if err := os.Mkdir(merged, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", cs.Workspace(), cs.UpperDir(), cs.WorkDir()) + more
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Fatalf("mount overlay: %v", err)
	}
	done := false
	umount := func() {
		if !done {
			done = true
			if err := unix.Unmount(merged, 0); err != nil {
				t.Errorf("umount: %v", err)
			}
		}
	}
	t.Cleanup(umount)
	return merged, umount
}

// privateMountNS moves the calling goroutine's thread into a mount
// namespace of its own, so that test mounts never appear in (or
// disturb) the host's mount table, which other packages' tests watch for
// leaks. The thread stays locked: it, and the namespace with every mount
// left in it, end with the test's goroutine. Subprocesses started from
// this goroutine inherit the namespace.
func privateMountNS(t *testing.T) {
	t.Helper()
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		t.Fatalf("unshare the mount namespace: %v", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Fatalf("make mounts private: %v", err)
	}
}

func sh(t *testing.T, dir, script string) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-ec", script)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
}

var baseTree = tree{
	"a.txt":                 "file 0644 alpha\n",
	"b.txt":                 "file 0644 bravo\n",
	"exec.sh":               "file 0755 #!/bin/sh\necho hi\n",
	"link":                  "link a.txt",
	"dir":                   "dir 0755",
	"dir/c.txt":             "file 0644 charlie\n",
	"dir/sub/d.txt":         "file 0644 delta\n",
	"opq":                   "dir 0755",
	"opq/keep.txt":          "file 0644 keep\n",
	"opq/gone.txt":          "file 0644 gone\n",
	"same.txt":              "file 0644 same\n",
	"many/1.txt":            "file 0644 one\n",
	"many/2.txt":            "file 0644 two\n",
	"replace-by-file":       "dir 0755",
	"replace-by-file/x.txt": "file 0644 x\n",
	"dir2link":              "dir 0755",
	"dir2link/inner.txt":    "file 0644 inner\n",
	"link2dir":              "link dir",
}

func begin(t *testing.T, tr tree) *ChangeSet {
	t.Helper()
	ws := filepath.Join(t.TempDir(), "ws")
	build(t, ws, tr)
	if err := os.Chmod(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	cs, err := Begin(t.Context(), ws, filepath.Join(t.TempDir(), "cs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(cs.UpperDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestOverlayRoundTrip writes through a real overlay mount with ordinary
// tools, then checks the package reads, lists, diffs and applies exactly
// what overlayfs produced.
func TestOverlayRoundTrip(t *testing.T) {
	cs := begin(t, baseTree)
	merged, umount := mountOverlay(t, cs)
	sh(t, merged, `
printf 'alpha\nALPHA\n' > a.txt
rm b.txt
rm -r dir/sub
chmod 0644 exec.sh
mkdir -p new/deep && printf 'echo\n' > new/deep/e.txt
rm dir/c.txt && mkdir dir/c.txt && printf 'inner\n' > dir/c.txt/f
rm -r opq && mkdir opq && printf 'keep2\n' > opq/keep.txt
printf 'same\n' > same.txt
printf '\000\001bin' > bin.dat
rm link && ln -s b.txt link
rm -r replace-by-file && printf 'now a file\n' > replace-by-file
touch many/1.txt
rm -r dir2link && ln -s exec.sh dir2link
rm link2dir && mkdir link2dir && printf 'was a link\n' > link2dir/f
`)
	want := snap(t, merged)
	umount()

	if got := snapView(t, cs); !cmp.Equal(want, got) {
		t.Fatalf("merged view differs from overlayfs (-overlay +changeset):\n%s", cmp.Diff(want, got))
	}
	ctx := t.Context()
	changes, err := cs.Changes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, c := range changes {
		lines = append(lines, fmt.Sprintf("%-8s %-7s %s", c.Op, c.Kind, c.Path))
	}
	golden(t, "overlay.changes", strings.Join(lines, "\n")+"\n")
	d, err := cs.Diff(ctx)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "overlay.diff", d)
	checkGitApply(t, cs, want)

	applied, err := cs.Apply(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != len(changes) {
		t.Errorf("applied %d changes, listed %d", len(applied), len(changes))
	}
	if got := snap(t, cs.Workspace()); !cmp.Equal(want, got) {
		t.Fatalf("real tree after apply differs from overlay view (-overlay +real):\n%s", cmp.Diff(want, got))
	}
	if left, err := cs.Changes(ctx); err != nil || len(left) != 0 {
		t.Fatalf("changes after apply: %v %v", left, err)
	}
	// The cleaned-up upper still gives the same view through overlayfs.
	merged2, _ := mountOverlay(t, cs)
	if got := snap(t, merged2); !cmp.Equal(want, got) {
		t.Fatalf("overlay view after apply (-want +got):\n%s", cmp.Diff(want, got))
	}
}

// checkGitApply applies the text diff (all but the binary file) with git
// to a copy of the workspace: the result must be the overlay's view. This
// proves the diff is what it claims to be, in git's own format.
func checkGitApply(t *testing.T, cs *ChangeSet, want tree) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	paths := []string{"a.txt", "b.txt", "dir", "dir2link", "exec.sh", "link", "link2dir", "many", "new", "opq", "replace-by-file", "same.txt"}
	d, err := cs.Diff(t.Context(), paths...)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "copy")
	sh(t, "/", "cp -a "+cs.Workspace()+" "+cp)
	patch := filepath.Join(t.TempDir(), "p.diff")
	must(t, os.WriteFile(patch, []byte(d), 0o644))
	sh(t, cp, "git apply --whitespace=nowarn "+patch)
	w := tree{}
	for k, v := range want {
		if k != "bin.dat" {
			w[k] = v
		}
	}
	if got := snap(t, cp); !cmp.Equal(w, got) {
		t.Fatalf("git apply of the diff gives another tree (-overlay +git):\n%s", cmp.Diff(w, got))
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", name, d)
	}
}

// TestKernelWritesMatchOverlay makes changes from the kernel side, then
// mounts the upper and checks overlayfs shows the same view: mounted as a
// container's workspace is (the trusted.overlay.* xattrs) and as a native
// sandbox's is (userxattr: user.overlay.*).
func TestKernelWritesMatchOverlay(t *testing.T) {
	requireRoot(t)
	cs := begin(t, baseTree)
	steps := []struct {
		name string
		do   func() error
	}{
		{"modify", func() error { return cs.WriteFile("a.txt", []byte("new alpha\n"), 0) }},
		{"create deep", func() error { return cs.WriteFile("x/y/z.txt", []byte("z\n"), 0o600) }},
		{"write in lower dir", func() error { return cs.WriteFile("dir/sub/e.txt", []byte("e\n"), 0) }},
		{"delete lower file", func() error { return cs.Remove("b.txt", false) }},
		{"delete lower dir", func() error { return cs.Remove("opq", true) }},
		{"recreate deleted dir", func() error { return cs.WriteFile("opq/fresh.txt", []byte("fresh\n"), 0) }},
		{"delete upper-only file", func() error { return cs.Remove("x/y/z.txt", false) }},
		{"delete then recreate file", func() error {
			if err := cs.Remove("same.txt", false); err != nil {
				return err
			}
			return cs.WriteFile("same.txt", []byte("again\n"), 0)
		}},
		{"delete symlink", func() error { return cs.Remove("link", false) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	// Refusals.
	if err := cs.Remove("dir", false); err == nil {
		t.Error("Remove of a non-empty dir without recursive succeeded")
	}
	if err := cs.WriteFile("dir", []byte("x"), 0); err == nil {
		t.Error("WriteFile over a directory succeeded")
	}
	if err := cs.WriteFile("a.txt/x", []byte("x"), 0); !errors.Is(err, ErrNotDir) {
		t.Errorf("WriteFile below a file: %v, want ErrNotDir", err)
	}
	view := snapView(t, cs)
	for _, more := range []string{",redirect_dir=off,metacopy=off", ",userxattr"} {
		merged, umount := mountOverlayWith(t, cs, more)
		if got := snap(t, merged); !cmp.Equal(view, got) {
			t.Fatalf("overlayfs%s shows something else than the change set (-changeset +overlay):\n%s", more, cmp.Diff(view, got))
		}
		umount()
	}
	for p, want := range map[string]string{"a.txt": "file 0644 new alpha\n", "opq/fresh.txt": "file 0644 fresh\n", "same.txt": "file 0644 again\n"} {
		if view[p] != want {
			t.Errorf("%s = %q, want %q", p, view[p], want)
		}
	}
	for _, p := range []string{"b.txt", "opq/keep.txt", "link", "x/y/z.txt"} {
		if _, ok := view[p]; ok {
			t.Errorf("%s still visible", p)
		}
	}
}

func TestCheckPath(t *testing.T) {
	for _, p := range []string{"../x", "a/../b", "/etc/passwd", "a//b", "a/./b", "a\x00b", "..", "a/.."} {
		if _, err := CheckPath(p); !errors.Is(err, ErrBadPath) {
			t.Errorf("CheckPath(%q) = %v, want ErrBadPath", p, err)
		}
	}
	for p, want := range map[string]string{"": ".", ".": ".", "a": "a", "a/b/": "a/b", "..a": "..a", "a/..b": "a/..b"} {
		if got, err := CheckPath(p); err != nil || got != want {
			t.Errorf("CheckPath(%q) = %q, %v; want %q", p, got, err, want)
		}
	}
}

// TestAdversarialUpper plants hostile entries directly in the upper
// directory, as a sandboxed process could.
func TestAdversarialUpper(t *testing.T) {
	requireRoot(t)
	ctx := t.Context()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("top secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cs := begin(t, baseTree)
	up := cs.UpperDir()
	before := snap(t, cs.Workspace())

	t.Run("read through symlinks is refused", func(t *testing.T) {
		if err := os.Symlink(outside, filepath.Join(up, "esc")); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(filepath.Join(up, "esc"))
		if _, err := cs.ReadFile("esc/secret"); !errors.Is(err, ErrSymlink) {
			t.Errorf("ReadFile(esc/secret) = %v, want ErrSymlink", err)
		}
		if _, err := cs.ReadFile("esc"); !errors.Is(err, ErrSymlink) {
			t.Errorf("ReadFile(esc) = %v, want ErrSymlink", err)
		}
		if err := cs.WriteFile("esc/planted", []byte("x"), 0); !errors.Is(err, ErrSymlink) {
			t.Errorf("WriteFile(esc/planted) = %v, want ErrSymlink", err)
		}
		if _, err := os.Stat(filepath.Join(outside, "planted")); err == nil {
			t.Error("a write went through the symlink")
		}
	})
	t.Run("dotdot paths are refused", func(t *testing.T) {
		rel, _ := filepath.Rel(cs.Workspace(), filepath.Join(outside, "secret"))
		for _, p := range []string{rel, "../secret", "/etc/passwd", "a.txt\x00"} {
			if _, err := cs.ReadFile(p); !errors.Is(err, ErrBadPath) {
				t.Errorf("ReadFile(%q) = %v, want ErrBadPath", p, err)
			}
			if err := cs.WriteFile(p, []byte("x"), 0); !errors.Is(err, ErrBadPath) {
				t.Errorf("WriteFile(%q) = %v, want ErrBadPath", p, err)
			}
			if _, err := cs.Diff(ctx, p); !errors.Is(err, ErrBadPath) {
				t.Errorf("Diff(%q) = %v, want ErrBadPath", p, err)
			}
			if _, err := cs.Apply(ctx, p); !errors.Is(err, ErrBadPath) {
				t.Errorf("Apply(%q) = %v, want ErrBadPath", p, err)
			}
		}
	})
	t.Run("escaping symlinks are not applied", func(t *testing.T) {
		for name, target := range map[string]string{"abs": "/etc/passwd", "rel": "../../../../etc/passwd", "dir/sneaky": "../../x"} {
			p := filepath.Join(up, name)
			_ = os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			_, err := cs.Apply(ctx)
			if !errors.Is(err, ErrEscape) {
				t.Errorf("Apply with %s -> %s = %v, want ErrEscape", name, target, err)
			}
			os.Remove(p)
			if got := snap(t, cs.Workspace()); !cmp.Equal(before, got) {
				t.Fatalf("tree changed:\n%s", cmp.Diff(before, got))
			}
		}
		os.Remove(filepath.Join(up, "dir"))
	})
	t.Run("whiteout for a path the workspace lacks", func(t *testing.T) {
		if err := unix.Mknod(filepath.Join(up, "ghost"), unix.S_IFCHR, 0); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(filepath.Join(up, "ghost"))
		ch, err := cs.Changes(ctx)
		if err != nil || len(ch) != 0 {
			t.Errorf("Changes = %v, %v; want none", ch, err)
		}
		if _, err := cs.Stat("ghost"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Stat(ghost) = %v", err)
		}
	})
	t.Run("devices and fifos are not applied", func(t *testing.T) {
		p := filepath.Join(up, "fifo")
		if err := unix.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(p)
		if _, err := cs.Apply(ctx); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Apply with a fifo = %v, want ErrUnsupported", err)
		}
	})
	t.Run("setuid files are not applied", func(t *testing.T) {
		p := filepath.Join(up, "suid")
		must(t, os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755))
		must(t, os.Chmod(p, 0o755|fs.ModeSetuid))
		defer os.Remove(p)
		if _, err := cs.Apply(ctx); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Apply with a setuid file = %v, want ErrUnsupported", err)
		}
	})
	t.Run("redirect xattr is refused", func(t *testing.T) {
		p := filepath.Join(up, "dir")
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(p)
		if err := unix.Setxattr(p, "trusted.overlay.redirect", []byte("/opq"), 0); err != nil {
			t.Skipf("setxattr: %v", err)
		}
		if _, err := cs.Changes(ctx); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Changes with a redirect = %v, want ErrUnsupported", err)
		}
	})
	if got := snap(t, cs.Workspace()); !cmp.Equal(before, got) {
		t.Fatalf("tree changed:\n%s", cmp.Diff(before, got))
	}
	t.Run("a workspace symlink to outside is replaced, never written through", func(t *testing.T) {
		ws := cs.Workspace()
		must(t, os.Symlink(outside, filepath.Join(ws, "etcl")))
		cs2, err := Begin(ctx, ws, filepath.Join(t.TempDir(), "cs2"))
		must(t, err)
		// A sandbox (or anyone with the upper) puts a directory there.
		must(t, os.MkdirAll(filepath.Join(cs2.UpperDir(), "etcl"), 0o755))
		must(t, os.WriteFile(filepath.Join(cs2.UpperDir(), "etcl", "secret"), []byte("overwritten\n"), 0o644))
		outBefore := snap(t, outside)
		if _, err := cs2.Apply(ctx); err != nil {
			t.Fatal(err)
		}
		if got := snap(t, outside); !cmp.Equal(outBefore, got) {
			t.Fatalf("apply wrote outside the workspace:\n%s", cmp.Diff(outBefore, got))
		}
		if fi, err := os.Lstat(filepath.Join(ws, "etcl")); err != nil || !fi.IsDir() {
			t.Fatalf("etcl is not a real directory now: %v %v", fi, err)
		}
	})
}

func TestApplyConflicts(t *testing.T) {
	requireRoot(t)
	ctx := t.Context()
	cs := begin(t, baseTree)
	must(t, cs.WriteFile("a.txt", []byte("mine\n"), 0))
	must(t, cs.WriteFile("fresh.txt", []byte("new\n"), 0))
	must(t, cs.Remove("dir", true))
	must(t, cs.WriteFile("many/1.txt", []byte("one!\n"), 0))
	ws := cs.Workspace()
	// The user edits the real tree meanwhile.
	must(t, os.WriteFile(filepath.Join(ws, "a.txt"), []byte("theirs\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(ws, "fresh.txt"), []byte("also new\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(ws, "dir/sub/new.txt"), []byte("keep me\n"), 0o644))
	// A touch without a content change is not a conflict.
	must(t, os.Chtimes(filepath.Join(ws, "many/1.txt"), unixEpoch, unixEpoch))
	before := snap(t, ws)
	_, err := cs.Apply(ctx)
	var ce *ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("Apply = %v, want *ConflictError", err)
	}
	got := map[string]string{}
	for _, c := range ce.Conflicts {
		got[c.Path] = c.Reason
	}
	want := map[string]string{
		"a.txt":           "content changed",
		"fresh.txt":       "created in the workspace since the change set began",
		"dir/sub/new.txt": "created in the workspace since the change set began",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("conflicts (-want +got):\n%s", d)
	}
	if after := snap(t, ws); !cmp.Equal(before, after) {
		t.Fatalf("a refused apply changed the tree:\n%s", cmp.Diff(before, after))
	}
	// Applying only the unconflicted file works.
	if _, err := cs.Apply(ctx, "many/1.txt"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "many/1.txt")); string(b) != "one!\n" {
		t.Errorf("many/1.txt = %q", b)
	}
}

var unixEpoch = time.Unix(1_000_000_000, 0)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// failFS fails the n-th mutating call.
type failFS struct {
	applyFS
	n, calls int
	crash    bool // stop as a crash would: no rollback
}

var errInjected = errors.New("injected failure")

func (f *failFS) hit() error {
	f.calls++
	if f.calls == f.n {
		if f.crash {
			return errCrash
		}
		return errInjected
	}
	return nil
}
func (f *failFS) WriteTemp(rel string, r io.Reader, perm uint32) error {
	if err := f.hit(); err != nil {
		return err
	}
	return f.applyFS.WriteTemp(rel, r, perm)
}
func (f *failFS) Sync() error {
	if err := f.hit(); err != nil {
		return err
	}
	return f.applyFS.Sync()
}
func (f *failFS) Symlink(target, rel string) error {
	if err := f.hit(); err != nil {
		return err
	}
	return f.applyFS.Symlink(target, rel)
}
func (f *failFS) Link(a, b string) error {
	if err := f.hit(); err != nil {
		return err
	}
	return f.applyFS.Link(a, b)
}
func (f *failFS) Rename(a, b string) error {
	if err := f.hit(); err != nil {
		return err
	}
	return f.applyFS.Rename(a, b)
}
func (f *failFS) Mkdir(rel string, perm uint32) error {
	if err := f.hit(); err != nil {
		return err
	}
	return f.applyFS.Mkdir(rel, perm)
}
func (f *failFS) Chmod(rel string, perm uint32) error {
	if err := f.hit(); err != nil {
		return err
	}
	return f.applyFS.Chmod(rel, perm)
}

// TestApplyInterrupted fails every mutating step of an apply in turn and
// checks the tree is exactly as before each time.
func TestApplyInterrupted(t *testing.T) {
	requireRoot(t)
	ctx := t.Context()
	mk := func() *ChangeSet {
		cs := begin(t, baseTree)
		must(t, cs.WriteFile("a.txt", []byte("mine\n"), 0))
		must(t, cs.WriteFile("new/deep/e.txt", []byte("e\n"), 0o600))
		must(t, cs.Remove("dir", true))
		must(t, cs.WriteFile("dir", []byte("dir is a file now\n"), 0))
		must(t, cs.Remove("b.txt", false))
		must(t, cs.Remove("link", false))
		must(t, os.Remove(filepath.Join(cs.UpperDir(), "link"))) // the whiteout
		must(t, os.Symlink("exec.sh", filepath.Join(cs.UpperDir(), "link")))
		must(t, cs.MkdirAll("many"))
		must(t, os.Chmod(filepath.Join(cs.UpperDir(), "many"), 0o700))
		return cs
	}
	// A dry run counts the steps.
	probe := mk()
	counter := &failFS{applyFS: probe.real}
	probe.real = counter
	if _, err := probe.Apply(ctx); err != nil {
		t.Fatal(err)
	}
	steps := counter.calls
	t.Logf("%d mutating steps, each failed in turn", steps)
	if steps < 8 {
		t.Fatalf("only %d mutating steps: the fixture is too small", steps)
	}
	// The last step is the sync after the commit: the tree is complete by
	// then, and its failure is not a reason to undo it.
	for n := 1; n < steps; n++ {
		cs := mk()
		before := snap(t, cs.Workspace())
		cs.real = &failFS{applyFS: cs.real, n: n}
		_, err := cs.Apply(ctx)
		var ae *ApplyError
		if !errors.As(err, &ae) || !errors.Is(err, errInjected) || ae.Rollback != nil {
			t.Fatalf("step %d: Apply = %v, want a rolled-back *ApplyError", n, err)
		}
		if after := snap(t, cs.Workspace()); !cmp.Equal(before, after) {
			t.Fatalf("step %d: tree changed after a failed apply:\n%s", n, cmp.Diff(before, after))
		}
		// The change set is intact and applies once the fault is gone.
		cs.real = osFS{root: cs.Workspace()}
		if _, err := cs.Apply(ctx); err != nil {
			t.Fatalf("step %d: retry: %v", n, err)
		}
	}
}

// TestApplyCrash stops an apply at every step as a crash would, then
// reopens the change set: the journal rolls the tree back, and the change
// set applies again. A crash after the last rename rolls forward.
func TestApplyCrash(t *testing.T) {
	requireRoot(t)
	ctx := t.Context()
	mk := func() (*ChangeSet, string) {
		dir := filepath.Join(t.TempDir(), "cs")
		ws := filepath.Join(t.TempDir(), "ws")
		build(t, ws, baseTree)
		cs, err := Begin(ctx, ws, dir)
		must(t, err)
		must(t, cs.WriteFile("a.txt", []byte("mine\n"), 0))
		must(t, cs.WriteFile("new/deep/e.txt", []byte("e\n"), 0o600))
		must(t, cs.Remove("dir", true))
		must(t, cs.WriteFile("dir", []byte("dir is a file now\n"), 0))
		must(t, cs.Remove("b.txt", false))
		must(t, cs.MkdirAll("many"))
		must(t, os.Chmod(filepath.Join(cs.UpperDir(), "many"), 0o700))
		return cs, dir
	}
	ref, _ := mk()
	wantChanges, err := ref.Changes(ctx)
	must(t, err)
	counter := &failFS{applyFS: ref.real}
	ref.real = counter
	_, err = ref.Apply(ctx)
	must(t, err)
	after := snap(t, ref.Workspace())
	t.Logf("%d steps, a crash at each", counter.calls-1)
	for n := 1; n < counter.calls; n++ {
		cs, dir := mk()
		before := snap(t, cs.Workspace())
		cs.real = &failFS{applyFS: cs.real, n: n, crash: true}
		if _, err := cs.Apply(ctx); !errors.Is(err, errCrash) {
			t.Fatalf("step %d: Apply = %v, want the simulated crash", n, err)
		}
		re, err := Open(dir, "")
		if err != nil {
			t.Fatalf("step %d: reopen: %v", n, err)
		}
		if got := snap(t, re.Workspace()); !cmp.Equal(before, got) {
			t.Fatalf("step %d: tree after recovery differs from before (-before +after):\n%s", n, cmp.Diff(before, got))
		}
		if ch, err := re.Changes(ctx); err != nil || !cmp.Equal(wantChanges, ch) {
			t.Fatalf("step %d: changes after recovery: %v\n%s", n, err, cmp.Diff(wantChanges, ch))
		}
		if _, err := re.Apply(ctx); err != nil {
			t.Fatalf("step %d: apply after recovery: %v", n, err)
		}
		if got := snap(t, re.Workspace()); !cmp.Equal(after, got) {
			t.Fatalf("step %d: applied tree differs:\n%s", n, cmp.Diff(after, got))
		}
	}
	// A crash after the last rename: recovery rolls forward.
	cs, dir := mk()
	all, err := cs.Changes(ctx)
	must(t, err)
	must(t, cs.execute(ctx, newJournal(planFor(all, nil))))
	re, err := Open(dir, "")
	must(t, err)
	if got := snap(t, re.Workspace()); !cmp.Equal(after, got) {
		t.Fatalf("roll forward: (-want +got):\n%s", cmp.Diff(after, got))
	}
	if ch, err := re.Changes(ctx); err != nil || len(ch) != 0 {
		t.Fatalf("changes after roll forward: %v %v", ch, err)
	}
	if _, err := os.Stat(filepath.Join(dir, journalFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("journal left behind: %v", err)
	}
}

func TestApplyCancelled(t *testing.T) {
	requireRoot(t)
	cs := begin(t, baseTree)
	must(t, cs.WriteFile("a.txt", []byte("mine\n"), 0))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	before := snap(t, cs.Workspace())
	if _, err := cs.Apply(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply = %v", err)
	}
	if after := snap(t, cs.Workspace()); !cmp.Equal(before, after) {
		t.Fatal("tree changed")
	}
}

func TestPartialReviewApplyDiscard(t *testing.T) {
	requireRoot(t)
	ctx := t.Context()
	cs := begin(t, baseTree)
	must(t, cs.WriteFile("a.txt", []byte("mine\n"), 0))
	must(t, cs.WriteFile("new/one.txt", []byte("1\n"), 0))
	must(t, cs.WriteFile("new/two.txt", []byte("2\n"), 0))
	must(t, cs.Remove("opq", true))
	must(t, cs.WriteFile("opq/keep.txt", []byte("changed keep\n"), 0))

	d, err := cs.Diff(ctx, "new/one.txt")
	must(t, err)
	if !strings.Contains(d, "+++ b/new/one.txt") || strings.Contains(d, "two.txt") || strings.Contains(d, "a.txt") {
		t.Errorf("Diff(new/one.txt) =\n%s", d)
	}
	// Applying a file in a new directory brings the directory along.
	if _, err := cs.Apply(ctx, "new/one.txt"); err != nil {
		t.Fatal(err)
	}
	ws := cs.Workspace()
	if _, err := os.Stat(filepath.Join(ws, "new/two.txt")); err == nil {
		t.Error("new/two.txt applied without being selected")
	}
	// Discard a file under the opaque directory: the real one shows again.
	must(t, cs.Discard(ctx, "opq/gone.txt"))
	if b, err := cs.ReadFile("opq/gone.txt"); err != nil || string(b) != "gone\n" {
		t.Errorf("after discard, opq/gone.txt = %q, %v", b, err)
	}
	ch, err := cs.Changes(ctx)
	must(t, err)
	var paths []string
	for _, c := range ch {
		paths = append(paths, string(c.Op)+" "+c.Path)
	}
	want := []string{"modified a.txt", "added new/two.txt", "modified opq/keep.txt"}
	if d := cmp.Diff(want, paths); d != "" {
		t.Errorf("changes (-want +got):\n%s", d)
	}
	must(t, cs.Discard(ctx))
	if ch, _ := cs.Changes(ctx); len(ch) != 0 {
		t.Errorf("changes after Discard: %v", ch)
	}
}

func TestBeginRefusesOverlap(t *testing.T) {
	ws := t.TempDir()
	for _, dir := range []string{filepath.Join(ws, ".fluffy", "cs"), filepath.Dir(ws)} {
		if _, err := Begin(t.Context(), ws, dir); err == nil || !strings.Contains(err.Error(), "overlap") {
			t.Errorf("Begin(%s) = %v, want an overlap error", dir, err)
		}
	}
}

func TestBareUpperRefusesApply(t *testing.T) {
	ws := t.TempDir()
	up := t.TempDir()
	must(t, os.WriteFile(filepath.Join(up, "f"), []byte("x"), 0o644))
	cs, err := OpenUpper(up, ws)
	must(t, err)
	if ch, err := cs.Changes(t.Context()); err != nil || len(ch) != 1 {
		t.Fatalf("Changes = %v, %v", ch, err)
	}
	if _, err := cs.Apply(t.Context()); !errors.Is(err, ErrNoBase) {
		t.Fatalf("Apply = %v, want ErrNoBase", err)
	}
}

func FuzzCheckPath(f *testing.F) {
	for _, s := range []string{"a/b", "../x", "a/../b", "/etc", "", ".", "a/", "a\x00", "..a/b.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		q, err := CheckPath(p)
		if err != nil {
			if !errors.Is(err, ErrBadPath) {
				t.Fatalf("CheckPath(%q): %v", p, err)
			}
			return
		}
		if q == "." {
			return
		}
		joined := filepath.Join("/root/ws", q)
		if !strings.HasPrefix(joined, "/root/ws/") || strings.Contains(q, "\x00") || !fs.ValidPath(q) {
			t.Fatalf("CheckPath(%q) = %q escapes or is invalid", p, q)
		}
		for _, c := range strings.Split(q, "/") {
			if c == ".." || c == "." || c == "" {
				t.Fatalf("CheckPath(%q) = %q has component %q", p, q, c)
			}
		}
	})
}

// TestConcurrentReads runs the reading methods in parallel, as the router
// does for independent read-only calls (run with -race).
func TestConcurrentReads(t *testing.T) {
	requireRoot(t)
	cs := begin(t, baseTree)
	must(t, cs.WriteFile("a.txt", []byte("mine\n"), 0))
	must(t, cs.Remove("opq", true))
	want := snapView(t, cs)
	done := make(chan tree, 8)
	for range cap(done) {
		go func() { done <- snapView(t, cs) }()
	}
	for range cap(done) {
		if got := <-done; !cmp.Equal(want, got) {
			t.Errorf("concurrent read differs:\n%s", cmp.Diff(want, got))
		}
	}
}

func TestDiffLargeAndBinary(t *testing.T) {
	requireRoot(t)
	cs := begin(t, tree{"big.txt": "file 0644 small\n"})
	big := bytes.Repeat([]byte("line of text\n"), (maxDiffBytes/13)+10)
	must(t, cs.WriteFile("big.txt", big, 0))
	must(t, cs.WriteFile("img.bin", []byte("\x89PNG\x00\x01"), 0))
	d, err := cs.Diff(t.Context())
	must(t, err)
	for _, want := range []string{"Large files a/big.txt and b/big.txt differ (over 8 MiB: not diffed)\n", "Binary files /dev/null and b/img.bin differ\n"} {
		if !strings.Contains(d, want) {
			t.Errorf("diff lacks %q:\n%s", want, d)
		}
	}
}
