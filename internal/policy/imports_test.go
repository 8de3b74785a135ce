package policy

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportBoundaries keeps the policy engine a pure decision function:
// it must not be able to run processes, reach the network, or depend on
// the sandbox, the tool router or the kernel.
func TestImportBoundaries(t *testing.T) {
	banned := []string{"os/exec", "net", "net/http", "syscall",
		"github.com/fluffy-agent/fluffy/internal/sandbox", "github.com/fluffy-agent/fluffy/internal/tool",
		"github.com/fluffy-agent/fluffy/internal/kernel", "github.com/fluffy-agent/fluffy/internal/agent"}
	for _, dir := range []string{".", "shell"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range af.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				for _, b := range banned {
					if p == b {
						t.Errorf("%s imports %s", f, p)
					}
				}
			}
		}
	}
}
