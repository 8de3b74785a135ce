package kernel_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/tdd"
)

// debtCalls write code in explore mode (tech debt), a test, and a passing
// run that measured hello.go's coverage as covered/2.
func debtCalls(covered string) []string {
	return []string{
		"write", `{"path": "hello.go", "content": "package hello\n"}`,
		"write", `{"path": "hello_test.go", "content": "package hello\n"}`,
		"test", `{"failed": 0, "path": "hello.go", "covered": ` + covered + `, "total": 2}`,
	}
}

// TestFinishWithDebt: when the model stops with tech debt open, the
// kernel asks the TDD machine to finish. Below the budget it refuses: the
// refusal (naming the file) is the model's next message, at most twice,
// then the run ends as debt_unpaid, no client hears "done" and nothing is
// auto-applied. At the budget the cycle is done and the run ends as done.
func TestFinishWithDebt(t *testing.T) {
	for _, c := range []struct {
		name, covered string
		dones         int // the model's "done" turns
		reason        string
		turns         int
	}{
		{"unpaid", "1", 3, "debt_unpaid", 6},
		{"paid", "2", 1, "done", 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			ws := newWorkspace(t)
			e := openEnv(t, t.TempDir(), ws)
			defer e.close()
			m, err := tdd.New(tdd.Options{BudgetPercent: 5})
			must(t, err)
			j, err := tdd.NewJournal(tdd.JournalOptions{DB: e.db})
			must(t, err)
			sc := script(debtCalls(c.covered)...)
			sc = strings.Replace(sc, `{"turn": {"text": "done"}}`+"\n", strings.Repeat(`{"turn": {"text": "done"}}`+"\n", c.dones), 1)
			o := kernel.AutoApplyOptions{Enabled: true, AllowDeletions: true, AllowBinary: true,
				Policy: func(context.Context, string) (kernel.PolicyExplainer, error) { return nil, nil }}
			k, err := kernel.Start(ctx, kernel.Options{DB: e.db, Audit: e.audit, DataDir: e.dir, Models: scriptModels(sc),
				TDD:       &kernel.TDDOptions{Machine: m, Journal: j, Mode: tdd.Explore},
				AutoApply: &o,
				Tools: func(_ context.Context, env kernel.Env) (agent.Tools, error) {
					return &tddTools{env: env}, nil
				}})
			must(t, err)
			info, err := k.Create(ctx, kernel.CreateParams{Workspace: ws, Task: "t", Model: "replay/x"})
			must(t, err)
			var mu sync.Mutex
			var stops, notes []string
			res, err := k.Run(ctx, info.ID, func(ev kernel.Event) {
				mu.Lock()
				defer mu.Unlock()
				switch ev.Type {
				case kernel.Type(agent.EventStop):
					stops = append(stops, string(ev.Agent.Reason))
				case kernel.Type(agent.EventContext):
					notes = append(notes, ev.Agent.Text)
				}
			})
			must(t, err)
			if res.Fault != nil || res.Reason != c.reason {
				t.Fatalf("run: %+v", res)
			}
			if len(stops) != 1 || stops[0] != c.reason {
				t.Errorf("stop events %q, want one %s", stops, c.reason)
			}
			info, err = k.Get(ctx, info.ID)
			must(t, err)
			if info.Turns != c.turns {
				t.Errorf("turns %d, want %d", info.Turns, c.turns)
			}
			st, _, _, err := j.Load(ctx, info.ID)
			must(t, err)
			// Each decision of the machine is in the audit log: the
			// refusals, then (when paid) the acceptance.
			var finishes []audit.TDDFinish
			must(t, e.audit.Reader().Entries(ctx, audit.Filter{Kind: audit.KindTDDFinish}, func(en audit.Entry) error {
				raw, err := json.Marshal(en.Payload)
				if err != nil {
					return err
				}
				var f audit.TDDFinish
				if err := json.Unmarshal(raw, &f); err != nil {
					return err
				}
				finishes = append(finishes, f)
				return nil
			}))
			wantFinishes := c.dones
			if len(finishes) != wantFinishes {
				t.Fatalf("tdd.finish entries %+v, want %d", finishes, wantFinishes)
			}
			for i, f := range finishes {
				accepted := c.reason == "done" && i == len(finishes)-1
				if f.Accepted != accepted || len(f.Files) != 1 || f.Files[0] != "hello.go" || (!accepted && f.Code != "debt_unpaid") {
					t.Errorf("tdd.finish %d = %+v", i, f)
				}
			}
			joined := strings.Join(notes, "\n")
			if c.reason == "debt_unpaid" {
				if strings.Count(joined, "finishing refused (debt_unpaid)") != 3 || !strings.Contains(res.Text, "hello.go 50.00% < 95.00%") {
					t.Errorf("refusals %q, text %q", notes, res.Text)
				}
				if res.AutoApply != nil || st.State == tdd.Done {
					t.Errorf("auto-apply %+v, state %s", res.AutoApply, st.State)
				}
				return
			}
			if !strings.Contains(joined, "tech debt paid (hello.go): tdd green → done") || st.State != tdd.Done || len(st.Debt) != 0 {
				t.Errorf("notes %q, state %s, debt %v", notes, st.State, st.Debt)
			}
		})
	}
}
