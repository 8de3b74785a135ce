package wiring

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// TestBrokerPolicyIsTheStepsWorkspaces: the approval broker judges a plan
// step with the policy of the step's own workspace, the one its session's
// router enforces, not the policy of the directory the kernel was started
// in.
func TestBrokerPolicyIsTheStepsWorkspaces(t *testing.T) {
	dir := t.TempDir()
	kernelCwd, wsB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, ws := range []string{kernelCwd, wsB} {
		if err := os.MkdirAll(filepath.Join(ws, ".fluffy"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	block := "rules:\n  - id: no-make-install\n    effect: block\n    message: not here\n    match:\n      argv: [make, install]\n"
	if err := os.WriteFile(filepath.Join(wsB, ".fluffy", "policy.yaml"), []byte(block), 0o644); err != nil {
		t.Fatal(err)
	}
	u := &userenv.Env{Stderr: io.Discard, Cwd: kernelCwd, Self: filepath.Join(dir, "bin", "fluffy-core"),
		Environ: []string{"HOME=" + dir, "FLUFFY_HOME=" + filepath.Join(dir, "data"), "XDG_CONFIG_HOME=" + filepath.Join(dir, "config")}}
	pn := &livePolicy{u: u, log: slog.New(slog.DiscardHandler), audit: &entries{}}
	op := func(ws string) operation.Operation {
		return operation.Operation{Tool: "shell.exec", Action: operation.Exec, Argv: []string{"make", "install"},
			Commands: []operation.Command{{Argv: []string{"make", "install"}}},
			Session:  operation.Session{ID: "s1", Workspace: ws}}
	}
	for _, tc := range []struct {
		ws   string
		want policy.Effect
		rule string
	}{
		{wsB, policy.Block, "no-make-install"},
		{kernelCwd, policy.Approve, ""},
		{wsB, policy.Block, "no-make-install"}, // from the cache, still B's
	} {
		d := pn.Explain(context.Background(), op(tc.ws))
		if d.Effect != tc.want || (tc.rule != "" && d.Rule != tc.rule) {
			t.Errorf("workspace %s: %v by %s (%s); want %v by %s", filepath.Base(tc.ws), d.Effect, d.Rule, d.Reason, tc.want, tc.rule)
		}
	}
	// B's policy changes: the broker sees it at the next evaluation.
	if err := os.Remove(filepath.Join(wsB, ".fluffy", "policy.yaml")); err != nil {
		t.Fatal(err)
	}
	if d := pn.Explain(context.Background(), op(wsB)); d.Effect != policy.Approve {
		t.Errorf("after B's policy is gone: %v by %s; want approve", d.Effect, d.Rule)
	}
}
