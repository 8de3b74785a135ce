package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/pkg/pluginsdk/plugintest"
)

func TestCount(t *testing.T) {
	c := plugintest.Connect(t, newServer(""))
	if n := len(c.Tools()); n != 2 {
		t.Fatalf("%d tools, want 2", n)
	}
	out, failed := c.Call("count", map[string]any{"text": "one two\nthree\n"})
	if failed || !strings.Contains(out, `"words":3`) || !strings.Contains(out, `"lines":2`) {
		t.Fatalf("count: %q (failed %v)", out, failed)
	}
}

func TestCountFileStaysInTheWorkspace(t *testing.T) {
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte("a b c"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := plugintest.Connect(t, newServer(ws))
	if out, failed := c.Call("count_file", map[string]any{"path": "a.txt"}); failed || !strings.Contains(out, `"words":3`) {
		t.Fatalf("count_file: %q (failed %v)", out, failed)
	}
	if out, failed := c.Call("count_file", map[string]any{"path": "../../etc/passwd"}); !failed {
		t.Fatalf("count_file outside the workspace answered %q", out)
	}
}
