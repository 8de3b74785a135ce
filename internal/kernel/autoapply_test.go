package kernel_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/tdd"
	"github.com/fluffy-agent/fluffy/internal/tdd/coverage"
	"github.com/fluffy-agent/fluffy/internal/tdd/testrun"
)

// tddTools write into the change set and tell the session's real TDD
// machine (as the router does): "write" {path, content}, "remove" {path},
// "test" {failed} records a test run.
type tddTools struct{ env kernel.Env }

func (w *tddTools) Definitions() []llm.Tool {
	return []llm.Tool{{Name: "write"}, {Name: "remove"}, {Name: "test"}, {Name: "sbx"}}
}

func (w *tddTools) Call(ctx context.Context, c llm.ToolCall) (agent.Result, error) {
	var a struct {
		Path, Content  string
		Failed         int
		Covered, Total int64 // "test": the coverage of Path, when Total > 0
	}
	if err := json.Unmarshal(c.Args, &a); err != nil {
		return agent.Result{Content: err.Error(), IsError: true}, nil
	}
	switch c.Name {
	case "write", "remove":
		op := operation.Operation{Tool: "fs." + c.Name, Action: operation.Write,
			Paths:   []operation.Path{{Abs: filepath.Join(w.env.Workspace, a.Path), InWorkspace: true}},
			Session: operation.Session{ID: w.env.Session, Workspace: w.env.Workspace}}
		if d := w.env.TDD.Allowed(op); !d.Allow {
			return agent.Result{Content: "refused by TDD: " + d.Reason, IsError: true}, nil
		}
		var err error
		if c.Name == "write" {
			err = w.env.ChangeSet.WriteFile(a.Path, []byte(a.Content), 0o644)
		} else {
			err = w.env.ChangeSet.Remove(a.Path, false)
		}
		if err != nil {
			return agent.Result{Content: err.Error(), IsError: true}, nil
		}
		if _, err := w.env.TDD.Wrote(ctx, op); err != nil {
			return agent.Result{}, err
		}
		return agent.Result{Content: "ok"}, nil
	case "sbx":
		// As a sandboxed command writes: straight into the upper layer.
		if err := os.WriteFile(filepath.Join(w.env.ChangeSet.UpperDir(), a.Path), []byte(a.Content), 0o644); err != nil {
			return agent.Result{Content: err.Error(), IsError: true}, nil
		}
		return agent.Result{Content: "ok"}, nil
	case "test":
		res := &testrun.Result{Runner: "go", Passed: 3 - a.Failed, Failed: a.Failed}
		if a.Total > 0 {
			res.Coverage = &coverage.Report{Files: map[string]coverage.FileCoverage{"example.com/m/" + a.Path: {Covered: a.Covered, Total: a.Total}}}
		}
		if _, err := w.env.TDD.TestRun(ctx, res); err != nil {
			return agent.Result{}, err
		}
		return agent.Result{Content: "ran"}, nil
	}
	return agent.Result{Content: "unknown tool", IsError: true}, nil
}

// script builds a replay script from tool calls (name, args JSON), each
// in its own turn, then "done".
func script(calls ...string) string {
	var b strings.Builder
	for i := 0; i < len(calls); i += 2 {
		fmt.Fprintf(&b, `{"turn": {"tool_calls": [{"id": "c%d", "name": %q, "args": %s}]}}`+"\n", i, calls[i], calls[i+1])
		fmt.Fprintf(&b, `{"expect": {"id": "c%d", "is_error": false}}`+"\n", i)
	}
	b.WriteString(`{"turn": {"text": "done"}}` + "\n" + `{"end": {}}` + "\n")
	return b.String()
}

// redGreen is a full red-green cycle: test file, failing run, code,
// passing run.
var redGreen = []string{
	"write", `{"path": "hello_test.go", "content": "package hello\n"}`,
	"test", `{"failed": 1}`,
	"write", `{"path": "hello.go", "content": "package hello\n"}`,
	"test", `{"failed": 0}`,
}

func TestAutoApply(t *testing.T) {
	userRules := `version: 1
rules:
  - id: user.deploy-needs-review
    effect: approve
    match:
      action: write
      path: "**/deploy/**"
`
	cases := []struct {
		name    string
		calls   []string
		opts    kernel.AutoApplyOptions
		applied bool
		failed  string // the failed criteria, space separated
	}{
		{"red-green applies", redGreen, kernel.AutoApplyOptions{MaxFiles: 5, RequireTestsGreen: true}, true, ""},
		{"too many files", redGreen, kernel.AutoApplyOptions{MaxFiles: 1, RequireTestsGreen: true}, false, "max_files"},
		{"write after the last run", append(append([]string{}, redGreen...), "write", `{"path": "hello.go", "content": "package hello // later\n"}`),
			kernel.AutoApplyOptions{MaxFiles: 5, RequireTestsGreen: true}, false, "tests_green"},
		{"tests red", redGreen[:4], kernel.AutoApplyOptions{RequireTestsGreen: true}, false, "tests_green"},
		{"path needs approval", append(append([]string{}, redGreen[:2]...), "write", `{"path": "deploy/prod.yaml", "content": "x: 1\n"}`, "test", `{"failed": 0}`),
			kernel.AutoApplyOptions{RequireTestsGreen: true}, false, "policy"},
		{"deletion", append(append([]string{}, redGreen...), "remove", `{"path": "README.md"}`, "test", `{"failed": 0}`),
			kernel.AutoApplyOptions{RequireTestsGreen: true}, false, "no_deletions"},
		{"deletion allowed", append(append([]string{}, redGreen...), "remove", `{"path": "README.md"}`, "test", `{"failed": 0}`),
			kernel.AutoApplyOptions{RequireTestsGreen: true, AllowDeletions: true}, true, ""},
		{"binary", append(append([]string{}, redGreen[:6]...), "write", `{"path": "logo.png", "content": "\u0000PNG"}`, "test", `{"failed": 0}`),
			kernel.AutoApplyOptions{RequireTestsGreen: true}, false, "no_binary"},
		{"every failure listed", append(append([]string{}, redGreen[:4]...), "remove", `{"path": "README.md"}`),
			kernel.AutoApplyOptions{MaxFiles: 1, RequireTestsGreen: true}, false, "max_files tests_green no_deletions"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			ws := newWorkspace(t)
			e := openEnv(t, t.TempDir(), ws)
			defer e.close()
			m, err := tdd.New(tdd.Options{})
			must(t, err)
			j, err := tdd.NewJournal(tdd.JournalOptions{DB: e.db})
			must(t, err)
			eng, err := policy.Compile(policy.Options{Protected: policy.Protected{Paths: []string{e.dir.Root}}},
				policy.Source{Name: "user.yaml", Layer: policy.LayerUser, Data: []byte(userRules)})
			must(t, err)
			o := c.opts
			o.Enabled = true
			o.Policy = func(context.Context, string) (kernel.PolicyExplainer, error) { return eng, nil }
			k, err := kernel.Start(ctx, kernel.Options{DB: e.db, Audit: e.audit, DataDir: e.dir, Models: scriptModels(script(c.calls...)),
				TDD:       &kernel.TDDOptions{Machine: m, Journal: j, Mode: tdd.Strict},
				AutoApply: &o,
				Tools: func(_ context.Context, env kernel.Env) (agent.Tools, error) {
					return &tddTools{env: env}, nil
				}})
			must(t, err)
			info, err := k.Create(ctx, kernel.CreateParams{Workspace: ws, Task: "t", Model: "replay/x"})
			must(t, err)
			res, err := k.Run(ctx, info.ID, nil)
			must(t, err)
			if res.Fault != nil {
				t.Fatalf("fault: %+v", res.Fault)
			}
			r := res.AutoApply
			if r == nil {
				t.Fatal("no auto-apply report")
			}
			var failed []string
			for _, cr := range r.Criteria {
				if !cr.OK {
					failed = append(failed, cr.Name)
				}
			}
			if r.Applied != c.applied || strings.Join(failed, " ") != c.failed {
				t.Fatalf("applied %v, failed %q; want %v, %q\n%s", r.Applied, failed, c.applied, c.failed, r.Summary())
			}
			_, real := os.Stat(filepath.Join(ws, "hello.go"))
			if c.applied != (real == nil) {
				t.Errorf("hello.go in the real tree: %v, want applied=%v", real == nil, c.applied)
			}
			if !c.applied {
				for _, f := range failed {
					if !strings.Contains(r.Summary(), "✗ "+f+": ") {
						t.Errorf("summary does not name %s:\n%s", f, r.Summary())
					}
				}
			}
			// The decision is audited with its criteria, before the apply.
			kinds := auditKinds(t, e)
			want := "changeset.auto_apply"
			if c.applied {
				want = "changeset.auto_apply changeset.apply"
			}
			if !strings.Contains(kinds, want) {
				t.Errorf("audit kinds %q lack %q", kinds, want)
			}
			var payload map[string]any
			must(t, e.audit.Reader().Entries(ctx, audit.Filter{}, func(en audit.Entry) error {
				if en.Kind == audit.KindChangesetAutoApply {
					raw, _ := json.Marshal(en.Payload)
					payload = nil
					must(t, json.Unmarshal(raw, &payload))
				}
				return nil
			}))
			if cr, _ := payload["criteria"].([]any); len(cr) != len(r.Criteria) {
				t.Errorf("audited criteria = %v", payload["criteria"])
			}
		})
	}
}

// Auto-apply off: nothing is evaluated, the change set waits.
func TestAutoApplyOff(t *testing.T) {
	ctx := context.Background()
	ws := newWorkspace(t)
	e := openEnv(t, t.TempDir(), ws)
	defer e.close()
	k := start(t, e, scriptModels(writeScript), nil)
	info, err := k.Create(ctx, kernel.CreateParams{Workspace: ws, Task: "t", Model: "replay/x"})
	must(t, err)
	res, err := k.Run(ctx, info.ID, nil)
	must(t, err)
	if res.AutoApply != nil {
		t.Fatalf("auto-apply ran while off: %+v", res.AutoApply)
	}
	if _, err := os.Stat(filepath.Join(ws, "hello.go")); err == nil {
		t.Fatal("applied while off")
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// After a run, the kernel keeps base copies of what the run's sandboxes
// wrote, so a conflict found later still shows the three versions.
func TestRunKeepsBases(t *testing.T) {
	ctx := context.Background()
	ws := newWorkspace(t)
	e := openEnv(t, t.TempDir(), ws)
	defer e.close()
	k, err := kernel.Start(ctx, kernel.Options{DB: e.db, Audit: e.audit, DataDir: e.dir,
		Models: scriptModels(script("sbx", `{"path": "README.md", "content": "hello from the sandbox\n"}`)),
		Tools:  func(_ context.Context, env kernel.Env) (agent.Tools, error) { return &tddTools{env: env}, nil }})
	must(t, err)
	info, err := k.Create(ctx, kernel.CreateParams{Workspace: ws, Task: "t", Model: "replay/x"})
	must(t, err)
	if _, err := k.Run(ctx, info.ID, nil); err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(ws, "README.md"), []byte("hello, edited by hand\n"), 0o644))
	sc := kernel.SessionChanges{DB: e.db, Audit: e.audit}
	r, err := sc.Apply(ctx, kernel.ChangesParams{Session: info.ID})
	must(t, err)
	if len(r.Conflicts) != 1 {
		t.Fatalf("conflicts = %+v", r.Conflicts)
	}
	x := r.Conflicts[0].Explain
	for _, want := range []string{"content kept", "-hello\n+hello, edited by hand", "-hello\n+hello from the sandbox"} {
		if !strings.Contains(x, want) {
			t.Errorf("explain lacks %q:\n%s", want, x)
		}
	}
}
