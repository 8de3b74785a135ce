package policy

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy/shell"
)

// TestEscapeCorpus plays testdata/escapes.txt: each line runs another
// program or code through its own program. With an allow rule for that
// program only, none may be allowed (issue #35).
func TestEscapeCorpus(t *testing.T) {
	fh, err := os.Open("testdata/escapes.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	n := 0
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		n++
		cmds, _ := shell.Parse(line)
		prog := ""
		for _, c := range cmds {
			if len(c.Argv) > 0 && !strings.Contains(c.Argv[0], "=") && c.Argv[0] != "export" {
				prog = path.Base(c.Argv[0])
				if prog != "export" {
					break
				}
			}
		}
		if prog == "" {
			prog = path.Base(strings.Fields(line)[0])
		}
		user := fmt.Sprintf("rules:\n  - id: allow-program\n    effect: allow\n    match: {action: exec, argv: [[%q, ...], [%q, ...]]}\n", prog, "/lib64/"+prog)
		e := mustCompile(t, Options{}, user)
		op := operation.Operation{Tool: "shell.exec", Action: operation.Exec, CommandLine: line,
			Session: operation.Session{ID: "s", Workspace: "/ws"}}
		op.Commands = cmds
		if d := e.Decide(t.Context(), op); d.Effect == Allow {
			t.Errorf("%s: allowed by %s with only %s allowed", line, d.Rule, prog)
		}
	}
	if n < 130 {
		t.Fatalf("%d lines in the corpus, want at least 130", n)
	}
}
