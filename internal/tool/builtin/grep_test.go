package builtin_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// ignoreTree is a workspace whose .gitignore files, .git/info/exclude
// and negations decide what the search tools see.
var ignoreTree = map[string]string{
	".gitignore":         "*.log\nbuild/\n!keep.log\n/rootonly.txt\ndocs/**/gen.md\n# a comment\n\n\\#hash.txt\n",
	".git/info/exclude":  "secret-notes.txt\n",
	".git/config":        "[core]\n\tbare = false\n# NEEDLE\n",
	"app.log":            "NEEDLE in a log\n",
	"keep.log":           "NEEDLE kept\n",
	"build/out.go":       "NEEDLE build\n",
	"sub/build/x.go":     "NEEDLE sub build\n",
	"rootonly.txt":       "NEEDLE root only\n",
	"sub/rootonly.txt":   "NEEDLE not anchored here\n",
	"sub/.gitignore":     "*.tmp\n!important.tmp\n",
	"sub/a.tmp":          "NEEDLE tmp\n",
	"sub/important.tmp":  "NEEDLE important\n",
	"sub/local.go":       "NEEDLE local\n",
	"a.tmp":              "NEEDLE root tmp\n",
	"docs/x/gen.md":      "NEEDLE generated\n",
	"docs/guide.md":      "NEEDLE guide\n",
	"secret-notes.txt":   "NEEDLE excluded\n",
	"#hash.txt":          "NEEDLE hash\n",
	"bin.dat":            "NEEDLE\x00binary\n",
	"main.go":            "package main\n\n// NEEDLE one\n// NEEDLE two\n",
	"node_modules/m.js":  "NEEDLE dependency\n",
	"node_modules/.keep": "",
}

func ignoreRepo(t *testing.T, e *gitEnv, base string) {
	realGit(t, base, false, "init", "-q", "-b", "main", e.ws)
	for p, s := range ignoreTree {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(e.ws, p)), 0o755))
		must(t, os.WriteFile(filepath.Join(e.ws, p), []byte(s), 0o644))
	}
	must(t, os.WriteFile(filepath.Join(e.ws, ".gitignore"), []byte(ignoreTree[".gitignore"]+"node_modules\n"), 0o644))
	must(t, os.Symlink("/etc/passwd", filepath.Join(e.ws, "passwd-link")))
	must(t, os.Symlink("/etc", filepath.Join(e.ws, "etc-link")))
}

// files lists the distinct paths of path:line:text output.
func files(out string) []string {
	var fs []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		p, _, ok := strings.Cut(l, ":")
		if ok && !strings.HasPrefix(l, "[") && !slices.Contains(fs, p) {
			fs = append(fs, p)
		}
	}
	return fs
}

func TestSearchRespectsGitignore(t *testing.T) {
	e := newSessionEnv(t, "", ignoreRepo)
	// Pending edits: the session deleted keep.log, added a file, and made
	// sub/.gitignore ignore local.go (an ignore file in the upper layer).
	must(t, e.cs.Remove("keep.log", false))
	must(t, e.cs.WriteFile("sub/added.go", []byte("NEEDLE added\n"), 0o644))
	must(t, e.cs.WriteFile("sub/.gitignore", []byte("*.tmp\n!important.tmp\nlocal.go\n"), 0o644))
	visible := []string{"a.tmp", "docs/guide.md", "main.go", "sub/added.go", "sub/important.tmp", "sub/rootonly.txt"}
	ignored := []string{"#hash.txt", "app.log", "build/out.go", "docs/x/gen.md", "node_modules/m.js", "rootonly.txt", "secret-notes.txt", "sub/a.tmp", "sub/build/x.go", "sub/local.go"}
	all := append(slices.Clone(visible), ignored...)
	slices.Sort(all)
	for _, c := range []struct {
		name  string
		tool  string
		args  map[string]any
		files []string
		lines []string
	}{
		{name: "default", tool: "search.grep", args: map[string]any{"pattern": "NEEDLE"}, files: visible,
			lines: []string{"main.go:3:// NEEDLE one\n", "main.go:4:// NEEDLE two\n", "sub/added.go:1:NEEDLE added\n"}},
		{name: "include ignored", tool: "search.grep", args: map[string]any{"pattern": "NEEDLE", "include_ignored": true}, files: all},
		{name: "nested directory", tool: "search.grep", args: map[string]any{"pattern": "NEEDLE", "path": "sub"}, files: []string{"sub/added.go", "sub/important.tmp", "sub/rootonly.txt"}},
		{name: "an ignored directory named explicitly", tool: "search.grep", args: map[string]any{"pattern": "NEEDLE", "path": "build"}, files: []string{"build/out.go"}},
		{name: "glob on names", tool: "search.grep", args: map[string]any{"pattern": "NEEDLE", "glob": "*.tmp"}, files: []string{"a.tmp", "sub/important.tmp"}},
		{name: "match cap in name order", tool: "search.grep", args: map[string]any{"pattern": "NEEDLE", "max_matches": 2}, files: []string{"a.tmp", "docs/guide.md"},
			lines: []string{"[search.grep: stopped after 2 matches]"}},
		{name: "regex without a literal", tool: "search.grep", args: map[string]any{"pattern": `^N[A-Z]+ (kept|added)$`}, files: []string{"sub/added.go"}},
		{name: "case-insensitive", tool: "search.grep", args: map[string]any{"pattern": `(?i)needle ONE`}, files: []string{"main.go"}},
		{name: "no match", tool: "search.grep", args: map[string]any{"pattern": "NOTHERE"}, lines: []string{"no matches\n"}},
		{name: "glob tool", tool: "search.glob", args: map[string]any{"pattern": "**/*.go"}, lines: []string{"main.go\nsub/added.go\n"}},
		{name: "glob tool, ignored too", tool: "search.glob", args: map[string]any{"pattern": "**/*.go", "include_ignored": true},
			lines: []string{"build/out.go\nmain.go\nsub/added.go\nsub/build/x.go\nsub/local.go\n"}},
		{name: "glob tool lists symlinks, never follows them", tool: "search.glob", args: map[string]any{"pattern": "*-link"}, lines: []string{"etc-link\npasswd-link\n"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			from := e.lastSeq()
			out, isErr := e.call(c.tool, c.args)
			if isErr {
				t.Fatalf("error result: %s", out)
			}
			if c.tool == "search.grep" && c.files != nil {
				if got := files(out); !slices.Equal(got, c.files) {
					t.Errorf("files = %v\nwant    %v\n%s", got, c.files, out)
				}
			}
			for _, l := range c.lines {
				if !strings.Contains(out, l) {
					t.Errorf("output lacks %q:\n%s", l, out)
				}
			}
			for _, bad := range []string{".git/", "bin.dat", "root:x:0"} {
				if strings.Contains(out, bad) {
					t.Errorf("output shows %q:\n%s", bad, out)
				}
			}
			if got := e.kindsSince(from); !slices.Equal(got, []string{"tool.read"}) {
				t.Errorf("audit kinds %v, want one tool.read", got)
			}
		})
	}
}

// The search tools agree with git itself about what is ignored.
func TestGitignoreAgreesWithGit(t *testing.T) {
	e := newSessionEnv(t, "", ignoreRepo)
	want := strings.Fields(realGit(t, e.ws, false, "ls-files", "--others", "--exclude-standard"))
	// git lists symlinks and empty files too; search.glob ** lists files
	// and symlinks.
	out, isErr := e.call("search.glob", map[string]any{"pattern": "**"})
	if isErr {
		t.Fatal(out)
	}
	got := strings.Fields(out)
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("search.glob ** = %v\ngit ls-files  = %v", got, want)
	}
}

// More pattern forms, checked against git itself.
func TestGitignorePatternFormsAgreeWithGit(t *testing.T) {
	tree := map[string]string{
		".gitignore": "a/**/b\n**/deep\nlib/**\n!lib/keep.txt\n*.o\n!important.o\ntrail.txt   \n[!x]y.txt\nfoo?.c\nDIR/\nonly/file\n\\!bang.txt\n",
		"a/b":        "", "a/x/b": "", "a/x/y/b": "", "a/x/y/c": "",
		"x/deep": "", "deep": "", "deeper": "",
		"lib/keep.txt": "", "lib/z.txt": "",
		"k.o": "", "important.o": "", "sub/important.o": "",
		"trail.txt": "", "zy.txt": "", "xy.txt": "", "foo1.c": "", "foo12.c": "",
		"DIR/f": "", "x/DIR": "", "only/file": "", "sub/only/file": "", "!bang.txt": "",
	}
	e := newSessionEnv(t, "", func(t *testing.T, e *gitEnv, base string) {
		realGit(t, base, false, "init", "-q", "-b", "main", e.ws)
		for p, s := range tree {
			must(t, os.MkdirAll(filepath.Dir(filepath.Join(e.ws, p)), 0o755))
			must(t, os.WriteFile(filepath.Join(e.ws, p), []byte(s), 0o644))
		}
	})
	want := strings.Fields(realGit(t, e.ws, false, "ls-files", "--others", "--exclude-standard"))
	out, _ := e.call("search.glob", map[string]any{"pattern": "**"})
	got := strings.Fields(out)
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("search.glob ** = %v\ngit ls-files  = %v", got, want)
	}
}
