package gitview_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/gitview"
)

// gitCmd runs the real git binary in dir with no user or system config.
func gitCmd(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=Ana", "GIT_AUTHOR_EMAIL=ana@example.com", "GIT_COMMITTER_NAME=Ana", "GIT_COMMITTER_EMAIL=ana@example.com",
		"GIT_AUTHOR_DATE=2026-01-02T03:04:05Z", "GIT_COMMITTER_DATE=2026-01-02T03:04:05Z")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func write(t testing.TB, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// newRepo makes a repository with two commits and a change set over it.
func newRepo(t testing.TB) (string, *changeset.ChangeSet) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	if os.Geteuid() != 0 {
		t.Skip("change sets need root here (whiteouts)")
	}
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	gitCmd(t, base, "init", "-q", "-b", "main", ws)
	write(t, filepath.Join(ws, "README.md"), "hello\nworld\n")
	write(t, filepath.Join(ws, "pkg", "calc.go"), "package pkg\n\nfunc Add(a, b int) int { return a - b }\n")
	write(t, filepath.Join(ws, ".gitignore"), "*.log\nbuild/\n")
	gitCmd(t, ws, "add", "-A")
	gitCmd(t, ws, "commit", "-q", "-m", "first commit")
	write(t, filepath.Join(ws, "docs", "guide.md"), "a guide\n")
	write(t, filepath.Join(ws, "logo.bin"), "PNG\x00\x01\x02")
	gitCmd(t, ws, "add", "-A")
	gitCmd(t, ws, "commit", "-q", "-m", "add docs\n\nwith a body line")
	cs, err := changeset.Begin(context.Background(), ws, filepath.Join(base, "cs"))
	if err != nil {
		t.Fatal(err)
	}
	return ws, cs
}

func open(t testing.TB, cs *changeset.ChangeSet) *gitview.Repo {
	t.Helper()
	r, err := gitview.Open(context.Background(), cs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestStatusDiffLogSeePendingEdits(t *testing.T) {
	ws, cs := newRepo(t)
	ctx := context.Background()
	must(t, cs.WriteFile("pkg/calc.go", []byte("package pkg\n\nfunc Add(a, b int) int { return a + b }\n"), 0o644))
	must(t, cs.WriteFile("pkg/calc_test.go", []byte("package pkg\n"), 0o644))
	must(t, cs.WriteFile("debug.log", []byte("ignored\n"), 0o644))
	must(t, cs.Remove("docs/guide.md", false))
	must(t, cs.WriteFile("logo.bin", []byte("PNG\x00\x09"), 0o644))
	must(t, cs.MkdirAll("newdir/sub"))
	must(t, cs.WriteFile("newdir/a.go", []byte("package a\n"), 0o644))
	must(t, cs.WriteFile("newdir/sub/b.go", []byte("package b\n"), 0o644))
	r := open(t, cs)

	st, err := r.Status(ctx, gitview.StatusOptions{})
	must(t, err)
	want := "## main (" // hash varies with nothing: dates are fixed
	if !strings.HasPrefix(st, want) || !strings.Contains(st, "add docs)\n") {
		t.Errorf("status header:\n%s", st)
	}
	for _, l := range []string{" M pkg/calc.go", "?? pkg/calc_test.go", " D docs/guide.md", " M logo.bin", "?? newdir/"} {
		if !strings.Contains(st, l+"\n") {
			t.Errorf("status lacks %q:\n%s", l, st)
		}
	}
	if strings.Contains(st, "debug.log") || strings.Contains(st, "newdir/a.go") {
		t.Errorf("status shows an ignored file or does not collapse an untracked directory:\n%s", st)
	}
	st, err = r.Status(ctx, gitview.StatusOptions{Path: "pkg"})
	must(t, err)
	if strings.Contains(st, "docs/") || !strings.Contains(st, "pkg/calc.go") {
		t.Errorf("status path filter:\n%s", st)
	}

	d, err := r.Diff(ctx, gitview.DiffOptions{})
	must(t, err)
	for _, l := range []string{
		"diff --git a/pkg/calc.go b/pkg/calc.go\n",
		"-func Add(a, b int) int { return a - b }\n+func Add(a, b int) int { return a + b }\n",
		"deleted file mode 100644\n", "--- a/docs/guide.md\n+++ /dev/null\n",
		"Binary files a/logo.bin and b/logo.bin differ",
	} {
		if !strings.Contains(d, l) {
			t.Errorf("diff lacks %q:\n%s", l, d)
		}
	}
	if strings.Contains(d, "calc_test.go") {
		t.Errorf("diff shows an untracked file:\n%s", d)
	}
	d, err = r.Diff(ctx, gitview.DiffOptions{Paths: []string{"pkg"}, Stat: true})
	must(t, err)
	if d != " pkg/calc.go |    2 +-\n 1 file changed, 1 insertion(+), 1 deletion(-)\n" {
		t.Errorf("diff stat:\n%q", d)
	}
	d, err = r.Diff(ctx, gitview.DiffOptions{Staged: true})
	must(t, err)
	if d != "no differences\n" {
		t.Errorf("staged diff:\n%s", d)
	}
	d, err = r.Diff(ctx, gitview.DiffOptions{Base: "HEAD~1", Target: "HEAD", Stat: true})
	must(t, err)
	if !strings.Contains(d, "docs/guide.md |    1 +") || !strings.Contains(d, "logo.bin      | Bin 0 -> 6 bytes") {
		t.Errorf("commit diff stat:\n%s", d)
	}

	lg, err := r.Log(ctx, gitview.LogOptions{})
	must(t, err)
	lines := strings.Split(strings.TrimSpace(lg), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[0], "2026-01-02 Ana add docs") || !strings.HasSuffix(lines[1], "first commit") {
		t.Errorf("log:\n%s", lg)
	}
	lg, err = r.Log(ctx, gitview.LogOptions{Path: "pkg", Full: true})
	must(t, err)
	if !strings.Contains(lg, "Author: Ana <ana@example.com>") || strings.Contains(lg, "add docs") || !strings.Contains(lg, "    first commit\n") {
		t.Errorf("log pkg full:\n%s", lg)
	}
	lg, err = r.Log(ctx, gitview.LogOptions{N: 1})
	must(t, err)
	if !strings.Contains(lg, "[git.log: showing 1 commits") {
		t.Errorf("log n=1:\n%s", lg)
	}
	_ = ws
}

func TestCommitLandsInChangeSetUntilApply(t *testing.T) {
	ws, cs := newRepo(t)
	ctx := context.Background()
	headBefore := gitCmd(t, ws, "rev-parse", "HEAD")
	must(t, cs.WriteFile("pkg/calc.go", []byte("package pkg\n\nfunc Add(a, b int) int { return a + b }\n"), 0o644))
	must(t, cs.WriteFile("pkg/calc_test.go", []byte("package pkg\n"), 0o644))
	must(t, cs.WriteFile("build/out.txt", []byte("ignored\n"), 0o644))
	must(t, cs.Remove("docs/guide.md", false))
	r := open(t, cs)
	out, err := r.Commit(ctx, gitview.CommitOptions{Message: "fix Add\n\nit subtracted", Author: "fluffy", Email: "agent@fluffy.invalid", When: time.Date(2026, 2, 3, 4, 5, 6, 0, time.UTC)})
	must(t, err)
	if !strings.HasPrefix(out, "[main ") || !strings.Contains(out, "] fix Add\n") || !strings.Contains(out, "3 files changed") {
		t.Errorf("commit output:\n%s", out)
	}
	// The real repository has not moved.
	if got := gitCmd(t, ws, "rev-parse", "HEAD"); got != headBefore {
		t.Fatalf("real HEAD moved before apply: %s -> %s", headBefore, got)
	}
	// The view sees the commit and a clean tree (the ignored file stays out).
	r = open(t, cs)
	st, err := r.Status(ctx, gitview.StatusOptions{})
	must(t, err)
	if !strings.Contains(st, "fix Add)") || !strings.Contains(st, "nothing to commit") {
		t.Errorf("status after commit:\n%s", st)
	}
	_, err = r.Commit(ctx, gitview.CommitOptions{Message: "again", Author: "fluffy", Email: "a@b"})
	if !errors.Is(err, gitview.ErrNothingToCommit) {
		t.Errorf("empty commit: %v", err)
	}
	if _, err := cs.Apply(ctx); err != nil {
		t.Fatal(err)
	}
	log := gitCmd(t, ws, "log", "--format=%an <%ae> %s", "-n", "1")
	if log != "fluffy <agent@fluffy.invalid> fix Add\n" {
		t.Errorf("real log after apply: %q", log)
	}
	if st := gitCmd(t, ws, "status", "--porcelain"); st != "" {
		t.Errorf("real status after apply is not clean:\n%s", st)
	}
	gitCmd(t, ws, "fsck", "--strict")
	if files := gitCmd(t, ws, "show", "--name-status", "--format=", "HEAD"); files != "D\tdocs/guide.md\nM\tpkg/calc.go\nA\tpkg/calc_test.go\n" {
		t.Errorf("committed files:\n%s", files)
	}
}

func TestCommitPaths(t *testing.T) {
	ws, cs := newRepo(t)
	ctx := context.Background()
	must(t, cs.WriteFile("pkg/calc.go", []byte("package pkg // changed\n"), 0o644))
	must(t, cs.WriteFile("README.md", []byte("changed\n"), 0o644))
	r := open(t, cs)
	_, err := r.Commit(ctx, gitview.CommitOptions{Message: "only pkg", Paths: []string{"pkg"}, Author: "f", Email: "f@x"})
	must(t, err)
	st, err := open(t, cs).Status(ctx, gitview.StatusOptions{})
	must(t, err)
	if !strings.Contains(st, " M README.md\n") || strings.Contains(st, "calc.go") {
		t.Errorf("status after a path commit:\n%s", st)
	}
	// A same-size edit after the commit is seen (the index's stat data
	// is trusted only for what it describes).
	must(t, cs.WriteFile("pkg/calc.go", []byte("package pkg // chang3d\n"), 0o644))
	st, err = open(t, cs).Status(ctx, gitview.StatusOptions{})
	must(t, err)
	if !strings.Contains(st, " M pkg/calc.go\n") {
		t.Errorf("a same-size edit after a commit is not seen:\n%s", st)
	}
	for _, bad := range []string{"../x", ".git/config", "/etc"} {
		if _, err := open(t, cs).Commit(ctx, gitview.CommitOptions{Message: "x", Paths: []string{bad}, Author: "f", Email: "f@x"}); err == nil {
			t.Errorf("commit of %q accepted", bad)
		}
	}
	_ = ws
}

func TestOpenRefusals(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("change sets need root here")
	}
	ctx := context.Background()
	cases := map[string]func(ws string){
		"no repo": func(string) {},
		"git file": func(ws string) {
			write(t, filepath.Join(ws, ".git"), "gitdir: /etc\n")
		},
		"git symlink": func(ws string) {
			must(t, os.Symlink("/", filepath.Join(ws, ".git")))
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			base := t.TempDir()
			ws := filepath.Join(base, "ws")
			must(t, os.Mkdir(ws, 0o755))
			mk(ws)
			cs, err := changeset.Begin(ctx, ws, filepath.Join(base, "cs"))
			must(t, err)
			_, err = gitview.Open(context.Background(), cs)
			if !errors.Is(err, gitview.ErrNoRepository) && !errors.Is(err, gitview.ErrUnsupported) {
				t.Errorf("Open: %v", err)
			}
		})
	}
}

// An alternates file naming a directory outside the workspace is never
// followed: objects only found there are missing.
func TestAlternatesNotFollowed(t *testing.T) {
	ws, cs := newRepo(t)
	other := t.TempDir()
	gitCmd(t, other, "init", "-q", "-b", "main", ".")
	write(t, filepath.Join(other, "secret.txt"), "secret\n")
	gitCmd(t, other, "add", "-A")
	gitCmd(t, other, "commit", "-q", "-m", "outside")
	oh := strings.TrimSpace(gitCmd(t, other, "rev-parse", "HEAD"))
	must(t, cs.WriteFile(".git/objects/info/alternates", []byte(filepath.Join(other, ".git/objects")+"\n"), 0o644))
	_, err := open(t, cs).Log(context.Background(), gitview.LogOptions{Revision: oh})
	if err == nil {
		t.Fatal("a commit reachable only through alternates was read")
	}
	_ = ws
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Reading never writes: status, diff and log leave the change set empty.
func TestReadsDoNotWrite(t *testing.T) {
	_, cs := newRepo(t)
	ctx := context.Background()
	r := open(t, cs)
	_, err := r.Status(ctx, gitview.StatusOptions{})
	must(t, err)
	_, err = r.Diff(ctx, gitview.DiffOptions{Stat: true})
	must(t, err)
	_, err = r.Log(ctx, gitview.LogOptions{Path: "pkg", Full: true})
	must(t, err)
	ch, err := cs.Changes(ctx)
	must(t, err)
	if len(ch) != 0 {
		t.Errorf("reads changed the change set: %v", ch)
	}
}

// FS never maps a name outside its root.
func FuzzFSPath(f *testing.F) {
	if os.Geteuid() != 0 {
		f.Skip("change sets need root here")
	}
	base := f.TempDir()
	ws := filepath.Join(base, "ws")
	must(f, os.MkdirAll(filepath.Join(ws, ".git"), 0o755))
	write(f, filepath.Join(base, "outside"), "secret")
	write(f, filepath.Join(ws, "inside"), "ok")
	cs, err := changeset.Begin(context.Background(), ws, filepath.Join(base, "cs"))
	must(f, err)
	for _, s := range []string{"../outside", "../../ws/inside", "/../outside", "a/../../outside", "..", "inside", "./.git/../inside", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		fsys, err := gitview.NewFS(cs, ".git")
		if err != nil {
			t.Fatal(err)
		}
		fh, err := fsys.Open(name)
		if err != nil {
			return
		}
		defer fh.Close()
		b := make([]byte, 16)
		n, _ := fh.Read(b)
		if string(b[:n]) == "secret" {
			t.Fatalf("%q reached a file outside the workspace", name)
		}
	})
}

// Status agrees with git's own short status where ignore rules, ignored
// directories holding tracked files and untracked directories meet.
func TestStatusAgreesWithGit(t *testing.T) {
	ws, cs := newRepo(t)
	write(t, filepath.Join(ws, "vendor/kept.go"), "package v\n")
	gitCmd(t, ws, "add", "-f", "vendor/kept.go")
	gitCmd(t, ws, "commit", "-q", "-m", "force-add a file in an ignored dir")
	write(t, filepath.Join(ws, ".gitignore"), "*.log\nbuild/\nvendor/\nnode_modules\nlib/**\n!lib/keep.txt\n")
	gitCmd(t, ws, "commit", "-q", "-am", "ignore more")
	for i := range 50 {
		write(t, filepath.Join(ws, fmt.Sprintf("node_modules/m%02d/index.js", i)), "x\n")
	}
	write(t, filepath.Join(ws, "vendor/other.go"), "package v\n")
	write(t, filepath.Join(ws, "lib/keep.txt"), "k\n")
	write(t, filepath.Join(ws, "lib/z.txt"), "z\n")
	write(t, filepath.Join(ws, "newdir/sub/x.txt"), "x\n")
	write(t, filepath.Join(ws, "pkg/new.go"), "package pkg\n")
	write(t, filepath.Join(ws, "vendor/kept.go"), "package v // changed\n")
	cs2, err := changeset.Begin(context.Background(), ws, filepath.Join(t.TempDir(), "cs"))
	must(t, err)
	_ = cs
	want := gitCmd(t, ws, "status", "--porcelain")
	got, err := open(t, cs2).Status(context.Background(), gitview.StatusOptions{})
	must(t, err)
	_, got, _ = strings.Cut(got, "\n") // the ## line
	if got != want {
		t.Errorf("gitview status:\n%s\ngit status --porcelain:\n%s", got, want)
	}
}
