package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/tool"
	"github.com/fluffy-agent/fluffy/internal/tool/router"
)

// fillRuntime stands for a confined command that leaves files in its
// pending folder: Run calls fill.
type fillRuntime struct {
	sandbox.Runtime
	fill func()
	err  error // Run's error after fill
}

func (r *fillRuntime) Run(context.Context, sandbox.Spec) (sandbox.Result, error) {
	r.fill()
	return sandbox.Result{}, r.err
}

const pendingPolicy = extraRules + `  - id: test.no-secrets
    effect: block
    message: no secrets here
    match:
      action: write
      path: "secrets/**"
`

// pendingEnv is a router whose tool test.pending is a confined command
// with the pending folder dir, which fill fills as the command "runs".
func pendingEnv(t *testing.T, fill func(dir string), runErr ...error) (*env, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "shared", "pending")
	must(t, os.MkdirAll(dir, 0o700))
	e := newEnv(t, setup{approver: true, userPolicy: []byte(pendingPolicy), protected: []string{".fluffy"}, hook: func(o *router.Options) {
		rt := &fillRuntime{fill: func() { fill(dir) }}
		if len(runErr) > 0 {
			rt.err = runErr[0]
		}
		o.Runtime = rt
	}})
	for _, name := range []string{"test.pending", "test.pending.net"} {
		tl, err := tool.New(tool.Definition[confinedIn]{
			Name: name, Description: "a confined command with a pending folder", Action: operation.Exec, Tags: []string{tool.TagExec},
			Execution: tool.Execution{Class: tool.Sandbox, Template: "skill"},
			Normalize: func(_ context.Context, _ *tool.Resolver, _ *confinedIn, op *operation.Operation) error {
				op.Argv = []string{"printf", "x"}
				if name == "test.pending.net" {
					// As a skill with network: its output is untrusted.
					op.Tags = append(op.Tags, tool.TagUntrustedOutput)
				}
				return nil
			},
			Command: func(context.Context, *confinedIn) (tool.Command, error) {
				return tool.Command{Argv: []string{"/skills/demo/run.sh"}, Confine: &tool.Confinement{Pending: dir}}, nil
			},
		})
		must(t, err)
		must(t, e.reg.Register(tl))
	}
	return e, dir
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.WriteFile(p, []byte(s), 0o644))
}

// Each pending file is an fs.write of the workspace file at its path,
// through every gate: allowed, refused by the state or policy gate, or
// refused before the gates for what fs.write cannot be (a link, a FIFO,
// a device, a file too big or not text). The folder is emptied and the
// result says what became of each file.
func TestPendingWrites(t *testing.T) {
	cases := []struct {
		name string
		make func(t *testing.T, dir string)
		// line is the start of the result's line for the file, after
		// "pending/<rel>: ".
		rel, line string
		// written: the change set then holds the file with its content.
		written bool
	}{
		{"regular file", func(t *testing.T, d string) { writeFile(t, filepath.Join(d, "notes/result.md"), "# result\n") }, "notes/result.md", "written into the change set as notes/result.md (allow: rule default.write-workspace)", true},
		{"state gate", func(t *testing.T, d string) { writeFile(t, filepath.Join(d, "pkg/sub.go"), "package pkg\n") }, "pkg/sub.go", "refused: refused by the state gate (rule need_failing_test)", false},
		{"policy gate", func(t *testing.T, d string) { writeFile(t, filepath.Join(d, "secrets/x.txt"), "x") }, "secrets/x.txt", "refused: refused by the policy gate (rule test.no-secrets)", false},
		{"protected path", func(t *testing.T, d string) { writeFile(t, filepath.Join(d, ".fluffy/policy.yaml"), "rules: []\n") }, ".fluffy/policy.yaml", "refused: refused by the policy gate (rule builtin.protected-write)", false},
		{"symlink out", func(t *testing.T, d string) { must(t, os.Symlink("/etc/passwd", filepath.Join(d, "passwd"))) }, "passwd", "refused: a symbolic link: pending/ takes regular files only", false},
		{"symlinked folder", func(t *testing.T, d string) { must(t, os.Symlink("/etc", filepath.Join(d, "etc"))) }, "etc", "refused: a symbolic link", false},
		{"link deeper down", func(t *testing.T, d string) {
			must(t, os.MkdirAll(filepath.Join(d, "a/b"), 0o755))
			must(t, os.Symlink("../../../../..", filepath.Join(d, "a/b/up")))
		}, "a/b/up", "refused: a symbolic link", false},
		{"pending/ itself a link", func(t *testing.T, d string) {
			must(t, os.Remove(d))
			must(t, os.Symlink("/etc", d))
		}, "", "refused: pending/ itself is not a folder (a symbolic link): nothing in it was taken", false},
		{"fifo", func(t *testing.T, d string) { must(t, syscall.Mkfifo(filepath.Join(d, "fifo"), 0o644)) }, "fifo", "refused: a FIFO", false},
		{"device", func(t *testing.T, d string) {
			must(t, syscall.Mknod(filepath.Join(d, "null"), syscall.S_IFCHR|0o666, 1<<8|3))
		}, "null", "refused: a character device", false},
		{"too big", func(t *testing.T, d string) {
			writeFile(t, filepath.Join(d, "big.txt"), strings.Repeat("a", tool.MaxArgsBytes+1))
		}, "big.txt", "refused: 1048577 bytes, over the 1048576 fs.write takes", false},
		{"escaping once encoded", func(t *testing.T, d string) {
			writeFile(t, filepath.Join(d, "quotes.txt"), strings.Repeat(`"`, tool.MaxArgsBytes/2+1))
		}, "quotes.txt", "refused: its fs.write arguments would be over", false},
		{"not text", func(t *testing.T, d string) { writeFile(t, filepath.Join(d, "bin.dat"), "\xff\xfe") }, "bin.dat", "refused: not UTF-8 text", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var dir string
			e, dir := pendingEnv(t, func(d string) { c.make(t, d) })
			from := e.last()
			res, err := e.r.Call(t.Context(), tc("test.pending", map[string]any{}))
			if err != nil {
				t.Fatal(err)
			}
			want := "pending/" + c.rel + ": " + c.line
			if !strings.Contains(res.Content, want) {
				t.Fatalf("result lacks %q:\n%s", want, res.Content)
			}
			ents, err := os.ReadDir(dir)
			if err != nil || len(ents) != 0 {
				t.Fatalf("pending folder after the run: %v, %v (want it empty)", ents, err)
			}
			if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
				t.Fatalf("pending/ after the run: %v, %v; want a folder", fi, err)
			}
			if _, err := os.Stat("/etc/passwd"); err != nil {
				t.Fatalf("emptying pending/ followed a link: %v", err)
			}
			if _, serr := e.cs.Stat(c.rel); c.rel != "" && c.written != (serr == nil) {
				t.Fatalf("change set has %s: %v, want %v", c.rel, serr == nil, c.written)
			}
			// Every file is recorded as a call made on the run's behalf.
			var via []audit.ToolRequest
			for _, en := range e.entries(from) {
				var p audit.ToolRequest
				if en.Kind == audit.KindToolRequest && json.Unmarshal(en.Payload.(json.RawMessage), &p) == nil && p.Via != "" {
					via = append(via, p)
				}
			}
			if len(via) != 1 || via[0].Tool != "fs.write" || via[0].Via != "test.pending call "+strings.TrimSuffix(via[0].Call, ".pending.1") {
				t.Fatalf("tool.request entries made on the run's behalf: %+v", via)
			}
		})
	}
}

// A pending write that widens a skill's manifest is held for a person
// as the model's own fs.write is (builtin.skill-widening), the request
// naming the run; an empty pending folder adds nothing to the result.
func TestPendingWriteWidensSkill(t *testing.T) {
	round := 0
	e, _ := pendingEnv(t, func(d string) {
		if round == 0 {
			writeFile(t, filepath.Join(d, "skills/demo/skill.yaml"), "network: [exfil.example.net]\n")
		}
	})
	writeFile(t, filepath.Join(e.ws, "skills/demo/SKILL.md"), "---\nname: demo\ndescription: a demo\n---\nbody\n")
	writeFile(t, filepath.Join(e.ws, "skills/demo/skill.yaml"), "network: []\n")
	res, err := e.r.Call(t.Context(), tc("test.pending", map[string]any{}))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Content, "pending/skills/demo/skill.yaml: written into the change set as skills/demo/skill.yaml (approve: rule builtin.skill-widening (approved by a person") {
		t.Fatalf("result:\n%s", res.Content)
	}
	if len(e.requests) != 1 {
		t.Fatalf("%d approval requests, want 1", len(e.requests))
	}
	req := e.requests[0]
	if !strings.Contains(req.Summary, "fs.write proposed by test.pending call") || !strings.Contains(req.Items[0].Step.Preview, "WIDENS skill demo") {
		t.Fatalf("request: %q, preview:\n%s", req.Summary, req.Items[0].Step.Preview)
	}
	round++
	res, err = e.r.Call(t.Context(), tc("test.pending", map[string]any{}))
	if err != nil || strings.Contains(res.Content, "pending/") {
		t.Fatalf("a run with nothing pending: %v\n%s", err, res.Content)
	}
	if !slices.Equal([]int{e.asked}, []int{1}) {
		t.Fatalf("asked %d times", e.asked)
	}
}

// A command that failed still has its pending files taken: the error
// the model sees ends with what became of each.
func TestPendingAfterAFailedRun(t *testing.T) {
	e, dir := pendingEnv(t, func(d string) { writeFile(t, filepath.Join(d, "notes/partial.md"), "half\n") }, errors.New("killed"))
	res, err := e.r.Call(t.Context(), tc("test.pending", map[string]any{}))
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(res.Content, "killed") || !strings.Contains(res.Content, "pending/notes/partial.md: written into the change set") {
		t.Fatalf("result:\n%s", res.Content)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("pending/ after the run: %v", ents)
	}
}

// What a run with untrusted output proposes is judged in an untrusted
// session: the session is marked before its files are proposed, so an
// edit of a skill is held for a person (default.untrusted-skills), while
// the same edit from a clean session's run is allowed.
func TestPendingFromAnUntrustedRun(t *testing.T) {
	for _, c := range []struct{ tool, decision string }{
		{"test.pending", "(allow: rule default.write-workspace)"},
		{"test.pending.net", "(approve: rule default.untrusted-skills (approved by a person"},
	} {
		t.Run(c.tool, func(t *testing.T) {
			e, _ := pendingEnv(t, func(d string) {
				writeFile(t, filepath.Join(d, "skills/demo/SKILL.md"), "---\nname: demo\ndescription: d\n---\nbetter\n")
			})
			res, err := e.r.Call(t.Context(), tc(c.tool, map[string]any{}))
			if err != nil {
				t.Fatal(err)
			}
			if want := "pending/skills/demo/SKILL.md: written into the change set as skills/demo/SKILL.md " + c.decision; !strings.Contains(res.Content, want) {
				t.Fatalf("result lacks %q:\n%s", want, res.Content)
			}
		})
	}
}
