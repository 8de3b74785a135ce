package arch

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"testing"
)

// maxFuncLines is the longest a function may be, in lines from its func
// keyword to its closing brace: past it a function no longer reads as one
// step, and a reviewer cannot hold it in mind.
const maxFuncLines = 200

// funcLimits are stricter limits for some packages (path from the module
// root → lines), where a long function hides what a reader most needs to
// see.
var funcLimits = map[string]int{
	// The native sandbox's start paths: each stage (prepare, start,
	// supervise) reads on one screen, so that what runs in which start
	// mode, and how a run is given up, stays visible.
	"internal/sandbox/native": 119,
}

// overLimit are the functions over their limit today, each split by
// another part of #24 (package path from the module root, then the name
// as the test prints it). The test fails when a row no longer matches a
// function over its limit, so the table only shrinks: delete the row.
var overLimit = map[string]bool{}

// function is one function declaration of the module.
type function struct {
	pkg   string // directory from the module root
	pos   string // file:line from the module root
	name  string // Name or (Recv).Name
	lines int
}

// functions returns every function declared in the module's non-test,
// non-generated Go files.
func functions(t *testing.T) []function {
	t.Helper()
	root := moduleRoot(t)
	fset := token.NewFileSet()
	var out []function
	err := walkSources(root, func(p string) error {
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			start, end := fset.Position(fd.Pos()).Line, fset.Position(fd.End()).Line
			out = append(out, function{
				pkg:   filepath.ToSlash(filepath.Dir(rel)),
				pos:   fmt.Sprintf("%s:%d", rel, start),
				name:  funcName(fd),
				lines: end - start + 1,
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// funcName is fd's name, with its receiver's type for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	star := ""
	if s, ok := typ.(*ast.StarExpr); ok {
		star, typ = "*", s.X
	}
	switch x := typ.(type) {
	case *ast.IndexExpr: // generic receiver T[P]
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	recv := "?"
	if id, ok := typ.(*ast.Ident); ok {
		recv = id.Name
	}
	return fmt.Sprintf("(%s%s).%s", star, recv, fd.Name.Name)
}

// TestFunctionLength fails when a function is longer than maxFuncLines,
// or than its package's row of funcLimits, and logs the ten longest.
func TestFunctionLength(t *testing.T) {
	fns := functions(t)
	if len(fns) < 100 {
		t.Fatalf("found only %d functions: the walk is broken", len(fns))
	}
	sort.Slice(fns, func(i, j int) bool {
		if fns[i].lines != fns[j].lines {
			return fns[i].lines > fns[j].lines
		}
		return fns[i].pos < fns[j].pos
	})
	for _, f := range fns[:min(10, len(fns))] {
		t.Logf("%s %s %d lines", f.pos, f.name, f.lines)
	}
	seen := map[string]bool{}
	for _, f := range fns {
		limit, why := maxFuncLines, "the limit"
		if l, ok := funcLimits[f.pkg]; ok {
			limit, why = l, f.pkg+"'s limit"
		}
		if f.lines <= limit {
			continue
		}
		if key := f.pkg + "." + f.name; overLimit[key] {
			seen[key] = true
			continue
		}
		t.Errorf("%s: %s is %d lines, over %s of %d: split it", f.pos, f.name, f.lines, why, limit)
	}
	for key := range overLimit {
		if !seen[key] {
			t.Errorf("%s is no longer over its limit (or is gone): delete its row of overLimit", key)
		}
	}
}
