package router_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/llm/replay"
)

// The router plugs into the real agent loop: a scripted model drives it
// through refusals by two gates and an allowed write; the replay provider
// checks every result against the script.
func TestAgentLoop(t *testing.T) {
	e := newEnv(t, setup{})
	s, err := replay.Load(filepath.Join("testdata", "session.jsonl"))
	must(t, err)
	p := replay.New(s)
	a, err := agent.New(agent.Options{Provider: p, Model: "test", Tools: e.r, System: "sys"})
	must(t, err)
	out, err := a.Run(t.Context(), agent.NewSession("fix Add"))
	must(t, err)
	if out.Reason != agent.ReasonDone || p.Remaining() != 0 {
		t.Errorf("outcome %+v, %d turns left", out, p.Remaining())
	}
	if _, err := e.cs.Stat("pkg/calc_test.go"); err != nil {
		t.Error("the test file is not in the change set")
	}
	if _, err := os.Stat(filepath.Join(e.ws, "pkg/calc_test.go")); err == nil {
		t.Error("the test file reached the real tree")
	}
	var policy int
	for _, en := range e.entries(0) {
		if en.Kind == audit.KindGatePolicy {
			policy++
		}
	}
	if policy != 2 { // the blocked write and the allowed one; the TDD refusal stopped before policy
		t.Errorf("%d gate.policy entries, want 2", policy)
	}
	var names []string
	for _, d := range e.r.Definitions() {
		names = append(names, d.Name)
		if len(d.Schema) == 0 || d.Description == "" {
			t.Errorf("%s: no schema or description", d.Name)
		}
	}
	if got := strings.Join(names, " "); !strings.Contains(got, "fs__read") || !strings.Contains(got, "shell__exec") || !strings.Contains(got, "test__run") {
		t.Errorf("definitions = %s", got)
	}
}
