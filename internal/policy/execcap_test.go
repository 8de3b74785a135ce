package policy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy/shell"
)

// defaultExecTable compiles the embedded table.
func defaultExecTable(t testing.TB) *execTable {
	t.Helper()
	tab, errs := parseExecSource(Source{Name: ExecTableName, Layer: LayerDefault, Data: ExecTable})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return tab
}

// TestExecTableEntries checks the embedded table as data: every entry
// says where its behaviour is documented, no program is listed twice (one
// entry per program keeps the triggers readable), and the programs the
// shell parser already unwraps are not repeated here.
func TestExecTableEntries(t *testing.T) {
	tab := defaultExecTable(t)
	if len(tab.progs) < 60 || len(tab.env) < 40 {
		t.Fatalf("table has %d programs and %d variables; it shrank", len(tab.progs), len(tab.env))
	}
	for name, ps := range tab.progs {
		if len(ps) != 1 {
			t.Errorf("%s: listed in %d entries", name, len(ps))
		}
		for _, p := range ps {
			if len(p.source) < 20 {
				t.Errorf("%s: source %q says too little", name, p.source)
			}
		}
		for _, w := range []string{"env", "nice", "timeout", "nohup", "xargs", "find", "sudo", "doas", "stdbuf", "ionice", "time"} {
			if name == w {
				t.Errorf("%s is unwrapped by the shell parser; do not list it here too", name)
			}
		}
	}
	for _, e := range tab.env {
		if e.source == "" {
			t.Errorf("variable %s has no source", e.name.pat)
		}
	}
}

// TestExecAnalyse is the table applied to single commands: what is nested,
// what is exec-capable, which files run.
func TestExecAnalyse(t *testing.T) {
	tab := defaultExecTable(t)
	tests := []struct {
		argv   []string
		env    []string
		nested [][]string // argv of every nested command, in order
		code   string     // substring of the exec-capable reason, "" for none
		files  []string
	}{
		{argv: []string{"git", "log"}},
		{argv: []string{"git", "-c", "core.pager=less -R", "log"}, nested: [][]string{{"less", "-R"}}},
		{argv: []string{"git", "-ccore.pager=id", "log"}, nested: [][]string{{"id"}}},
		{argv: []string{"git", "-c", "CORE.PAGER=id", "log"}, nested: [][]string{{"id"}}},
		{argv: []string{"git", "-c", "color.ui=never", "log", "-c"}},
		{argv: []string{"git", "-c", "alias.x=!id", "x"}, code: "git -c sets a configuration key"},
		{argv: []string{"git", "-c"}, code: "without its value"},
		{argv: []string{"git", "log", "-c", "x"}},
		{argv: []string{"git", "rebase", "-i", "--exec", "make test", "main"}, nested: [][]string{{"make", "test"}}},
		{argv: []string{"git", "bisect", "run", "make", "test"}, nested: [][]string{{"make", "test"}}},
		{argv: []string{"git", "submodule", "foreach", "git", "pull"}, nested: [][]string{{"git", "pull"}}},
		{argv: []string{"tar", "xf", "a.tar", "--to-command=sh -c id"}, nested: [][]string{{"sh", "-c"}, {"id"}}},
		{argv: []string{"flock", "-n", "/tmp/l", "ls", "-l"}, nested: [][]string{{"ls", "-l"}}},
		{argv: []string{"flock", "--bogus", "/tmp/l", "ls"}, code: "unknown option"},
		{argv: []string{"chrt", "-r", "5", "ls"}, nested: [][]string{{"ls"}}},
		{argv: []string{"strace", "--trace=open", "ls"}, nested: [][]string{{"ls"}}},
		{argv: []string{"strace", "-o", "log", "ls"}, code: "unknown option"},
		{argv: []string{"watch", "-n", "2", "ls", "-l"}, nested: [][]string{{"ls", "-l"}}},
		{argv: []string{"perl", "-lne", "print"}, code: "perl -e"},
		{argv: []string{"perl", "script.pl", "-e", "x"}, files: []string{"script.pl"}},
		{argv: []string{"python3", "-m", "pytest"}},
		{argv: []string{"awk", "-F:", "{print $1}"}, code: "awk's program text"},
		{argv: []string{"gawk", "-S", "{print $1}"}},
		{argv: []string{"vim", "+!id"}, code: "vim command"},
		{argv: []string{"make", "-C", "sub", "test"}, files: []string{"sub/GNUmakefile", "sub/makefile", "sub/Makefile"}},
		{argv: []string{"make", "-C", "sub", "-f", "x.mk"}, files: []string{"sub/x.mk", "sub/GNUmakefile", "sub/makefile", "sub/Makefile"}},
		{argv: []string{"npm", "test"}, files: []string{"package.json", ".npmrc", ".yarnrc", ".yarnrc.yml"}},
		{argv: []string{"git", "clone", "-c", "core.fsmonitor=id", "url"}, code: "git clone --config"},
		{argv: []string{"npm", "view", "x"}},
		{argv: []string{"./run.sh", "x"}, files: []string{"./run.sh"}},
		{argv: []string{"ls"}, env: []string{"PAGER=less"}, nested: [][]string{{"less"}}},
		{argv: []string{"ls"}, env: []string{"LD_PRELOAD=/x.so"}, code: "LD_PRELOAD"},
		{argv: []string{"cargo", "test"}, env: []string{"CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER=id"}, nested: [][]string{{"id"}}, files: []string{"."}},
		{argv: []string{"export", "EDITOR=vi", "X=1"}, nested: [][]string{{"vi"}}},
		{argv: []string{"ls"}, env: []string{"PAGER="}},
		{argv: []string{"export", "-n", "PAGER"}, code: "exported with a value set elsewhere"},
		{argv: []string{"rg", "--pre", "sh -c id", "TODO"}, nested: [][]string{{"sh", "-c"}, {"id"}}},
		{argv: []string{"rg", "-e", "--pre", "x"}},
		{argv: []string{"git", "send-email", "--sendmail-cmd=id", "x.patch"}, nested: [][]string{{"id"}}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.argv, " "), func(t *testing.T) {
			c := operation.Command{Argv: tc.argv, Env: tc.env}
			f := tab.analyse(&c)
			var got [][]string
			for _, n := range f.nested {
				for _, nc := range n.cmds {
					got = append(got, nc.Argv)
				}
			}
			if !slices.EqualFunc(got, tc.nested, slices.Equal) {
				t.Errorf("nested = %q, want %q", got, tc.nested)
			}
			if (f.code == "") != (tc.code == "") || !strings.Contains(f.code, tc.code) {
				t.Errorf("code = %q, want %q", f.code, tc.code)
			}
			if !slices.Equal(f.files, tc.files) {
				t.Errorf("files = %q, want %q", f.files, tc.files)
			}
		})
	}
}

func TestAgentWritten(t *testing.T) {
	upper := t.TempDir()
	for _, f := range []string{"Makefile", "src/a.go"} {
		p := filepath.Join(upper, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A whiteout (a deleted file) is a 0/0 character device; creating
	// one needs privilege.
	whiteout := syscall.Mknod(filepath.Join(upper, "gone"), syscall.S_IFCHR|0o600, 0) == nil
	got, err := AgentWritten(upper, "/ws")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/ws/Makefile", "/ws/src/a.go"}; !slices.Equal(got, want) {
		t.Errorf("AgentWritten = %q, want %q (whiteout made: %v)", got, want, whiteout)
	}
	if got, err := AgentWritten(filepath.Join(upper, "missing"), "/ws"); err != nil || len(got) != 0 {
		t.Errorf("missing upper: %q, %v", got, err)
	}
}

// FuzzExecConsistency checks the promise of the exec-capable table: a rule
// set that allows some programs never allows a command line one of whose
// nested commands (found through the table) it would not allow on its
// own, and never allows a command the table marks exec-capable.
func FuzzExecConsistency(f *testing.F) {
	for _, s := range []string{
		`git -c core.pager='sh -c id' log`,
		`git -c core.pager=curl log`,
		`PAGER='curl x' git -p help`,
		`export EDITOR=curl && git commit`,
		`flock /tmp/l flock /tmp/m curl x`,
		`tar -cf a.tar --checkpoint-action=exec='curl x' .`,
		`find . -exec git -c core.editor=curl commit ';'`,
		`python3 -c 'import os'`,
		`timeout 5 git rebase --exec 'ls; curl x' main`,
		`watch -n 1 'git log | curl -d @- x'`,
		`chrt -f 1 taskset 1 strace ls`,
		`git bisect run flock l sh -c 'curl x'`,
		`ls && git -c alias.x='!curl' x`,
	} {
		f.Add(s)
	}
	e, err := Compile(Options{Default: Allow}, Source{Name: "user.yaml", Layer: LayerUser, Data: []byte(`
rules:
  - id: allow-some
    effect: allow
    match:
      action: exec
      argv: [[git, ...], [tar, ...], [flock, ...], [python3, ...], [ls, ...], [timeout, ...], [watch, ...], [chrt, ...], [taskset, ...], [strace, ...], [sh, ...], [find, ...]]
  - id: no-curl
    effect: block
    match: {action: exec, argv: [curl, ...]}
  - id: ask-id
    effect: approve
    match: {action: exec, argv: [id, ...]}
`)})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, line string) {
		op := operation.Operation{Tool: "shell.exec", Action: operation.Exec, CommandLine: line,
			Session: operation.Session{ID: "s", Workspace: "/ws"}}
		if len(line) > 4096 {
			return
		}
		op.Commands, _ = shell.Parse(line)
		d := e.Decide(t.Context(), op)
		if d.Effect != Allow {
			return
		}
		for _, a := range e.atoms(&op, "/ws", nil) {
			if a.cmd == nil {
				continue
			}
			if a.exec != "" {
				t.Fatalf("%q allowed, but %q is exec-capable (%s)", line, a.cmd.Argv, a.exec)
			}
			if a.via == "" {
				continue
			}
			alone := operation.Operation{Tool: "shell.exec", Action: operation.Exec, Commands: []operation.Command{*a.cmd},
				Session: op.Session}
			if d2 := e.Decide(t.Context(), alone); d2.Effect != Allow {
				t.Fatalf("%q allowed, but its nested %q alone is %s by %s", line, a.cmd.Argv, d2.Effect, d2.Rule)
			}
		}
	})
}
