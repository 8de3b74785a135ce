package native

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// TestDirectThrowawayChangeSet: a change set kept in memory inside the
// sandbox (Spec.ChangeSetSize) holds at most its size whatever the host
// offers (without a cgroup, RLIMIT_AS does not count tmpfs pages): a
// write beyond fails with ENOSPC and the result says the change set
// filled up; the host's change set directory stays empty; the result
// says whether the command wrote at all. Started directly, through the
// Go init, and built ahead. TestSuiteUnprivileged reruns it as an
// ordinary user.
func TestDirectThrowawayChangeSet(t *testing.T) {
	const size = 1 << 20
	for _, mode := range []string{"direct", "go-init", "ahead"} {
		t.Run(mode, func(t *testing.T) {
			rt := newRuntime(t, Options{Init: smallInit(t), NoDirect: mode == "go-init"})
			ws := varTmp(t) // not t.TempDir: see varTmp
			if err := os.WriteFile(filepath.Join(ws, "f"), []byte("hi\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				script      string
				stdout      string
				full, wrote bool
			}{
				{"head -c 3M /dev/zero > big; echo rc=$?", "rc=1\n", true, true},
				{"cat f", "hi\n", false, false},
				{"rm f; echo gone", "gone\n", false, true},
				{"mkdir d && touch d/x && echo made", "made\n", false, true},
			} {
				cs := filepath.Join(varTmp(t), "upper")
				spec := sandbox.Spec{Argv: []string{"/bin/sh", "-c", tc.script}, Env: []string{"PATH=/usr/bin:/bin"},
					Workspace: ws, ChangeSet: cs, Dir: ws, ChangeSetSize: size}
				res := runInMode(t, rt, mode, spec)
				if string(res.Stdout) != tc.stdout || res.HitLimit(sandbox.LimitChangeSet) != tc.full || res.ChangeSetWritten != tc.wrote {
					t.Errorf("%s: stdout %q, stderr %q, hit %v, written %v; want %q, full %v, written %v",
						tc.script, res.Stdout, res.Stderr, res.Hit, res.ChangeSetWritten, tc.stdout, tc.full, tc.wrote)
				}
				if tc.full && !strings.Contains(string(res.Stderr), "No space left on device") {
					t.Errorf("%s: stderr %q, want ENOSPC", tc.script, res.Stderr)
				}
				if ents, err := os.ReadDir(cs); err != nil || len(ents) != 0 {
					t.Errorf("%s: the host's change set holds %v (%v), want nothing", tc.script, ents, err)
				}
			}
			if b, err := os.ReadFile(filepath.Join(ws, "f")); err != nil || string(b) != "hi\n" {
				t.Errorf("the workspace changed: %q, %v", b, err)
			}
		})
	}
}
