package router_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/tdd"
)

// fs.edit's diff mode through the real gates: every file the diff names is
// a path of the operation, so one path the policy blocks refuses the whole
// edit (nothing written); an allowed diff lands in the change set only.
func TestEditDiffThroughGates(t *testing.T) {
	e := newEnv(t, setup{mode: tdd.Explore})
	ctx := t.Context()
	outside := filepath.Join(filepath.Dir(e.ws), "outside.txt")
	must(t, os.WriteFile(outside, []byte("keep\n"), 0o644))

	from := e.last()
	escape := "--- a/README.md\n+++ b/README.md\n@@ -1,2 +1,2 @@\n-hello\n+HELLO\n world\n" +
		"--- a/../outside.txt\n+++ b/../outside.txt\n@@ -1 +1 @@\n-keep\n+owned\n"
	res, err := e.r.Call(ctx, tc("fs.edit", map[string]any{"diff": escape}))
	must(t, err)
	if !res.IsError || !strings.Contains(res.Content, "refused by the policy gate") {
		t.Fatalf("escaping diff: %v %s", res.IsError, res.Content)
	}
	if b, _ := e.cs.ReadFile("README.md"); string(b) != "hello\nworld\n" {
		t.Errorf("README.md written by a refused edit: %q", b)
	}
	if b, _ := os.ReadFile(outside); string(b) != "keep\n" {
		t.Errorf("outside.txt = %q", b)
	}
	var policyEntry *audit.Entry
	for _, en := range e.entries(from) {
		if en.Kind == audit.KindGatePolicy {
			policyEntry = &en
		}
	}
	if policyEntry == nil {
		t.Fatal("no gate.policy entry")
	}

	ok := "--- a/README.md\n+++ b/README.md\n@@ -1,2 +1,2 @@\n-hello\n+HELLO\n world\n" +
		"--- /dev/null\n+++ b/pkg/calc_test.go\n@@ -0,0 +1 @@\n+package pkg\n"
	res, err = e.r.Call(ctx, tc("fs.edit", map[string]any{"diff": ok}))
	must(t, err)
	if res.IsError || !strings.Contains(res.Content, "edited README.md") || !strings.Contains(res.Content, "created pkg/calc_test.go") {
		t.Fatalf("diff: %s", res.Content)
	}
	if b, _ := os.ReadFile(filepath.Join(e.ws, "README.md")); string(b) != "hello\nworld\n" {
		t.Errorf("the edit reached the real tree: %q", b)
	}
	ch, err := e.cs.Changes(ctx)
	must(t, err)
	if len(ch) != 2 {
		t.Errorf("changes = %+v", ch)
	}
	// The nearest match comes back to the model as the tool's result.
	res, err = e.r.Call(ctx, tc("fs.edit", map[string]any{"path": "README.md", "diff": "@@ -1 +1 @@\n-HELO\n+x\n"}))
	must(t, err)
	if !res.IsError || !strings.Contains(res.Content, "README.md:1: hunk 1 of 1") || !strings.Contains(res.Content, `expected "HELO"`) {
		t.Errorf("mismatch: %s", res.Content)
	}
}
