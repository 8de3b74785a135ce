package changeset

import (
	"testing"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
)

// The policy's default rules and apply agree on what a name alone
// makes sensitive: every git path Sensitive refuses by name, the model
// cannot write with fs.write without a person either (approve or block),
// and git's data stays allowed in both.
func TestPolicyAgrees(t *testing.T) {
	eng, err := policy.Compile(policy.Options{Default: policy.Approve})
	if err != nil {
		t.Fatal(err)
	}
	const ws = "/ws"
	for _, rel := range []string{
		".git", "sub/.git", ".git/config", ".git/commondir", ".git/config.worktree",
		".git/hooks/pre-commit", "a/b/.git/hooks/x", ".git/info/attributes", ".git/modules/m/config",
		".git/worktrees/w/commondir", ".git/objects/info/alternates", ".git/rebase-merge/git-rebase-todo",
		".git/unknown", "evil/HEAD", "evil/commondir", "x/gitdir", "x/config.worktree",
		".gitmodules", "lib/.gitmodules", ".gitconfig",
		".git/objects/ab/cdef", ".git/objects/pack/p.pack", ".git/refs/heads/main", ".git/logs/HEAD",
		".git/index", ".git/HEAD", ".git/packed-refs", ".git/COMMIT_EDITMSG", ".git/description", ".git/ORIG_HEAD", ".git/FETCH_HEAD",
		"src/main.go", ".gitattributes",
	} {
		op := operation.Operation{Tool: "fs.write", Action: operation.Write,
			Paths:   []operation.Path{{Abs: ws + "/" + rel, InWorkspace: true}},
			Session: operation.Session{Workspace: ws}}
		d := eng.Decide(t.Context(), op)
		if sens := Sensitive(rel); sens != (d.Effect != policy.Allow) {
			t.Errorf("%s: Sensitive = %v, policy %s", rel, sens, d.Effect)
		}
	}
}
