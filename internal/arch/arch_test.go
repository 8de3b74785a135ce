package arch

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/fluffy-agent/fluffy"

// pkg is one Go package of the module, read from source.
type pkg struct {
	path    string // import path
	dir     string
	hasDoc  bool
	imports map[string]bool // non-test imports
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", dir, err)
	}
	return dir
}

// walkSources calls fn with the path of every non-test Go file of the
// module under root (no testdata, bin or hidden directories).
func walkSources(root string, fn func(p string) error) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		return fn(p)
	})
}

func loadPackages(t *testing.T) []*pkg {
	t.Helper()
	root := moduleRoot(t)
	byDir := map[string]*pkg{}
	fset := token.NewFileSet()
	err := walkSources(root, func(p string) error {
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		dir := filepath.Dir(p)
		k := byDir[dir]
		if k == nil {
			rel, _ := filepath.Rel(root, dir)
			ip := module
			if rel != "." {
				ip += "/" + filepath.ToSlash(rel)
			}
			k = &pkg{path: ip, dir: dir, imports: map[string]bool{}}
			byDir[dir] = k
		}
		if f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != "" {
			k.hasDoc = true
		}
		for _, imp := range f.Imports {
			v, _ := strconv.Unquote(imp.Path.Value)
			k.imports[v] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []*pkg
	for _, k := range byDir {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	if len(out) < 5 {
		t.Fatalf("found only %d packages: the walk is broken", len(out))
	}
	return out
}

// TestPackagesHaveDocs fails when a package has no doc comment saying what
// it owns (tailscale's pkgdoc_test, adapted).
func TestPackagesHaveDocs(t *testing.T) {
	for _, p := range loadPackages(t) {
		if !p.hasDoc {
			t.Errorf("package %s has no doc comment: add one (// Package x owns ...) to one of its files", p.path)
		}
	}
}

// boundaries lists, for packages under an import-path prefix, the import
// prefixes they must never use. Extend it as packages land.
var boundaries = []struct {
	pkg       string
	forbidden []string
	why       string
}{
	{"internal/policy", []string{"internal/sandbox", "internal/kernel", "internal/agent", "internal/llm", "github.com/moby/", "github.com/docker/"}, "decisions are data: the policy engine never executes anything"},
	{"internal/tdd", []string{"internal/sandbox", "internal/kernel", "internal/agent", "internal/llm", "github.com/moby/", "github.com/docker/"}, "the TDD machine is a pure function of its inputs"},
	{"internal/operation", []string{"internal/"}, "the shared Operation type depends on nothing of fluffy's"},
	{"internal/units", []string{"internal/"}, "units is a leaf"},
	{"internal/agent", []string{"internal/sandbox", "github.com/moby/", "github.com/docker/"}, "the agent loop reaches execution only through the tool router"},
	{"internal/llm", []string{"internal/sandbox", "internal/tool", "internal/policy", "internal/kernel"}, "model providers know nothing of execution"},
	{"internal/audit", []string{"internal/sandbox", "internal/policy", "internal/kernel", "internal/agent"}, "the audit log stands alone; the kernel wires it"},
	{"internal/store", []string{"internal/"}, "the store is a leaf every other package may use"},
	{"internal/ipc", []string{"internal/"}, "the wire protocol knows nothing of the parts it connects"},
	{"internal/config", []string{"internal/sandbox", "internal/kernel", "internal/policy", "internal/audit"}, "configuration is read by others, never the other way round"},
	{"internal/sandbox", []string{"internal/kernel", "internal/agent", "internal/llm", "internal/policy"}, "sandboxes execute; they do not decide"},
	{"internal/changeset", []string{"internal/"}, "change sets are a leaf: the kernel, the tools and the CLI use them"},
	{"internal/jsonnum", []string{"internal/"}, "the JSON number grammar is a leaf the hand-written JSON readers share"},
	{"internal/regfile", []string{"internal/"}, "opening files that must be regular is a leaf every reader of workspace files shares"},
	{"internal/treedigest", []string{"internal/"}, "a folder's canonical digest is a leaf: installed skills and plugins pin their files with it"},
	{"internal/jsonname", []string{"internal/"}, "when two JSON member names are one name to Go is a leaf the strict JSON readers share"},
	{"internal/secret", []string{"internal/"}, "secret references and their backends are a leaf: the channels, the CLI and the daemon resolve one syntax"},
	{"internal/lockfile", []string{"internal/"}, "the lock files by which fluffy's processes exclude one another are a leaf: the audit log, the change sets, the kernel, the bootstrap and the CLI take them"},
	{"internal/gitview", []string{"internal/sandbox", "internal/kernel", "internal/tool", "internal/policy", "os/exec"}, "git in the kernel reads and writes through a change set and runs no program"},
	{"internal/logfile", []string{"internal/"}, "fluffy's own log files are a leaf: the bootstrap rotates the kernel's at launch, the CLI's daemons write theirs through it"},
	{"internal/telemetry", []string{"internal/"}, "the tracer and its audit link are a leaf: the audit log, the agent, the router and the kernel take them; internal/telemetry/otlp alone links the SDK"},
	{"internal/tui", []string{"internal/"}, "terminal drawing knows nothing of sessions; the CLI feeds it"},
	{"internal/channel", []string{"internal/kernel", "internal/wiring", "internal/sandbox", "internal/tool", "internal/agent", "internal/llm", "internal/cli"}, "a channel turns what arrives into messages for the daemon's router and depends on the channel contract, never on the sessions it feeds"},
	{"internal/serve", []string{"internal/wiring", "internal/cli", "internal/sandbox", "internal/tool", "internal/llm/"}, "the assistant daemon's router reaches sessions through the kernel's interface only, never their tools, sandboxes or providers"},
	{"internal/web", []string{"internal/kernel", "internal/wiring", "internal/cli", "internal/sandbox", "internal/tool", "internal/agent", "internal/llm", "internal/serve"}, "the web console reaches the kernel only through the interfaces it declares, which internal/wiring implements"},
	{"internal/mcpserve", []string{"internal/kernel", "internal/wiring", "internal/cli", "internal/sandbox", "internal/tool", "internal/agent", "internal/llm", "internal/serve"}, "the MCP server reaches its session only through the interface it declares, which the CLI implements over the kernel's IPC: every call takes the router's road in the kernel"},
	{"internal/sched", []string{"internal/"}, "the scheduler decides when work runs, never what it is: it imports nothing of fluffy's, the wiring gives it the work"},
	{"internal/tool", []string{"internal/kernel", "internal/llm/", "internal/sandbox/native", "github.com/moby/", "github.com/docker/"}, "tools reach execution through interfaces the kernel wires, never a backend (the router uses agent's and llm's types only, no provider)"},
}

// leaves are packages that import nothing of fluffy's (the table above
// says so for each): any package may use them, even one that may import
// nothing else of fluffy's, since a leaf brings no part with it.
var leaves = map[string]bool{
	"internal/units":      true,
	"internal/jsonnum":    true,
	"internal/jsonname":   true,
	"internal/regfile":    true,
	"internal/treedigest": true,
	"internal/lockfile":   true,
	"internal/secret":     true,
	"internal/telemetry":  true,
}

func TestImportBoundaries(t *testing.T) {
	for _, p := range loadPackages(t) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.path, module), "/")
		for imp := range p.imports {
			impRel := strings.TrimPrefix(imp, module+"/")
			for _, b := range boundaries {
				if rel != b.pkg && !strings.HasPrefix(rel, b.pkg+"/") {
					continue
				}
				for _, f := range b.forbidden {
					target := impRel
					if !strings.HasPrefix(imp, module+"/") {
						target = imp
					}
					if strings.HasPrefix(target, f) && !strings.HasPrefix(impRel, b.pkg) && !leaves[impRel] {
						t.Errorf("%s imports %s: forbidden (%s)", rel, imp, b.why)
					}
				}
			}
			// Only the binary uses the CLI; only the CLI, the bootstrap
			// and the daemon side (internal/wiring, and the assistant
			// daemon's router, internal/serve) reach the kernel.
			if impRel == "internal/cli" && rel != "cmd/fluffy" {
				t.Errorf("%s imports internal/cli: only cmd/fluffy may", rel)
			}
			if impRel == "internal/kernel" && rel != "internal/cli" && rel != "internal/bootstrap" && rel != "internal/wiring" && rel != "internal/serve" && rel != "cmd/fluffy" {
				t.Errorf("%s imports internal/kernel: only the CLI, the bootstrap, the wiring and the daemon's router may", rel)
			}
		}
	}
}

// TestBoundaryTableIsChecked makes sure the walk sees imports at all, so
// the boundary test cannot pass vacuously.
func TestBoundaryTableIsChecked(t *testing.T) {
	for _, p := range loadPackages(t) {
		if p.path == module+"/internal/cli" {
			if !p.imports[module+"/internal/config"] {
				t.Fatalf("internal/cli does not appear to import internal/config: imports seen %v", p.imports)
			}
			return
		}
	}
	t.Fatal("internal/cli not found")
}
