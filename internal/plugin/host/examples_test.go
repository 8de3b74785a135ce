package host_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/plugin"
	"github.com/fluffy-agent/fluffy/internal/plugin/host"
	"github.com/fluffy-agent/fluffy/pkg/pluginsdk"
)

// repoRoot is the module's root: go test runs in the package's folder.
func repoRoot(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(wd, "..", "..", "..")
}

// TestExamplePlugin builds examples/plugins/wordcount (written with
// pkg/pluginsdk), runs it from its manifest in the native sandbox, and
// calls both its tools: count_file reads the workspace it was given
// read-only.
func TestExamplePlugin(t *testing.T) {
	f := newFixture(t)
	src := filepath.Join(repoRoot(t), "examples", "plugins", "wordcount")
	dir := openDir(t)
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "wordcount"), ".")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	m, err := pluginsdk.ReadManifest(src)
	if err != nil {
		t.Fatal(err)
	}
	f.store.Put(plugin.Record{Manifest: m, Dir: dir, State: plugin.Enabled})
	_, reg, rep := f.start(host.Options{})
	if rep.Err != nil || !slices.Equal(rep.Tools, []string{"mcp.wordcount.count", "mcp.wordcount.count_file"}) {
		t.Fatalf("report %+v", rep)
	}
	res, err := call(t, reg, "mcp.wordcount.count", map[string]any{"text": "a b c\n"})
	if err != nil || !strings.Contains(string(res.Output), `"words":3`) {
		t.Fatalf("count: %q %v", res.Output, err)
	}
	res, err = call(t, reg, "mcp.wordcount.count_file", map[string]any{"path": "README.md"})
	if err != nil || !strings.Contains(string(res.Output), `"words":2`) {
		t.Fatalf("count_file: %q %v", res.Output, err)
	}
}

// TestThirdPartyServer runs @modelcontextprotocol/server-filesystem from
// npm (scripts/deps.sh caches it) with Node in the native sandbox, on the
// workspace: it reads the workspace, and its writes fail (the workspace
// is read-only to it; fluffy's own tools write into the change set).
func TestThirdPartyServer(t *testing.T) {
	f := newFixture(t)
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), ".cache")
	}
	src := filepath.Join(cache, "fluffy-test", "mcp-server-filesystem-2026.8.31")
	entry := "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
	if _, err := os.Stat(filepath.Join(src, entry)); err != nil {
		t.Skipf("the npm server is not installed (run scripts/deps.sh): %v", err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("no node (scripts/deps.sh installs npm, which brings it)")
	}
	dir := openDir(t)
	copyTree(t, src, dir)
	m := plugin.Manifest{Name: "fsref", Version: "2026.8.31",
		Run:          plugin.Run{Command: []string{"node", entry, f.ws}},
		Capabilities: []plugin.Capability{plugin.CapReadWorkspace}}
	f.store.Put(plugin.Record{Manifest: m, Dir: dir, State: plugin.Enabled})
	_, reg, rep := f.start(host.Options{})
	if rep.Err != nil || !slices.Contains(rep.Tools, "mcp.fsref.read_text_file") || !slices.Contains(rep.Tools, "mcp.fsref.write_file") {
		t.Fatalf("report %+v", rep)
	}
	res, err := call(t, reg, "mcp.fsref.read_text_file", map[string]any{"path": filepath.Join(f.ws, "README.md")})
	if err != nil || res.IsError || !strings.Contains(string(res.Output), "hello workspace") {
		t.Fatalf("read_text_file: %q %v", res.Output, err)
	}
	res, err = call(t, reg, "mcp.fsref.write_file", map[string]any{"path": filepath.Join(f.ws, "new.txt"), "content": "x"})
	if err != nil || !res.IsError {
		t.Fatalf("write_file: %q %v", res.Output, err)
	}
	if _, err := os.Stat(filepath.Join(f.ws, "new.txt")); err == nil {
		t.Fatal("the server wrote the workspace")
	}
	wt, _ := reg.Lookup("mcp.fsref.write_file")
	rt, _ := reg.Lookup("mcp.fsref.read_text_file")
	if !slices.Contains(wt.Tags(), "destructive") || rt.Action() != "exec" {
		t.Errorf("tags %v, action %s", wt.Tags(), rt.Action())
	}
}

// copyTree links (or copies) src's files into dst, a folder the
// sandbox's user can read.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, to)
		}
		if os.Link(p, to) == nil {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
