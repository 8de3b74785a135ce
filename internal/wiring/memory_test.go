package wiring

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/tool"
)

// TestRegisterMemory: a session gets the memory tools when the
// assistant workspace (default ~/.fluffy/workspace) has memory files,
// and not otherwise.
func TestRegisterMemory(t *testing.T) {
	dir := t.TempDir()
	u := testUser(t, dir, dir)
	reg := tool.NewRegistry()
	if err := registerMemory(u, reg); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Lookup("memory.search"); err == nil {
		t.Fatal("memory tools without a memory")
	}
	ws := filepath.Join(dir, ".fluffy", "workspace")
	os.MkdirAll(ws, 0o700)
	os.WriteFile(filepath.Join(ws, "MEMORY.md"), []byte("# Core\n\nx\n"), 0o600)
	reg = tool.NewRegistry()
	if err := registerMemory(u, reg); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"memory.search", "memory.get"} {
		if _, err := reg.Lookup(n); err != nil {
			t.Error(err)
		}
	}
}
