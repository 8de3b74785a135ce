package shell

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite testdata/parse.golden")

// render prints commands one a line in a stable, readable notation:
// argv as JSON, then markers.
func render(line string) string {
	cmds, err := Parse(line)
	var b strings.Builder
	b.WriteString("$ " + strings.ReplaceAll(line, "\n", "\\n") + "\n")
	if err != nil {
		b.WriteString("  error\n")
	}
	for _, c := range cmds {
		j, _ := json.Marshal(c.Argv)
		b.WriteString("  " + string(j))
		if c.Wrapper {
			b.WriteString(" wrapper")
		}
		if len(c.Env) > 0 {
			e, _ := json.Marshal(c.Env)
			b.WriteString(" env=" + string(e))
		}
		if c.Dir != "" {
			b.WriteString(" dir=" + c.Dir)
		}
		if len(c.Writes) > 0 {
			w, _ := json.Marshal(c.Writes)
			b.WriteString(" writes=" + string(w))
		}
		if c.Dynamic {
			b.WriteString(" DYNAMIC(" + c.Unresolved + ")")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestParseGolden runs every line of testdata/parse.txt through Parse and
// compares with testdata/parse.golden (go test -update rewrites it).
func TestParseGolden(t *testing.T) {
	in, err := os.ReadFile(filepath.Join("testdata", "parse.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(string(in), "\n"), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.ReplaceAll(line, `\n`, "\n")
		b.WriteString(render(line))
	}
	golden := filepath.Join("testdata", "parse.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), b.String()); diff != "" {
		t.Errorf("parse output differs from %s (-want +got):\n%s", golden, diff)
	}
}

// FuzzParse checks that no input panics or escapes the limits, and that a
// line the parser rejects always yields a Dynamic command.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"go test ./...", "sh -c 'rm -rf /'", "env X=1 rm", "a | b && c; (d) > e", "{a,b}", "echo $(x) `y`", "find . -exec rm {} +", "xargs -0 -I{} rm {}", "bash -lc \"bash -c 'id'\"", "echo 'x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		cmds, err := Parse(line)
		if len(cmds) > MaxCommands+1 {
			t.Fatalf("%d commands, over the limit", len(cmds))
		}
		if err != nil {
			dyn := false
			for _, c := range cmds {
				dyn = dyn || c.Dynamic
			}
			if !dyn {
				t.Fatalf("Parse(%q) failed (%v) without a Dynamic command: %+v", line, err, cmds)
			}
		}
		for _, c := range cmds {
			if c.Dynamic && c.Unresolved == "" {
				t.Fatalf("Dynamic command without a reason: %+v", c)
			}
		}
	})
}

func TestExpandArgv(t *testing.T) {
	got := Expand([]string{"env", "X=1", "sh", "-c", "rm -rf / | cat"})
	var argvs [][]string
	for _, c := range got {
		argvs = append(argvs, c.Argv)
	}
	want := [][]string{{"env", "X=1"}, {"sh", "-c"}, {"rm", "-rf", "/"}, {"cat"}}
	if diff := cmp.Diff(want, argvs); diff != "" {
		t.Fatalf("Expand (-want +got):\n%s", diff)
	}
	if got[2].Env[0] != "X=1" {
		t.Fatalf("env not carried into sh -c: %+v", got[2])
	}
	if c := Expand([]string{"rm", "a\x00b"}); !c[0].Dynamic {
		t.Fatalf("NUL byte accepted: %+v", c)
	}
}
