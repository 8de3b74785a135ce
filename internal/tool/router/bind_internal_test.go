package router

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// TestInputSource binds a command's files through a real change set: what
// the sandbox would run, edits and deletions of the change set included;
// arguments that cannot name a file are not inputs and do not make the
// operation unbound.
func TestInputSource(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("change sets need root here")
	}
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	for _, d := range []string{ws, filepath.Join(ws, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("x.py", "print(1)\n")
	write("gone.py", "print(2)\n")
	for name, target := range map[string]string{"link.py": "x.py", "loop": "loop", "out": "/etc/hostname"} {
		if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := changeset.Begin(t.Context(), ws, filepath.Join(base, "cs"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tool.NewResolver(tool.ResolverOptions{Workspace: ws, FS: cs.Links()})
	if err != nil {
		t.Fatal(err)
	}
	ws = res.Workspace()
	src := inputSource{res: res, cs: cs}
	bind := func(argv ...string) operation.Operation {
		op := operation.Operation{Commands: []operation.Command{{Argv: argv}}, Session: operation.Session{Workspace: ws}}
		approval.BindInputs(&op, src)
		if op.Unbound != "" {
			t.Fatalf("%q: unbound: %s", argv, op.Unbound)
		}
		return op
	}
	paths := func(op operation.Operation) string {
		var ps []string
		for _, in := range op.Inputs {
			ps = append(ps, strings.TrimPrefix(in.Path, ws+"/"))
		}
		return strings.Join(ps, " ")
	}
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"python3", "x.py"}, "x.py"},
		{[]string{"python3", "link.py"}, "x.py"},
		{[]string{"python3", "-c", strings.Repeat("print(1);", 40)}, ""},
		{[]string{"python3", "x.py/y", "sub", "loop", "out", "missing.py"}, ""},
	} {
		if got := paths(bind(tc.argv...)); got != tc.want {
			t.Errorf("%q: inputs %q, want %q", tc.argv, got, tc.want)
		}
	}
	before := bind("python3", "x.py", "gone.py")
	if paths(before) != "gone.py x.py" {
		t.Fatalf("inputs %q", paths(before))
	}
	// The change set's edit and deletion are what the sandbox runs.
	if err := cs.WriteFile("x.py", []byte("import os\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cs.Remove("gone.py", false); err != nil {
		t.Fatal(err)
	}
	after := bind("python3", "x.py", "gone.py")
	if paths(after) != "x.py" || after.Inputs[0].SHA256 == before.Inputs[1].SHA256 {
		t.Fatalf("after the change set's edit: %+v (before %+v)", after.Inputs, before.Inputs)
	}
}
