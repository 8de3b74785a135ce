package wiring

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/ipc"
)

// TestIPCMethodsAreDocumented: every method the kernel and `fluffy serve`
// register has a row in docs/ipc.md's method tables, and every row names a
// method something registers. The registered set is what the kernel's and
// the approval broker's Register put on a mux, joined with every method
// name constant (Method*, *Method) in the daemon's packages: the daemon's
// own methods and the channels' are registered inline or only with a
// running channel.
func TestIPCMethodsAreDocumented(t *testing.T) {
	registered := map[string]string{}
	script := ""
	k, broker := startReplayKernel(t, t.TempDir(), t.TempDir(), approval.NewWatchers(), time.Now, &script)
	mux := ipc.NewMux()
	if err := k.Register(mux); err != nil {
		t.Fatal(err)
	}
	if err := approval.Register(mux, broker, approval.NewWatchers()); err != nil {
		t.Fatal(err)
	}
	if err := registerSched(mux, nil); err != nil {
		t.Fatal(err)
	}
	for _, m := range mux.Methods() {
		registered[m] = "registered on the kernel's mux"
	}
	for m, where := range methodConstants(t, "..") {
		if _, ok := registered[m]; !ok {
			registered[m] = where
		}
	}
	documented := documentedMethods(t, "../../docs/ipc.md")
	for _, m := range slices.Sorted(maps.Keys(registered)) {
		if where := registered[m]; !documented[m] {
			t.Errorf("IPC method %q (%s) has no row in docs/ipc.md's method tables", m, where)
		}
	}
	for _, m := range slices.Sorted(maps.Keys(documented)) {
		if _, ok := registered[m]; !ok {
			t.Errorf("docs/ipc.md documents %q, which nothing registers", m)
		}
	}
	if t.Failed() {
		return
	}
	// The scan must see the methods it exists for, or it proves nothing.
	for _, m := range []string{"status", "shutdown", "cron.run", "web.login", "assistant.say", "matrix.verify.list", "session.create", "approval.ask"} {
		if _, ok := registered[m]; !ok {
			t.Errorf("the registered set lacks %q: the scan is broken", m)
		}
	}
}

// methodConstants returns the IPC method names declared as string
// constants named Method* or *Method (not Code*) in the non-test Go files under root,
// with the file that declares each.
func methodConstants(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i >= len(vs.Values) || strings.HasPrefix(name.Name, "Code") || !(strings.HasPrefix(name.Name, "Method") || strings.HasSuffix(name.Name, "Method")) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil || !ipc.ValidMethod(v) {
						continue
					}
					out[v] = filepath.ToSlash(path) + ": " + name.Name
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// documentedMethods returns the first cells of the rows of every table in
// path whose header begins "| method |" (the built-in methods' included).
func documentedMethods(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]bool{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "| method |"):
			in = true
			continue
		case !strings.HasPrefix(line, "|"):
			in = false
			continue
		case !in || strings.HasPrefix(line, "|---"):
			continue
		}
		cell := strings.TrimSpace(strings.SplitN(line[1:], "|", 2)[0])
		name := strings.Trim(cell, "`")
		if !ipc.ValidMethod(name) || cell != "`"+name+"`" {
			t.Errorf("docs/ipc.md: a method table's row does not begin with a method name: %q", line)
			continue
		}
		out[name] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
