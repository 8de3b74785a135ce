package skill

import (
	"os"
	"path/filepath"
	"testing"
)

// The skills shipped in examples/skills load without a problem.
func TestExamplesLoad(t *testing.T) {
	root := filepath.Join("..", "..", "examples", "skills")
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	set := Discover([]Root{{Dir: root, Scope: ScopeUser}})
	if len(set.Problems) > 0 || len(set.Skills) != len(ents) {
		t.Fatalf("skills %d of %d, problems %v", len(set.Skills), len(ents), set.Problems)
	}
}
