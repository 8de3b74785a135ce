package builtin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/store"
	"github.com/fluffy-agent/fluffy/internal/tdd"
	"github.com/fluffy-agent/fluffy/internal/tool"
	"github.com/fluffy-agent/fluffy/internal/tool/builtin"
	"github.com/fluffy-agent/fluffy/internal/tool/router"
)

// gitEnv is a session over a git repository with the real gates: the
// policy engine (defaults + a user file), the TDD machine in strict mode
// with its SQLite journal, the audit log, and an approval broker whose
// "person" answers with answer.
type gitEnv struct {
	t      *testing.T
	ws     string
	marker string // a file every hostile config entry would create
	cs     *changeset.ChangeSet
	log    *audit.Log
	tdd    *tdd.Session
	broker *approval.Broker
	r      *router.Router
	mu     sync.Mutex
	answer string
	asked  int
	// prompts are the approval requests' texts, in order.
	prompts []string
}

type gitNotifier struct{ e *gitEnv }

func (n gitNotifier) Notify(ctx context.Context, req approval.Request) error {
	n.e.mu.Lock()
	n.e.asked++
	n.e.prompts = append(n.e.prompts, req.Prompt())
	ans := n.e.answer
	n.e.mu.Unlock()
	go func() {
		_ = n.e.broker.Answer(context.WithoutCancel(ctx), req.ID, ans, approval.Who{Name: "ana", Channel: "test"})
	}()
	return nil
}

// realGit runs the git binary on the host, for setting up and checking;
// hostile settings are neutralised unless live is set.
func realGit(t *testing.T, dir string, live bool, args ...string) string {
	t.Helper()
	if !live {
		args = append([]string{"-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null"}, args...)
	}
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=Ana", "GIT_AUTHOR_EMAIL=ana@example.com", "GIT_COMMITTER_NAME=Ana", "GIT_COMMITTER_EMAIL=ana@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// hostileConfig makes every git feature that runs a program run one that
// creates marker.
func hostileConfig(marker string) string {
	cmd := "touch " + marker
	return fmt.Sprintf(`[core]
	fsmonitor = "%[1]s"
	hooksPath = .git/hooks
	pager = %[1]s
	sshCommand = %[1]s
	askPass = %[1]s
[diff "evil"]
	textconv = %[1]s
	command = %[1]s
[filter "evil"]
	clean = %[1]s
	smudge = %[1]s
	process = %[1]s
	required = true
[alias]
	status = !%[1]s
	log = !%[1]s
[gpg]
	program = %[1]s
[commit]
	gpgsign = true
[include]
	path = ../../included.cfg
`, cmd)
}

const gitPolicy = `version: 1
rules:
  - id: test.commit-needs-a-person
    effect: approve
    message: commits need a person here
    match:
      tool: git.commit
`

func newGitEnv(t *testing.T, userPolicy string) *gitEnv {
	return newSessionEnv(t, userPolicy, armedRepo)
}

// armedRepo makes a repository with one commit whose config and hooks
// name a program that creates e.marker.
func armedRepo(t *testing.T, e *gitEnv, base string) {
	realGit(t, base, false, "init", "-q", "-b", "main", e.ws)
	files := map[string]string{
		"go.mod":         "module example.com/m\n\ngo 1.22\n",
		"pkg/calc.go":    "package pkg\n\nfunc Add(a, b int) int { return a - b }\n",
		"notes.txt":      "some notes\n",
		"data.evil":      "filtered\n",
		".gitignore":     "*.log\n",
		".gitattributes": "*.txt diff=evil\n*.evil filter=evil\n",
	}
	for p, s := range files {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(e.ws, p)), 0o755))
		must(t, os.WriteFile(filepath.Join(e.ws, p), []byte(s), 0o644))
	}
	realGit(t, e.ws, false, "add", "-A")
	realGit(t, e.ws, false, "-c", "filter.evil.clean=cat", "commit", "-q", "-m", "first")
	// Now arm the repository: every program-running setting, every hook.
	must(t, os.WriteFile(filepath.Join(e.ws, ".git", "config"), []byte("[core]\n\trepositoryformatversion = 0\n\tbare = false\n"+hostileConfig(e.marker)), 0o644))
	must(t, os.WriteFile(filepath.Join(base, "included.cfg"), []byte("[core]\n\tfsmonitor = \"touch "+e.marker+"\"\n"), 0o644))
	for _, h := range []string{"pre-commit", "prepare-commit-msg", "commit-msg", "post-commit", "post-index-change", "reference-transaction", "pre-auto-gc", "post-checkout", "fsmonitor-watchman"} {
		must(t, os.WriteFile(filepath.Join(e.ws, ".git", "hooks", h), []byte("#!/bin/sh\ntouch "+e.marker+"\n"), 0o755))
	}
}

// newSessionEnv prepares a workspace with prepare, then a change set and
// a router with the real gates over it.
func newSessionEnv(t *testing.T, userPolicy string, prepare func(t *testing.T, e *gitEnv, base string)) *gitEnv {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("change sets need root here")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	ctx := context.Background()
	base := t.TempDir()
	e := &gitEnv{t: t, ws: filepath.Join(base, "ws"), marker: filepath.Join(base, "MARKER"), answer: "/approve"}
	prepare(t, e, base)
	var err error
	e.cs, err = changeset.Begin(ctx, e.ws, filepath.Join(base, "cs"))
	must(t, err)
	res, err := tool.NewResolver(tool.ResolverOptions{Workspace: e.ws, FS: e.cs.Links()})
	must(t, err)
	e.ws = res.Workspace()
	reg := tool.NewRegistry()
	must(t, builtin.Register(reg, builtin.Options{ChangeSet: e.cs, Resolver: res, Git: builtin.GitOptions{AuthorName: "fluffy test", AuthorEmail: "agent@fluffy.invalid"}}))
	home := filepath.Join(base, "home")
	must(t, os.MkdirAll(home, 0o700))
	db, err := store.OpenMain(ctx, home)
	must(t, err)
	t.Cleanup(func() { db.Close() })
	j, err := tdd.NewJournal(tdd.JournalOptions{DB: db})
	must(t, err)
	m, err := tdd.New(tdd.Options{})
	must(t, err)
	e.tdd, err = tdd.Resume(ctx, j, m, "s1", tdd.Strict)
	must(t, err)
	var srcs []policy.Source
	if userPolicy != "" {
		srcs = append(srcs, policy.Source{Name: "user.yaml", Layer: policy.LayerUser, Data: []byte(userPolicy)})
	}
	eng, err := policy.Compile(policy.Options{Protected: policy.Protected{Paths: []string{home}}}, srcs...)
	must(t, err)
	e.log, err = audit.Open(ctx, audit.Options{Path: filepath.Join(home, "audit.db"), KeyDir: filepath.Join(home, "keys")})
	must(t, err)
	t.Cleanup(func() { e.log.Close() })
	e.broker, err = approval.NewBroker(approval.Options{Evaluator: approval.PolicyEvaluator{Engine: eng}, Notifier: gitNotifier{e}, Recorder: approval.AuditRecorder{Log: e.log}, Timeout: 20 * time.Second})
	must(t, err)
	e.r, err = router.New(router.Options{
		Registry: reg, Resolver: res, State: e.tdd, Policy: eng, Audit: e.log, ChangeSet: e.cs, Approver: e.broker,
		Session: operation.Session{ID: "s1", Workspace: e.ws},
	})
	must(t, err)
	return e
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var gitCallN int

func (e *gitEnv) call(name string, args any) (string, bool) {
	e.t.Helper()
	raw, _ := json.Marshal(args)
	gitCallN++
	res, err := e.r.Call(e.t.Context(), llm.ToolCall{ID: fmt.Sprintf("g%d", gitCallN), Name: name, Args: raw})
	if err != nil {
		e.t.Fatalf("%s: runtime error %v", name, err)
	}
	return res.Content, res.IsError
}

func (e *gitEnv) kindsSince(from uint64) []string {
	e.t.Helper()
	must(e.t, e.log.Flush(context.Background()))
	var out []string
	must(e.t, e.log.Reader().Entries(context.Background(), audit.Filter{}, func(en audit.Entry) error {
		if en.Seq > from {
			out = append(out, string(en.Kind))
		}
		return nil
	}))
	return out
}

func (e *gitEnv) lastSeq() uint64 {
	var last uint64
	must(e.t, e.log.Flush(context.Background()))
	must(e.t, e.log.Reader().Entries(context.Background(), audit.Filter{}, func(en audit.Entry) error {
		last = en.Seq
		return nil
	}))
	return last
}

func (e *gitEnv) noMarker(when string) {
	e.t.Helper()
	if _, err := os.Stat(e.marker); err == nil {
		e.t.Fatalf("%s: a program named by the repository's config or hooks ran (marker exists)", when)
	}
}

// The read tools run through the router on the fast path, see the
// session's pending edits, and never run a program the repository names.
func TestGitReadToolsThroughRouter(t *testing.T) {
	e := newGitEnv(t, "")
	if out, isErr := e.call("fs.write", map[string]any{"path": "pkg/calc_test.go", "content": "package pkg\n"}); isErr {
		t.Fatalf("fs.write: %s", out)
	}
	must(t, e.cs.WriteFile("notes.txt", []byte("some notes\nmore notes\n"), 0o644))
	must(t, e.cs.WriteFile("data.evil", []byte("changed\n"), 0o644))
	must(t, e.cs.WriteFile("debug.log", []byte("ignored\n"), 0o644))
	cases := []struct {
		tool     string
		args     map[string]any
		contains []string
		absent   []string
	}{
		{"git.status", map[string]any{}, []string{"## main (", " M notes.txt\n", " M data.evil\n", "?? pkg/calc_test.go\n"}, []string{"debug.log"}},
		{"git.status", map[string]any{"path": "pkg"}, []string{"?? pkg/calc_test.go\n"}, []string{"notes.txt"}},
		{"git.diff", map[string]any{}, []string{"diff --git a/notes.txt b/notes.txt\n", "+more notes\n", "-filtered\n+changed\n"}, []string{"calc_test.go"}},
		{"git.diff", map[string]any{"stat": true, "paths": []string{"notes.txt"}}, []string{" notes.txt |    1 +\n", "1 file changed, 1 insertion(+), 0 deletions(-)"}, []string{"data.evil"}},
		{"git.diff", map[string]any{"staged": true}, []string{"no differences"}, nil},
		{"git.log", map[string]any{}, []string{" Ana first\n"}, nil},
		{"git.log", map[string]any{"format": "full", "path": "pkg"}, []string{"Author: Ana <ana@example.com>", "    first\n"}, nil},
	}
	for _, c := range cases {
		from := e.lastSeq()
		out, isErr := e.call(c.tool, c.args)
		if isErr {
			t.Errorf("%s %v: error result:\n%s", c.tool, c.args, out)
			continue
		}
		for _, s := range c.contains {
			if !strings.Contains(out, s) {
				t.Errorf("%s %v lacks %q:\n%s", c.tool, c.args, s, out)
			}
		}
		for _, s := range c.absent {
			if strings.Contains(out, s) {
				t.Errorf("%s %v shows %q:\n%s", c.tool, c.args, s, out)
			}
		}
		if got := e.kindsSince(from); !slices.Equal(got, []string{"tool.read"}) {
			t.Errorf("%s: audit kinds %v, want one tool.read (fast path)", c.tool, got)
		}
		e.noMarker(c.tool)
	}
	// Refusals by the gates before the repository is touched.
	out, isErr := e.call("git.log", map[string]any{"path": "/etc"})
	if !isErr || !strings.Contains(out, "refused by the normalize gate (rule outside-workspace)") {
		t.Errorf("git.log outside: %s", out)
	}
	out, isErr = e.call("git.log", map[string]any{"format": "fancy"})
	if !isErr || !strings.Contains(out, "refused by the decode gate (rule invalid-arguments)") {
		t.Errorf("git.log bad format: %s", out)
	}
	out, isErr = e.call("git.log", map[string]any{"revision": "--output=/tmp/x"})
	if !isErr || !strings.Contains(out, "bad revision") {
		t.Errorf("git.log option as revision: %s", out)
	}
	e.noMarker("all read tools")
	// The repository's settings are live: the real git binary does run
	// them (so the assertions above can fail).
	realGit(t, e.ws, true, "diff", "HEAD", "--", "notes.txt")
	if _, err := os.Stat(e.marker); err != nil {
		t.Fatalf("sanity: the hostile config did not run under the real git either: %v", err)
	}
}

// git.commit is a write into the change set: allowed by the default
// policy, asked of a person under a rule that says so; either way the real
// .git changes only when the change set is applied, and no hook or filter
// runs.
func TestGitCommitThroughRouter(t *testing.T) {
	for _, c := range []struct {
		name      string
		policy    string
		answer    string
		committed bool
		kinds     []string
	}{
		{"allowed by the default policy", "", "", true,
			[]string{"tool.request", "gate.state", "gate.policy", "exec.start", "exec.end"}},
		{"approved by a person", gitPolicy, "/approve", true,
			[]string{"tool.request", "gate.state", "gate.policy", "approval.request", "approval.decision", "exec.start", "exec.end"}},
		{"denied by a person", gitPolicy, "/deny not now", false,
			[]string{"tool.request", "gate.state", "gate.policy", "approval.request", "approval.decision", "tool.refused"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newGitEnv(t, c.policy)
			e.answer = c.answer
			head := realGit(t, e.ws, false, "rev-parse", "HEAD")
			realIndex, err := os.ReadFile(filepath.Join(e.ws, ".git", "index"))
			must(t, err)
			if out, isErr := e.call("fs.write", map[string]any{"path": "pkg/calc_test.go", "content": "package pkg\n"}); isErr {
				t.Fatalf("fs.write: %s", out)
			}
			must(t, e.cs.WriteFile("data.evil", []byte("changed\n"), 0o644))
			state := e.tdd.Status().State
			from := e.lastSeq()
			out, isErr := e.call("git.commit", map[string]any{"message": "add a test\n\nbody"})
			if got := e.kindsSince(from); !slices.Equal(got, c.kinds) {
				t.Errorf("audit kinds = %v, want %v", got, c.kinds)
			}
			e.noMarker("git.commit")
			if got := e.tdd.Status().State; got != state {
				t.Errorf("a commit moved the TDD machine: %s → %s", state, got)
			}
			// Until apply, the real repository has not moved.
			if got := realGit(t, e.ws, false, "rev-parse", "HEAD"); got != head {
				t.Fatalf("real HEAD moved before apply")
			}
			if b, _ := os.ReadFile(filepath.Join(e.ws, ".git", "index")); string(b) != string(realIndex) {
				t.Fatalf("real index changed before apply")
			}
			if !c.committed {
				if !isErr || !strings.Contains(out, "refused by the approval gate") {
					t.Fatalf("denied commit: %s", out)
				}
				if _, err := e.cs.Stat(".git/index"); err == nil {
					if ch, _ := e.cs.Changes(t.Context(), ".git"); len(ch) > 0 {
						t.Errorf("a refused commit wrote into .git: %v", ch)
					}
				}
				return
			}
			if isErr || !strings.Contains(out, "[main ") || !strings.Contains(out, "] add a test\n") || !strings.Contains(out, "2 files changed") {
				t.Fatalf("commit result:\n%s", out)
			}
			// The session sees its commit.
			lg, _ := e.call("git.log", map[string]any{"n": 1})
			if !strings.Contains(lg, "fluffy\u00a0test add a test") {
				t.Errorf("git.log after commit:\n%s", lg)
			}
			st, _ := e.call("git.status", map[string]any{})
			if !strings.Contains(st, "add a test)") || !strings.Contains(st, "nothing to commit") {
				t.Errorf("git.status after commit:\n%s", st)
			}
			if out, isErr := e.call("git.commit", map[string]any{"message": "again"}); !isErr || !strings.Contains(out, "nothing to commit") {
				t.Errorf("empty commit: %s", out)
			}
			e.noMarker("after commit")
			// Apply: the real repository gets the commit.
			if _, err := e.cs.Apply(t.Context()); err != nil {
				t.Fatal(err)
			}
			if got := realGit(t, e.ws, false, "log", "-1", "--format=%an <%ae>|%s|%b"); got != "fluffy test <agent@fluffy.invalid>|add a test|body\n\n" {
				t.Errorf("real log after apply: %q", got)
			}
			if got := realGit(t, e.ws, false, "show", "--name-status", "--format=", "HEAD"); got != "M\tdata.evil\nA\tpkg/calc_test.go\n" {
				t.Errorf("real commit files: %q", got)
			}
			realGit(t, e.ws, false, "fsck", "--strict")
			e.noMarker("after apply")
			// Disarm the config to ask the real git for its status.
			must(t, os.WriteFile(filepath.Join(e.ws, ".git", "config"), []byte("[core]\n\trepositoryformatversion = 0\n[filter \"evil\"]\n\tclean = cat\n\tsmudge = cat\n"), 0o644))
			if st := realGit(t, e.ws, false, "status", "--porcelain"); st != "" {
				t.Errorf("real status after apply:\n%s", st)
			}
			e.noMarker("after apply")
		})
	}
}

// Without a repository the git tools say so as a tool result; refusals
// by the gates come first.
func TestGitToolsWithoutRepository(t *testing.T) {
	e := newSessionEnv(t, "", func(t *testing.T, e *gitEnv, _ string) {
		must(t, os.MkdirAll(e.ws, 0o755))
		must(t, os.WriteFile(filepath.Join(e.ws, "README.md"), []byte("hi\n"), 0o644))
	})
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"git.status", map[string]any{}, "not a git repository"},
		{"git.diff", map[string]any{}, "not a git repository"},
		{"git.log", map[string]any{}, "not a git repository"},
		{"git.commit", map[string]any{"message": "x"}, "not a git repository"},
		{"git.commit", map[string]any{"message": "  "}, "refused by the normalize gate"},
		{"git.commit", map[string]any{}, "refused by the decode gate (rule invalid-arguments)"},
		{"git.diff", map[string]any{"paths": []string{"/etc/passwd"}}, "refused by the normalize gate (rule outside-workspace)"},
		{"git.commit", map[string]any{"message": "x", "paths": []string{"../outside"}}, "refused by the normalize gate"},
	} {
		out, isErr := e.call(c.tool, c.args)
		if !isErr || !strings.Contains(out, c.want) {
			t.Errorf("%s %v: error=%v\n%s", c.tool, c.args, isErr, out)
		}
	}
	// Only the repository as a whole is TDD-exempt (what git.commit
	// names): a file inside .git written on its own is a source write.
	out, isErr := e.call("fs.write", map[string]any{"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\n"})
	if !isErr || !strings.Contains(out, "refused by the state gate") {
		t.Errorf("fs.write into .git in strict idle: %s", out)
	}
	if ch, _ := e.cs.Changes(t.Context()); len(ch) != 0 {
		t.Errorf("the refused calls changed the change set: %v", ch)
	}
}
