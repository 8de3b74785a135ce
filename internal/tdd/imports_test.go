package tdd

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportBoundaries: the TDD machine depends only on the shared
// operation type, the store and regfile (a stdlib-only leaf that opens
// workspace files without blocking); never on the audit log, the policy engine,
// sandboxes or the agent (it returns data that those use).
func TestImportBoundaries(t *testing.T) {
	const module = "github.com/fluffy-agent/fluffy/internal/"
	allowed := map[string]bool{
		module + "operation":    true,
		module + "regfile":      true,
		module + "store":        true,
		module + "tdd/coverage": true,
		module + "tdd/testrun":  true,
	}
	n := 0
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		n++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, "github.com/fluffy-agent/fluffy/") && !allowed[path] {
				t.Errorf("%s imports %s", p, path)
			}
		}
		return nil
	})
	if err != nil || n < 8 {
		t.Fatalf("walked %d files: %v", n, err)
	}
}
