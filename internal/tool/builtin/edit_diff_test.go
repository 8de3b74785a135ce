package builtin

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aymanbagabas/go-udiff"

	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// editEnv is a workspace with a real change set and the built-in tools.
type editEnv struct {
	ws   string
	cs   *changeset.ChangeSet
	edit *tool.Tool
	res  *tool.Resolver
}

func newEditEnv(t *testing.T, files map[string]string) *editEnv {
	t.Helper()
	ws := t.TempDir()
	for name, body := range files {
		p := filepath.Join(ws, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := changeset.Begin(t.Context(), ws, filepath.Join(t.TempDir(), "cs"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tool.NewResolver(tool.ResolverOptions{Workspace: ws, FS: cs.Links()})
	if err != nil {
		t.Fatal(err)
	}
	reg := tool.NewRegistry()
	if err := Register(reg, Options{ChangeSet: cs, Resolver: res}); err != nil {
		t.Fatal(err)
	}
	ed, _ := reg.Lookup("fs.edit")
	return &editEnv{ws: ws, cs: cs, edit: ed, res: res}
}

// call decodes, normalizes and runs fs.edit as the router would.
func (e *editEnv) call(t *testing.T, in map[string]any) (tool.Result, *operation.Operation) {
	t.Helper()
	raw, _ := json.Marshal(in)
	args, err := e.edit.Decode(raw)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	op, err := e.edit.Normalize(context.Background(), e.res, args, operation.Session{ID: "s", Workspace: e.res.Workspace()})
	if err != nil {
		t.Fatalf("normalize: %v", err)
	}
	r, err := e.edit.Run(context.Background(), args)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return r, op
}

func (e *editEnv) read(t *testing.T, rel string) string {
	t.Helper()
	b, err := e.cs.ReadFile(rel)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

func TestEditDiffMultiFile(t *testing.T) {
	e := newEditEnv(t, map[string]string{
		"a.go":     "package a\n\nfunc A() int { return 1 }\n",
		"sub/b.go": "package sub\n\nvar B = 2\n",
		"old.txt":  "gone\n",
	})
	diff := `diff --git a/a.go b/a.go
--- a/a.go
+++ b/a.go
@@ -3 +3 @@
-func A() int { return 1 }
+func A() int { return 10 }
diff --git a/sub/b.go b/sub/b.go
--- a/sub/b.go
+++ b/sub/b.go
@@ -3 +3,2 @@
 var B = 2
+var C = 3
--- /dev/null
+++ b/new/c.go
@@ -0,0 +1 @@
+package c
--- a/old.txt
+++ /dev/null
@@ -1 +0,0 @@
-gone
`
	r, op := e.call(t, map[string]any{"diff": diff})
	if r.IsError {
		t.Fatalf("edit failed: %s", r.Output)
	}
	// Every file the diff touches is judged by the gates.
	var paths []string
	for _, p := range op.Paths {
		paths = append(paths, strings.TrimPrefix(p.Abs, e.res.Workspace()+"/"))
	}
	if got := strings.Join(paths, " "); got != "a.go sub/b.go new/c.go old.txt" {
		t.Errorf("op.Paths = %s", got)
	}
	for rel, want := range map[string]string{
		"a.go": "package a\n\nfunc A() int { return 10 }\n", "sub/b.go": "package sub\n\nvar B = 2\nvar C = 3\n",
		"new/c.go": "package c\n", "old.txt": "<" + "changeset: stat old.txt: file does not exist" + ">",
	} {
		if got := e.read(t, rel); got != want && !(rel == "old.txt" && strings.Contains(got, "not exist")) {
			t.Errorf("%s = %q, want %q", rel, got, want)
		}
	}
	// The real tree is untouched.
	if b, _ := os.ReadFile(filepath.Join(e.ws, "a.go")); !strings.Contains(string(b), "return 1 }") {
		t.Errorf("real a.go changed: %s", b)
	}
	if !strings.Contains(string(r.Output), "edited a.go") || !strings.Contains(string(r.Output), "deleted old.txt") {
		t.Errorf("output = %s", r.Output)
	}
}

// When one file's hunks do not apply, nothing is written, and the error
// names that file and its line.
func TestEditDiffAllOrNothing(t *testing.T) {
	e := newEditEnv(t, map[string]string{"a.txt": "one\ntwo\n", "b.txt": "three\nfour\n"})
	diff := "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n--- a/b.txt\n+++ b/b.txt\n@@ -1,2 +1,2 @@\n three\n-fore\n+FOUR\n"
	r, _ := e.call(t, map[string]any{"diff": diff})
	if !r.IsError || !strings.HasPrefix(string(r.Output), "b.txt:1: hunk 1 of 1") || !strings.Contains(string(r.Output), `expected "fore"`) {
		t.Fatalf("result = %v %s", r.IsError, r.Output)
	}
	if got := e.read(t, "a.txt"); got != "one\ntwo\n" {
		t.Errorf("a.txt was written: %q", got)
	}
	ch, err := e.cs.Changes(t.Context())
	if err != nil || len(ch) != 0 {
		t.Errorf("changes = %v, %v", ch, err)
	}
}

func TestEditDiffRefusals(t *testing.T) {
	e := newEditEnv(t, map[string]string{"a.txt": "one\n", "bin": "x\x00y\n"})
	for _, c := range []struct {
		name string
		in   map[string]any
		want string
	}{
		{"path mismatch", map[string]any{"path": "a.txt", "diff": "--- a/bin\n+++ b/bin\n@@ -1 +1 @@\n-x\n+y\n"}, "the diff edits bin but path names a.txt"},
		{"both modes", map[string]any{"path": "a.txt", "old": "one", "diff": "@@ -1 +1 @@\n-one\n+two\n"}, "either old/new or diff"},
		{"create existing", map[string]any{"diff": "--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+x\n"}, "it exists"},
		{"edit missing", map[string]any{"diff": "--- a/nope.txt\n+++ b/nope.txt\n@@ -1 +1 @@\n-x\n+y\n"}, "nope.txt: cannot edit"},
		{"binary", map[string]any{"diff": "--- a/bin\n+++ b/bin\n@@ -1 +1 @@\n-x\n+y\n"}, "binary"},
		{"rename", map[string]any{"diff": "diff --git a/a.txt b/c.txt\nsimilarity index 100%\nrename from a.txt\nrename to c.txt\n"}, "does not rename"},
		{"delete leaves lines", map[string]any{"diff": "--- a/a.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-two\n"}, "does not apply"},
		{"no path for hunks", map[string]any{"diff": "@@ -1 +1 @@\n-one\n+two\n"}, "name the file"},
		{"old/new without path", map[string]any{"old": "one", "new": "two"}, "path is required"},
	} {
		t.Run(c.name, func(t *testing.T) {
			raw, _ := json.Marshal(c.in)
			args, err := e.edit.Decode(raw)
			if err != nil {
				t.Fatal(err)
			}
			// Normalize may refuse a diff it cannot parse (no path to
			// judge); otherwise Run reports.
			if _, err := e.edit.Normalize(context.Background(), e.res, args, operation.Session{ID: "s", Workspace: e.res.Workspace()}); err != nil {
				if !strings.Contains(err.Error(), c.want) {
					t.Fatalf("normalize: %v, want %q", err, c.want)
				}
				return
			}
			r, err := e.edit.Run(context.Background(), args)
			if err != nil || !r.IsError || !strings.Contains(string(r.Output), c.want) {
				t.Fatalf("= %v %s %v; want an error with %q", r.IsError, r.Output, err, c.want)
			}
		})
	}
	if ch, _ := e.cs.Changes(t.Context()); len(ch) != 0 {
		t.Errorf("refusals changed the change set: %v", ch)
	}
}

// FuzzEditDiffRoundTrip: a diff produced by go-udiff (as gopls and
// fluffy's own change set diff produce them) from a to b applies to a and
// gives b, for any texts.
func FuzzEditDiffRoundTrip(f *testing.F) {
	f.Add("a\nb\nc\n", "a\nB\nc\n")
	f.Add("", "x\n")
	f.Add("x", "x\n")
	f.Add("one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\n", "one\nTWO\nthree\nfour\nfive\nsix\nSEVEN\neight\nnine")
	f.Fuzz(func(t *testing.T, a, b string) {
		if len(a) > 4000 || len(b) > 4000 || a == b || strings.ContainsRune(a+b, '\r') {
			return
		}
		d, err := udiff.ToUnified("a/f", "b/f", a, udiff.Lines(a, b), 3)
		if err != nil || d == "" {
			return
		}
		fps, err := parsePatch(d, "")
		if err != nil {
			t.Fatalf("parse %q: %v", d, err)
		}
		got, err := applyHunks("f", a, fps[0].Hunks)
		if err != nil {
			t.Fatalf("apply %q to %q: %v", d, a, err)
		}
		if got != b {
			t.Fatalf("apply %q to %q = %q, want %q", d, a, got, b)
		}
	})
}

// FuzzParsePatch: model-supplied diffs never panic the parser or the
// applier, and what applies touches only what the hunks name.
func FuzzParsePatch(f *testing.F) {
	f.Add("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n", "a\nb\n")
	f.Add("@@ -1 +1 @@\n-a\n+b\n\\ No newline at end of file\n", "a")
	f.Add("diff --git a/f b/f\nold mode 100644\nnew mode 100755\n", "")
	f.Add("--- /dev/null\n+++ b/f\n@@ -0,0 +1 @@\n+x\n", "")
	f.Fuzz(func(t *testing.T, diff, content string) {
		if len(diff) > 8000 || len(content) > 8000 {
			return
		}
		fps, err := parsePatch(diff, "f")
		if err != nil {
			return
		}
		for _, fp := range fps {
			got, err := applyHunks(fp.Path, content, fp.Hunks)
			if err != nil {
				var ee *EditError
				if !asEditError(err, &ee) {
					t.Fatalf("apply error of type %T: %v", err, err)
				}
				continue
			}
			// Lines no hunk removes survive: the result has at least the
			// file's lines minus the removed ones.
			removed := 0
			for _, h := range fp.Hunks {
				removed += int(h.LinesDeleted)
			}
			if n, m := len(splitText(content).lines), len(splitText(got).lines); m < n-removed {
				t.Fatalf("%d lines became %d with %d removed", n, m, removed)
			}
		}
	})
}

// A top-level directory named "a" survives git headers (the parser strips
// a/ and b/ once); traditional headers are stripped the same way.
func TestEditDiffPrefixes(t *testing.T) {
	for _, c := range []struct{ diff, want string }{
		{"diff --git a/a/x.txt b/a/x.txt\n--- a/a/x.txt\n+++ b/a/x.txt\n@@ -1 +1 @@\n-x\n+y\n", "a/x.txt"},
		{"--- a/a/x.txt\n+++ b/a/x.txt\n@@ -1 +1 @@\n-x\n+y\n", "a/x.txt"},
		{"--- a/x.txt\n+++ b/x.txt\n@@ -1 +1 @@\n-x\n+y\n", "x.txt"},
		{"--- src/x.txt\n+++ src/x.txt\n@@ -1 +1 @@\n-x\n+y\n", "src/x.txt"},
	} {
		fps, err := parsePatch(c.diff, "")
		if err != nil || len(fps) != 1 || fps[0].Path != c.want {
			t.Errorf("parsePatch(%q) = %+v, %v; want %s", c.diff, fps, err, c.want)
		}
	}
}
