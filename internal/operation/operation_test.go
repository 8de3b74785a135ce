package operation

import "testing"

func TestSignature(t *testing.T) {
	base := Operation{Tool: "shell.exec", Action: Exec, Argv: []string{"rm", "-rf", "x"}, Paths: []Path{{Abs: "/w/x", Raw: "x", InWorkspace: true}}, Session: Session{ID: "s1"}, Size: 10}
	same := base
	same.Session = Session{ID: "s2", Mode: "explore"}
	same.Size = 99
	same.Paths = []Path{{Abs: "/w/x", Raw: "./x"}}
	same.Tokens = []string{"tok"}
	if base.Signature() != same.Signature() {
		t.Error("session, size, raw paths and tokens must not change the signature")
	}
	for name, mutate := range map[string]func(*Operation){
		"tool":       func(o *Operation) { o.Tool = "fs.write" },
		"action":     func(o *Operation) { o.Action = Write },
		"argv":       func(o *Operation) { o.Argv = []string{"rm", "-rf", "y"} },
		"argv split": func(o *Operation) { o.Argv = []string{"rm", "-rf x"} },
		"path":       func(o *Operation) { o.Paths = []Path{{Abs: "/w/y"}} },
		"host":       func(o *Operation) { o.Hosts = []Host{{Name: "example.com", Port: 443}} },
		"command":    func(o *Operation) { o.Commands = []Command{{Argv: []string{"rm"}}} },
		"line":       func(o *Operation) { o.CommandLine = "rm -rf x" },
		"env":        func(o *Operation) { o.Commands = []Command{{Argv: []string{"rm", "-rf", "x"}, Env: []string{"X=1"}}} },
		"dir":        func(o *Operation) { o.Commands = []Command{{Argv: []string{"rm", "-rf", "x"}, Dir: "sub"}} },
		"writes": func(o *Operation) {
			o.Commands = []Command{{Argv: []string{"rm", "-rf", "x"}, Writes: []string{"/w/out"}}}
		},
		"arguments": func(o *Operation) { o.ArgsSHA256 = "00" },
		"input":     func(o *Operation) { o.Inputs = []Input{{Path: "/w/x.py", SHA256: "00"}} },
		"unbound":   func(o *Operation) { o.Unbound = "too many files" },
	} {
		other := base
		mutate(&other)
		if other.Signature() == base.Signature() {
			t.Errorf("changing %s kept the signature", name)
		}
	}
}

func TestActions(t *testing.T) {
	for _, a := range Actions() {
		if !a.Valid() {
			t.Errorf("%s not valid", a)
		}
	}
	if Action("delete").Valid() {
		t.Error("unknown action valid")
	}
	op := Operation{Tags: []string{"writes", "destructive"}}
	if !op.HasTag("destructive") || op.HasTag("net") {
		t.Error("HasTag")
	}
}

// TestSignatureParts: every part of a command that changes what it does
// changes the signature, including parts that sit at the same place in
// two commands (one env entry "A=1 B=2" against two).
func TestSignatureParts(t *testing.T) {
	cmd := func(c Command) string {
		return Operation{Tool: "shell.exec", Action: Exec, Commands: []Command{c}}.Signature()
	}
	argv := []string{"python3", "x.py"}
	seen := map[string]string{}
	for name, c := range map[string]Command{
		"plain":       {Argv: argv},
		"env":         {Argv: argv, Env: []string{"A=1"}},
		"env joined":  {Argv: argv, Env: []string{"A=1 B=2"}},
		"env split":   {Argv: argv, Env: []string{"A=1", "B=2"}},
		"dir":         {Argv: argv, Dir: "sub"},
		"dir abs":     {Argv: argv, Dir: "/w/sub"},
		"writes":      {Argv: argv, Writes: []string{"/w/out"}},
		"two writes":  {Argv: argv, Writes: []string{"/w/out", "/w/err"}},
		"wrapper":     {Argv: argv, Wrapper: true},
		"dynamic":     {Argv: argv, Dynamic: true},
		"argv joined": {Argv: []string{"python3 x.py"}},
	} {
		sig := cmd(c)
		if other, ok := seen[sig]; ok {
			t.Errorf("%s and %s share a signature", name, other)
		}
		seen[sig] = name
	}
	a := Operation{Tool: "shell.exec", Inputs: []Input{{Path: "/w/x.py", SHA256: "aa"}}}
	b := Operation{Tool: "shell.exec", Inputs: []Input{{Path: "/w/x.py", SHA256: "bb"}}}
	if a.Signature() == b.Signature() {
		t.Error("another content of the same input kept the signature")
	}
}

func TestGuessAction(t *testing.T) {
	for tool, want := range map[string]Action{
		"fs.read": Read, "fs.grep": Read, "fs.write": Write, "fs.edit": Write,
		"shell.exec": Exec, "http.get": Net, "secret.use": Secret, "chat.send": Message,
		"test.run": "", "fsx.read": "",
	} {
		if got := GuessAction(tool); got != want {
			t.Errorf("GuessAction(%q) = %q, want %q", tool, got, want)
		}
	}
}
