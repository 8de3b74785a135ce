package changeset

import (
	"errors"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"

	"golang.org/x/sys/unix"
)

func TestSensitive(t *testing.T) {
	for _, c := range []struct {
		path string
		want bool
	}{
		{".git/hooks/pre-commit", true},
		{".git/hooks", true},
		{".git/config", true},
		{".git/config.worktree", true},
		{".git/info/attributes", true},
		{".git/modules/sub/config", true},
		{".git/worktrees/wt/config.worktree", true},
		{".git/commondir", true},
		{".git/objects/info/alternates", true},
		{".git/rebase-merge/git-rebase-todo", true},
		{".git/sequencer/todo", true},
		{".git/some-future-name", true},
		{"vendor/lib/.git/hooks/post-checkout", true},
		{"a/b/c/d/.git/config", true},
		{".git", true},
		{"sub/.git", true},
		{".gitmodules", true},
		{"sub/.gitmodules", true},
		{".gitconfig", true},
		{"evil/HEAD", true},
		{"evil/commondir", true},
		{"x/gitdir", true},
		{"x/config.worktree", true},
		{".fluffy/policy.yaml", true},
		{"sub/.fluffy/config.yaml", true},
		{".git/objects/ab/cdef", false},
		{".git/objects/pack/pack-1.pack", false},
		{".git/refs/heads/main", false},
		{".git/logs/HEAD", false},
		{".git/index", false},
		{".git/HEAD", false},
		{".git/ORIG_HEAD", false},
		{".git/COMMIT_EDITMSG", false},
		{".git/packed-refs", false},
		{"src/hooks/config", false},
		{"git/config", false},
		{".gitignore", false},
		{".gitattributes", false},
		{"a.fluffy", false},
		{"xgit/config", false},
		{".GIT/config", true},
		{".Git./hooks/x", true},
		{"sub/.git /config", true},
		{"Sub/.GITMODULES", true},
		{"bare/head", true},
		{".git/Objects/info/alternates", true},
		{".git/objects/INFO/alternates", true},
		{".FLUFFY/policy.yaml", true},
	} {
		if got := Sensitive(c.path); got != c.want {
			t.Errorf("Sensitive(%q) = %v, want %v", c.path, got, c.want)
		}
	}
}

// A hook any sandboxed command (a test the model wrote, say) put into the
// change set does not reach the real .git with the rest: applying all, or
// its directory, refuses and writes nothing; naming it applies it.
func TestApplySensitive(t *testing.T) {
	requireRoot(t)
	ctx := t.Context()
	cs := begin(t, baseTree)
	ws := cs.Workspace()
	must(t, os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755))
	must(t, cs.WriteFile(".git/hooks/post-checkout", []byte("#!/bin/sh\ntouch /tmp/pwned\n"), 0o755))
	must(t, cs.WriteFile(".fluffy/policy.yaml", []byte("rules: []\n"), 0))
	must(t, cs.WriteFile("a.txt", []byte("mine\n"), 0))
	before := snap(t, ws)
	for _, sel := range [][]string{nil, {".git"}, {".git/hooks"}, {".fluffy"}, {"a.txt", ".git/hooks"}} {
		_, err := cs.Apply(ctx, sel...)
		var se *SensitiveError
		if !errors.As(err, &se) || !errors.Is(err, ErrSensitive) {
			t.Fatalf("Apply(%q) = %v, want *SensitiveError", sel, err)
		}
		if len(se.Paths) == 0 || slices.Contains(se.Paths, "a.txt") {
			t.Errorf("Apply(%q) refused %q", sel, se.Paths)
		}
		if after := snap(t, ws); !maps.Equal(before, after) {
			t.Fatalf("Apply(%q) changed the tree although it refused", sel)
		}
	}
	// The ordinary file alone, then the hook named exactly.
	if _, err := cs.Apply(ctx, "a.txt"); err != nil {
		t.Fatalf("Apply(a.txt): %v", err)
	}
	applied, err := cs.Apply(ctx, ".git/hooks/post-checkout")
	if err != nil || len(applied) != 1 {
		t.Fatalf("Apply of the named hook: %v %v", applied, err)
	}
	if _, err := os.Stat(filepath.Join(ws, ".git/hooks/post-checkout")); err != nil {
		t.Errorf("the named hook was not applied: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, ".fluffy/policy.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf(".fluffy/policy.yaml reached the tree unnamed: %v", err)
	}
}

// gitRepoTree is a workspace holding a repository (the parts discovery
// looks at) and a nested one.
var gitRepoTree = tree{
	".git":                           "dir 0755",
	".git/HEAD":                      "file 0644 ref: refs/heads/main\n",
	".git/config":                    "file 0644 " + realConfig,
	".git/objects":                   "dir 0755",
	".git/refs/heads":                "dir 0755",
	".git/hooks":                     "dir 0755",
	"src/main.go":                    "file 0644 package main\n",
	"vendor/lib/.git/HEAD":           "file 0644 ref: refs/heads/main\n",
	"vendor/lib/.git/objects":        "dir 0755",
	"vendor/lib/.git/refs":           "dir 0755",
	"fixtures/bare.git/HEAD":         "file 0644 ref: refs/heads/main\n",
	"fixtures/bare.git/refs":         "dir 0755",
	"fixtures/bare.git/objects/info": "dir 0755",
	"shared":                         "dir 0755",
	"shared/run.sh":                  "file 0755 #!/bin/sh\n",
}

// realConfig is the repository's config in gitRepoTree: it makes git run
// or read files in the working tree.
const realConfig = `[core]
	bare = false
	hooksPath = .husky
[include]
	path = ../project.gitconfig
[alias]
	fmt = "!tools/fmt.sh --all"
[filter "x"]
	clean = ./tools/clean.sh %f ; # a comment
`

// upperEntry plants one entry straight into the upper directory, as a
// sandboxed command writing through the overlay would: "file MODE
// CONTENT", "dir MODE", "link TARGET", "hardlink OTHER" (another upper
// path), "chmod MODE" (copy up the lower entry with a new mode). Modes
// are raw octal, special bits included.
func upperEntry(t *testing.T, cs *ChangeSet, rel, spec string) {
	t.Helper()
	p := filepath.Join(cs.UpperDir(), rel)
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	f := strings.SplitN(spec, " ", 3)
	var mode uint32
	if len(f) > 1 && f[0] != "link" && f[0] != "hardlink" {
		if _, err := parseOctal(f[1], &mode); err != nil {
			t.Fatal(err)
		}
	}
	switch f[0] {
	case "file":
		must(t, os.WriteFile(p, []byte(f[2]), 0o600))
	case "dir":
		must(t, os.MkdirAll(p, 0o755))
	case "chmod":
		src := filepath.Join(cs.Workspace(), rel)
		fi, err := os.Lstat(src)
		must(t, err)
		if fi.IsDir() {
			must(t, os.MkdirAll(p, 0o755))
		} else {
			b, err := os.ReadFile(src)
			must(t, err)
			must(t, os.WriteFile(p, b, 0o600))
		}
	case "link":
		must(t, os.Symlink(f[1], p))
		return
	case "hardlink":
		must(t, os.Link(filepath.Join(cs.UpperDir(), f[1]), p))
		return
	default:
		t.Fatalf("upperEntry: unknown kind %q", f[0])
	}
	must(t, unix.Chmod(p, mode))
}

func parseOctal(s string, out *uint32) (int, error) {
	var v uint32
	for _, c := range s {
		if c < '0' || c > '7' {
			return 0, errors.New("bad octal mode " + s)
		}
		v = v*8 + uint32(c-'0')
	}
	*out = v
	return len(s), nil
}

// TestHostileUpper is the adversarial suite for change sets: an upper
// directory written by a hostile sandboxed command, planting everything
// that changes what runs once applied, who can write it, or what the
// listing shows. Applying everything, or the directory around each
// plant, must refuse and leave the tree untouched, naming the plant;
// naming the plant itself applies it (the person decided), except for
// fluffy's own files, which are never applied, and setuid/setgid files,
// which are never applied either.
func TestHostileUpper(t *testing.T) {
	for _, c := range []struct {
		name  string
		upper [][2]string // path, spec (in order)
		want  string      // a refused path
		own   bool        // refused as fluffy's own file, even named
		never bool        // refused even when named (not supported)
	}{
		{name: "hook", upper: [][2]string{{".git/hooks/pre-commit", "file 0755 #!/bin/sh\nid\n"}}, want: ".git/hooks/pre-commit"},
		{name: "config fsmonitor", upper: [][2]string{{".git/config", "file 0644 [core]\n\tfsmonitor = id\n"}}, want: ".git/config"},
		{name: "commondir", upper: [][2]string{
			{"evil/config", "file 0644 [core]\n\tfsmonitor = id\n"},
			{"evil/objects", "link ../.git/objects"},
			{"evil/refs", "link ../.git/refs"},
			{".git/commondir", "file 0644 ../evil\n"},
		}, want: ".git/commondir"},
		{name: "commondir target config", upper: [][2]string{
			{"evil/config", "file 0644 [core]\n\tfsmonitor = id\n"},
			{".git/commondir", "file 0644 ../evil\n"},
		}, want: "evil/config"},
		{name: "gitdir file", upper: [][2]string{
			{"evil2/HEAD", "file 0644 ref: refs/heads/main\n"},
			{"evil2/config", "file 0644 [core]\n\tfsmonitor = id\n"},
			{"sub/.git", "file 0644 gitdir: ../evil2\n"},
		}, want: "sub/.git"},
		{name: "gitdir target without HEAD", upper: [][2]string{
			{"evil3/hooks/pre-commit", "file 0755 #!/bin/sh\nid\n"},
			{"sub/.git", "file 0644 gitdir: ../evil3\n"},
		}, want: "evil3/hooks/pre-commit"},
		{name: "gitdir absolute target", upper: [][2]string{
			{"evil4/config", "file 0644 [core]\n\tpager = id\n"},
			{"sub/.git", "file 0644 gitdir: WS/evil4\n"},
		}, want: "evil4/config"},
		{name: ".git symlink", upper: [][2]string{{"deep/a/b/.git", "link ../../../evil"}}, want: "deep/a/b/.git"},
		{name: "nested repo config at depth", upper: [][2]string{{"vendor/lib/.git/config", "file 0644 [alias]\n\tst = !id\n"}}, want: "vendor/lib/.git/config"},
		{name: "new nested repo", upper: [][2]string{
			{"a/b/c/.git/HEAD", "file 0644 ref: refs/heads/main\n"},
			{"a/b/c/.git/hooks/post-checkout", "file 0755 #!/bin/sh\nid\n"},
		}, want: "a/b/c/.git/hooks/post-checkout"},
		{name: "bare repo planted", upper: [][2]string{
			{"x/y/HEAD", "file 0644 ref: refs/heads/main\n"},
			{"x/y/objects/.keep", "file 0644 \n"},
			{"x/y/refs/.keep", "file 0644 \n"},
			{"x/y/config", "file 0644 [core]\n\tfsmonitor = id\n"},
		}, want: "x/y/config"},
		{name: "existing bare repo config", upper: [][2]string{{"fixtures/bare.git/config", "file 0644 [core]\n\tfsmonitor = id\n"}}, want: "fixtures/bare.git/config"},
		{name: "existing bare repo alternates", upper: [][2]string{{"fixtures/bare.git/objects/info/alternates", "file 0644 /tmp\n"}}, want: "fixtures/bare.git/objects/info/alternates"},
		{name: "worktrees", upper: [][2]string{{".git/worktrees/w/config.worktree", "file 0644 [core]\n\tfsmonitor = id\n"}}, want: ".git/worktrees/w/config.worktree"},
		{name: "gitmodules", upper: [][2]string{{".gitmodules", "file 0644 [submodule \"x\"]\n\tpath = x\n\turl = ../evil\n"}}, want: ".gitmodules"},
		{name: "rebase todo exec", upper: [][2]string{{".git/rebase-merge/git-rebase-todo", "file 0644 exec id\n"}}, want: ".git/rebase-merge/git-rebase-todo"},
		{name: "hook as hardlink", upper: [][2]string{
			{"notes.txt", "file 0755 #!/bin/sh\nid\n"},
			{".git/hooks/post-merge", "hardlink notes.txt"},
		}, want: ".git/hooks/post-merge"},
		{name: "hooks dir symlink", upper: [][2]string{{".git/hooks", "link ../shared"}}, want: ".git/hooks"},
		{name: "chmod .git 0777", upper: [][2]string{{".git", "chmod 0777"}}, want: ".git"},
		{name: "chmod .git 0775", upper: [][2]string{{".git", "chmod 0775"}}, want: ".git"},
		{name: "chmod .git/hooks 0757", upper: [][2]string{{".git/hooks", "chmod 0757"}}, want: ".git/hooks"},
		{name: "chmod .git/config 0666", upper: [][2]string{{".git/config", "chmod 0666"}}, want: ".git/config"},
		{name: "chmod .git/config exec", upper: [][2]string{{".git/config", "chmod 0744"}}, want: ".git/config"},
		{name: "chmod dir group-writable", upper: [][2]string{{"shared", "chmod 0775"}}, want: "shared"},
		{name: "chmod file world-writable", upper: [][2]string{{"shared/run.sh", "chmod 0757"}}, want: "shared/run.sh"},
		{name: "new world-writable dir", upper: [][2]string{{"drop", "dir 0777"}}, want: "drop"},
		{name: "setgid dir", upper: [][2]string{{"shared", "chmod 02755"}}, want: "shared"},
		{name: "sticky dir", upper: [][2]string{{"tmpdir", "dir 01755"}}, want: "tmpdir"},
		{name: "sticky file", upper: [][2]string{{"st.sh", "file 01755 #!/bin/sh\n"}}, want: "st.sh"},
		{name: "setuid file", upper: [][2]string{{"su.sh", "file 04755 #!/bin/sh\n"}}, want: "su.sh", never: true},
		{name: "setgid file", upper: [][2]string{{"sg.sh", "file 02755 #!/bin/sh\n"}}, want: "sg.sh", never: true},
		{name: "fluffy binary", upper: [][2]string{{"bin/fluffy-core", "file 0755 #!/bin/sh\nid\n"}}, want: "bin/fluffy-core", own: true},
		{name: "fluffy data", upper: [][2]string{{"data/keys/audit.key", "file 0600 x"}}, want: "data/keys/audit.key", own: true},
		{name: "hooksPath hook", upper: [][2]string{{".husky/pre-commit", "file 0755 #!/bin/sh\nid\n"}}, want: ".husky/pre-commit"},
		{name: "included config", upper: [][2]string{{"project.gitconfig", "file 0644 [core]\n\tpager = id\n"}}, want: "project.gitconfig"},
		{name: "alias script", upper: [][2]string{{"tools/fmt.sh", "file 0755 #!/bin/sh\nid\n"}}, want: "tools/fmt.sh"},
		{name: "filter script", upper: [][2]string{{"tools/clean.sh", "file 0755 #!/bin/sh\nid\n"}}, want: "tools/clean.sh"},
		{name: "home gitconfig", upper: [][2]string{{".gitconfig", "file 0644 [core]\n\tpager = id\n"}}, want: ".gitconfig"},
		{name: "case-folded control file", upper: [][2]string{{".git/Hooks/pre-commit", "file 0755 #!/bin/sh\nid\n"}}, want: ".git/Hooks/pre-commit"},
		{name: "name with escape", upper: [][2]string{{".git/hooks/\x1b]0;x\x07\u202e", "file 0755 #!/bin/sh\n"}}, want: ".git/hooks/\x1b]0;x\x07\u202e"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			cs := begin(t, gitRepoTree)
			ws := cs.Workspace()
			cs.Protect(func(abs string) bool {
				return abs == filepath.Join(ws, "bin/fluffy-core") || strings.HasPrefix(abs, filepath.Join(ws, "data")+"/")
			})
			for _, u := range c.upper {
				upperEntry(t, cs, u[0], strings.ReplaceAll(u[1], "WS", ws))
			}
			before := snap(t, ws)
			all, err := cs.Changes(ctx)
			must(t, err)
			// The listing's quoting shows every name without raw control
			// or format characters.
			for _, ch := range all {
				for _, r := range quote("", ch.Path) {
					if !unicode.IsPrint(r) {
						t.Errorf("quote(%q) keeps %U", ch.Path, r)
					}
				}
			}
			sels := [][]string{nil}
			if top := topDir(c.want); top != c.want {
				sels = append(sels, []string{top})
			}
			for _, sel := range sels {
				_, err := cs.Apply(ctx, sel...)
				if err == nil {
					t.Fatalf("Apply(%q) applied the plant %s", sel, c.want)
				}
				var se *SensitiveError
				var oe *OwnFileError
				switch {
				case c.own:
					if !errors.As(err, &oe) || !slices.Contains(oe.Paths, c.want) {
						t.Fatalf("Apply(%q) = %v, want an *OwnFileError naming %s", sel, err, c.want)
					}
				case c.never:
					if !errors.Is(err, ErrUnsupported) {
						t.Fatalf("Apply(%q) = %v, want ErrUnsupported", sel, err)
					}
				default:
					if !errors.As(err, &se) || !slices.Contains(se.Paths, c.want) {
						t.Fatalf("Apply(%q) = %v, want a *SensitiveError naming %q", sel, err, c.want)
					}
					if len(se.Reasons) != len(se.Paths) {
						t.Errorf("reasons %q for paths %q", se.Reasons, se.Paths)
					}
				}
				if after := snap(t, ws); !maps.Equal(before, after) {
					t.Fatalf("Apply(%q) changed the tree although it refused", sel)
				}
			}
			// Named exactly: a person's decision, except for fluffy's own
			// files and setuid/setgid files.
			_, err = cs.Apply(ctx, c.want)
			switch {
			case c.own && !errors.Is(err, ErrOwnFile):
				t.Errorf("Apply(%q) named = %v, want ErrOwnFile", c.want, err)
			case c.never && !errors.Is(err, ErrUnsupported):
				t.Errorf("Apply(%q) named = %v, want ErrUnsupported", c.want, err)
			case errors.Is(err, ErrSensitive):
				t.Errorf("Apply(%q) named still refuses: %v", c.want, err)
			}
		})
	}
}

func topDir(p string) string {
	if i := strings.IndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return p
}

// Ordinary work in a repository applies without naming anything: a
// commit made in the sandbox (objects, refs, logs, index), source edits,
// a new executable script, a mode narrowed.
func TestApplyOrdinaryGitWork(t *testing.T) {
	ctx := t.Context()
	cs := begin(t, gitRepoTree)
	for _, u := range [][2]string{
		{".git/objects/ab/cdef0123", "file 0444 blob"},
		{".git/refs/heads/main", "file 0644 0123456789abcdef0123456789abcdef01234567\n"},
		{".git/logs/HEAD", "file 0644 log\n"},
		{".git/index", "file 0644 DIRC"},
		{".git/COMMIT_EDITMSG", "file 0644 msg\n"},
		{".git/ORIG_HEAD", "file 0644 0123456789abcdef0123456789abcdef01234567\n"},
		{"src/main.go", "file 0644 package main // edited\n"},
		{"scripts/new.sh", "file 0755 #!/bin/sh\n"},
		{"shared/run.sh", "chmod 0700"},
		{"vendor/lib/.git/objects/12/34", "file 0444 blob"},
	} {
		upperEntry(t, cs, u[0], u[1])
	}
	applied, err := cs.Apply(ctx)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if len(applied) == 0 {
		t.Fatal("nothing applied")
	}
}

func TestConfigRefs(t *testing.T) {
	for _, c := range []struct {
		name, text, cfgDir, top string
		dirs, files             []string
	}{
		{name: "hooksPath", text: "[core]\n\thooksPath = .husky\n", cfgDir: ".git", top: ".", dirs: []string{".husky"}},
		{name: "hooksPath quoted, mixed case", text: "[Core]\n  HooksPath = \"tools/hooks\"\n", cfgDir: ".git", top: ".", dirs: []string{"tools/hooks"}},
		{name: "hooksPath outside", text: "[core]\nhooksPath = /etc/hooks\n", cfgDir: ".git", top: "."},
		{name: "nested repo", text: "[core]\nhooksPath = hooks\n", cfgDir: "lib/.git", top: "lib", dirs: []string{"lib/hooks"}},
		{name: "include", text: "[include]\n\tpath = ../shared.cfg\n[includeIf \"gitdir:~/x/\"]\n\tpath = more.cfg\n", cfgDir: ".git", top: ".", files: []string{"shared.cfg", ".git/more.cfg"}},
		{name: "alias with bang", text: "[alias]\n\tx = !./run.sh a b\n\ty = status\n", cfgDir: ".git", top: ".", files: []string{"run.sh"}},
		{name: "bare program name", text: "[core]\n\tpager = less -R\n", cfgDir: ".git", top: "."},
		{name: "continued line", text: "[core]\n\tfsmonitor = tools/\\\n  fsmon.sh\n", cfgDir: ".git", top: ".", files: []string{"tools/fsmon.sh"}},
		{name: "section and key on one line", text: "[core] sshCommand = 'bin/ssh wrap'\n", cfgDir: ".git", top: ".", files: []string{"bin/ssh wrap"}},
		{name: "comment and garbage", text: "# x\n; y\n[broken\nnot a setting\n", cfgDir: ".git", top: "."},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := configRefs(c.text, c.cfgDir, c.top, "/ws")
			if !slices.Equal(r.dirs, c.dirs) || !slices.Equal(r.files, c.files) {
				t.Errorf("configRefs = dirs %q files %q, want %q %q", r.dirs, r.files, c.dirs, c.files)
			}
		})
	}
}

// FuzzGitConfig: any config text parses without panicking, and every path
// it yields stays inside the workspace and is clean.
func FuzzGitConfig(f *testing.F) {
	f.Add(realConfig)
	f.Add("[core]\n\thooksPath = ../../x\n[include]\npath=\"/ws/a\\\"b\"\n")
	f.Add("[alias] a = \"!sh -c 'x'\" ; c\n\\\n\\")
	f.Fuzz(func(t *testing.T, text string) {
		r := configRefs(text, ".git", ".", "/ws")
		for _, p := range append(r.dirs, r.files...) {
			if p == ".." || strings.HasPrefix(p, "../") || strings.HasPrefix(p, "/") || path.Clean(p) != p {
				t.Fatalf("configRefs(%q) yields %q", text, p)
			}
		}
	})
}

// FuzzSensitive: the lexical judgement never panics, and whatever is
// sensitive stays so under case changes (a case-insensitive file system
// opens the same file).
func FuzzSensitive(f *testing.F) {
	for _, s := range []string{".git/config", "a/.git", "x/HEAD", ".gitmodules", "src/a.go", ".git/objects/info/alternates"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rel string) {
		if Sensitive(rel) && !Sensitive(strings.ToUpper(rel)) {
			t.Fatalf("Sensitive(%q) but not its upper case", rel)
		}
	})
}
