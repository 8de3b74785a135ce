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
