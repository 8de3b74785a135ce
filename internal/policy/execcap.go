package policy

import (
	_ "embed"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy/shell"
)

// ExecTable is the embedded table of exec-capable arguments: for common
// programs, the options, operands and environment variables that make them
// run other code. It is data, reviewed like policy; policy files extend it
// under exec_capable.
//
//go:embed execcap.yaml
var ExecTable []byte

// ExecTableName is the name the embedded table is reported under.
const ExecTableName = "(exec-capable table)"

// RuleExecCapable decides an exec-capable invocation no rule allowed
// explicitly (see docs/policy.md, "Programs that run other code").
const RuleExecCapable = "builtin.exec-capable"

// maxExecDepth bounds how deep nested commands found through the table are
// followed (git -c core.pager='timeout 5 sh -c …' is three levels).
const maxExecDepth = 6

// runKind is what an exec-capable argument runs.
type runKind int

const (
	runNone  runKind = iota + 1 // nothing: a known harmless value
	runShell                    // a shell command line, parsed and judged
	runArgv                     // the remaining words are a command, judged
	runCode                     // code that cannot be known statically
	runFile                     // a file: judged by written_by_agent
)

var runKinds = map[string]runKind{"none": runNone, "shell": runShell, "argv": runArgv, "code": runCode, "file": runFile}

// execTrigger is one way a program is told to run something.
type execTrigger struct {
	options    []string   // option spellings ("-c", "--rsh", "+"); empty for operands and always-triggers
	value      string     // lower-case prefix the option's value must have; the rest is what runs
	positional int        // the n-th operand (1-based, subcommand words included)
	subcommand [][]string // the operands that must come first (git rebase, npm run)
	global     bool       // the option counts only before the first operand
	runs       runKind
	join       bool     // runs shell: the operand and every later word, joined by spaces
	files      []string // runs file without option or operand: these files, in the command's directory
	stdin      bool     // applies when there is no operand and none of unless was given (a REPL or a program read from stdin)
	unless     []string // options that make a stdin trigger not apply (-c, -m, --version)
	reason     string
}

// execProgram is one table entry: what a program's exec-capable
// arguments are, and how to find them in an argv.
type execProgram struct {
	names       []string
	source      string
	valueOpts   map[string]bool // options that take a value
	flags       map[string]bool // options without a value
	strict      bool            // every option is listed: an unknown one fails closed
	dirOpts     map[string]bool // options that set the directory the program works in (make -C)
	safeFlags   []string        // any of these disables the code triggers (sed --sandbox)
	permute     bool            // options may follow operands (GNU getopt)
	subcommands bool            // value options apply before the first operand only (git -C)
	triggers    []execTrigger
	origin      string
}

// envTrigger is an environment variable that makes programs run something.
type envTrigger struct {
	name   glob
	runs   runKind
	source string
	reason string
	origin string
}

// execTable is the compiled table: programs by base name, then variables.
type execTable struct {
	progs map[string][]*execProgram
	list  []*execProgram // every entry, in the order they were read
	env   []*envTrigger
}

func newExecTable() *execTable { return &execTable{progs: map[string][]*execProgram{}} }

// add appends another table's entries after t's own: entries of the same
// program are all consulted, t's first.
func (t *execTable) add(o *execTable) {
	for name, ps := range o.progs {
		t.progs[name] = append(t.progs[name], ps...)
	}
	t.list = append(t.list, o.list...)
	t.env = append(t.env, o.env...)
}

// parseExecTable reads a table: the embedded file's root, or the value of
// a policy file's exec_capable key.
func (l *loader) parseExecTable(n *yaml.Node) *execTable {
	t := newExecTable()
	l.mapping(n, map[string]func(k, v *yaml.Node){
		"version": func(_, v *yaml.Node) {
			if v.Kind != yaml.ScalarNode || v.Value != "1" {
				l.errf(v, "version: only version 1 exists")
			}
		},
		"programs": func(_, v *yaml.Node) {
			if v.Kind != yaml.SequenceNode {
				l.errf(v, "exec_capable.programs: expected a list of programs")
				return
			}
			for _, pn := range v.Content {
				if p := l.parseExecProgram(pn); p != nil {
					t.list = append(t.list, p)
					for _, name := range p.names {
						t.progs[name] = append(t.progs[name], p)
					}
				}
			}
		},
		"env": func(_, v *yaml.Node) {
			if v.Kind != yaml.SequenceNode {
				l.errf(v, "exec_capable.env: expected a list of variables")
				return
			}
			for _, en := range v.Content {
				if e := l.parseEnvTrigger(en); e != nil {
					t.env = append(t.env, e)
				}
			}
		},
	})
	return t
}

func (l *loader) origin(n *yaml.Node) string {
	return fmt.Sprintf("%s:%d:%d", l.src.Name, n.Line, n.Column)
}

// runs reads a runs: value; a project file may not declare a value
// harmless (that would loosen the user's policy).
func (l *loader) runs(v *yaml.Node, key string) runKind {
	s, ok := l.scalar(v, key)
	if !ok {
		return 0
	}
	k, ok := runKinds[s]
	if !ok {
		l.errf(v, "%s: unknown kind %q; use shell, argv, code, file or none", key, s)
		return 0
	}
	if k == runNone && l.src.Layer == LayerProject {
		l.errf(v, "%s: a project policy may not declare a value harmless (runs: none); only the user's file may", key)
	}
	return k
}

func (l *loader) set(v *yaml.Node, key string) map[string]bool {
	m := map[string]bool{}
	for _, s := range l.strings(v, key) {
		m[s.Value] = true
	}
	return m
}

func (l *loader) parseExecProgram(n *yaml.Node) *execProgram {
	before := len(l.errs)
	p := &execProgram{valueOpts: map[string]bool{}, dirOpts: map[string]bool{}, origin: l.origin(n)}
	l.mapping(n, map[string]func(k, v *yaml.Node){
		"names": func(_, v *yaml.Node) {
			for _, s := range l.strings(v, "exec_capable.programs.names") {
				if strings.ContainsAny(s.Value, "/*? ") || s.Value == "" {
					l.errf(s, "exec_capable.programs.names: %q: give a program's base name, without '/' or wildcards", s.Value)
					continue
				}
				p.names = append(p.names, s.Value)
			}
		},
		"source": func(_, v *yaml.Node) { p.source, _ = l.scalar(v, "exec_capable.programs.source") },
		"value_options": func(_, v *yaml.Node) {
			p.valueOpts = l.set(v, "exec_capable.programs.value_options")
		},
		"flags": func(_, v *yaml.Node) {
			p.flags = l.set(v, "exec_capable.programs.flags")
			p.strict = true
		},
		"strict":      func(_, v *yaml.Node) { p.strict = l.boolean(v, "exec_capable.programs.strict") },
		"dir_options": func(_, v *yaml.Node) { p.dirOpts = l.set(v, "exec_capable.programs.dir_options") },
		"safe_flags": func(_, v *yaml.Node) {
			for _, s := range l.strings(v, "exec_capable.programs.safe_flags") {
				p.safeFlags = append(p.safeFlags, s.Value)
			}
		},
		"permute":     func(_, v *yaml.Node) { p.permute = l.boolean(v, "exec_capable.programs.permute") },
		"subcommands": func(_, v *yaml.Node) { p.subcommands = l.boolean(v, "exec_capable.programs.subcommands") },
		"triggers": func(_, v *yaml.Node) {
			if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
				l.errf(v, "exec_capable.programs.triggers: expected a list of triggers")
				return
			}
			for _, tn := range v.Content {
				if t, ok := l.parseTrigger(tn); ok {
					p.triggers = append(p.triggers, t)
				}
			}
		},
	})
	if n.Kind != yaml.MappingNode {
		return nil
	}
	if len(p.names) == 0 {
		l.errf(n, "exec_capable program has no names")
	}
	if strings.TrimSpace(p.source) == "" {
		l.errf(n, "exec_capable program %v has no source (say where the behaviour is documented)", p.names)
	}
	if len(p.triggers) == 0 {
		l.errf(n, "exec_capable program %v has no triggers", p.names)
	}
	for _, t := range p.triggers {
		for _, o := range t.options {
			p.valueOpts[o] = true // a trigger option takes a value
		}
	}
	if len(l.errs) > before {
		return nil
	}
	return p
}

func (l *loader) parseTrigger(n *yaml.Node) (execTrigger, bool) {
	before := len(l.errs)
	const key = "exec_capable.programs.triggers"
	var t execTrigger
	var fileNode *yaml.Node
	l.mapping(n, map[string]func(k, v *yaml.Node){
		"option": func(_, v *yaml.Node) {
			for _, s := range l.strings(v, key+".option") {
				if !strings.HasPrefix(s.Value, "-") && s.Value != "+" {
					l.errf(s, "%s.option: %q: an option starts with '-' (or is \"+\" for +COMMAND)", key, s.Value)
					continue
				}
				t.options = append(t.options, s.Value)
			}
		},
		"value": func(_, v *yaml.Node) {
			s, _ := l.scalar(v, key+".value")
			t.value = lowerASCII(s)
		},
		"positional": func(_, v *yaml.Node) {
			var i int
			if v.Kind != yaml.ScalarNode || v.Decode(&i) != nil || i < 1 || i > 16 {
				l.errf(v, "%s.positional: expected a number from 1 to 16", key)
				return
			}
			t.positional = i
		},
		"subcommand": func(_, v *yaml.Node) {
			for _, s := range l.strings(v, key+".subcommand") {
				t.subcommand = append(t.subcommand, strings.Fields(s.Value))
			}
		},
		"global": func(_, v *yaml.Node) { t.global = l.boolean(v, key+".global") },
		"runs":   func(_, v *yaml.Node) { t.runs = l.runs(v, key+".runs") },
		"join":   func(_, v *yaml.Node) { t.join = l.boolean(v, key+".join") },
		"file": func(_, v *yaml.Node) {
			fileNode = v
			for _, s := range l.strings(v, key+".file") {
				t.files = append(t.files, s.Value)
			}
		},
		"reason": func(_, v *yaml.Node) { t.reason, _ = l.scalar(v, key+".reason") },
		"stdin":  func(_, v *yaml.Node) { t.stdin = l.boolean(v, key+".stdin") },
		"unless": func(_, v *yaml.Node) {
			for _, s := range l.strings(v, key+".unless") {
				t.unless = append(t.unless, s.Value)
			}
		},
	})
	if n.Kind != yaml.MappingNode {
		return t, false
	}
	switch {
	case t.runs == 0 && len(l.errs) == before:
		l.errf(n, "%s: trigger has no runs (shell, argv, code, file or none)", key)
	case len(t.options) > 0 && t.positional > 0:
		l.errf(n, "%s: a trigger is an option or an operand (positional), not both", key)
	case t.runs == runArgv && t.positional == 0:
		l.errf(n, "%s: runs: argv needs positional (the operand where the command starts)", key)
	case len(t.files) > 0 && (t.runs != runFile || len(t.options) > 0 || t.positional > 0):
		l.errf(fileNode, "%s.file: only for runs: file without option or positional", key)
	case t.join && t.positional == 0:
		l.errf(n, "%s: join needs positional", key)
	case t.stdin && (len(t.options) > 0 || t.positional > 0 || t.runs != runCode):
		l.errf(n, "%s: stdin is a trigger of its own (no option, no positional) and runs code", key)
	}
	t.files = slices.Clip(t.files)
	return t, len(l.errs) == before
}

func (l *loader) parseEnvTrigger(n *yaml.Node) *envTrigger {
	before := len(l.errs)
	e := &envTrigger{origin: l.origin(n)}
	var named bool
	l.mapping(n, map[string]func(k, v *yaml.Node){
		"name": func(_, v *yaml.Node) {
			if s, ok := l.scalar(v, "exec_capable.env.name"); ok {
				if s == "" || strings.ContainsAny(s, "= ") {
					l.errf(v, "exec_capable.env.name: %q is not a variable name", s)
				}
				e.name, named = compileGlob(s), true
			}
		},
		"runs":   func(_, v *yaml.Node) { e.runs = l.runs(v, "exec_capable.env.runs") },
		"source": func(_, v *yaml.Node) { e.source, _ = l.scalar(v, "exec_capable.env.source") },
		"reason": func(_, v *yaml.Node) { e.reason, _ = l.scalar(v, "exec_capable.env.reason") },
	})
	if n.Kind != yaml.MappingNode {
		return nil
	}
	if !named {
		l.errf(n, "exec_capable.env entry has no name")
	}
	if e.runs == 0 && len(l.errs) == before {
		l.errf(n, "exec_capable.env entry has no runs (shell, code, file or none)")
	}
	if e.runs == runArgv {
		l.errf(n, "exec_capable.env: runs: argv is for operands; a variable runs shell, code or file")
	}
	if strings.TrimSpace(e.source) == "" {
		l.errf(n, "exec_capable.env entry has no source (say where the behaviour is documented)")
	}
	if len(l.errs) > before {
		return nil
	}
	return e
}

// ExecEntry describes one entry of the effective exec-capable table, for
// explain.
type ExecEntry struct {
	Names  []string `json:"names"`
	Source string   `json:"source"`
	Origin string   `json:"origin"`
}

// ExecEntries lists the effective exec-capable table: the policy files'
// entries first, then the embedded ones, variables last.
func (e *Engine) ExecEntries() []ExecEntry {
	var out []ExecEntry
	for _, p := range e.exec.list {
		out = append(out, ExecEntry{Names: p.names, Source: p.source, Origin: p.origin})
	}
	for _, v := range e.exec.env {
		out = append(out, ExecEntry{Names: []string{"$" + v.name.pat}, Source: v.source, Origin: v.origin})
	}
	return out
}

// execFinding is what the table says about one command.
type execFinding struct {
	code   string   // non-empty: the command runs code not known statically; the reason
	nested []nested // commands it runs that are known statically
	files  []string // files it runs, as written (relative to dir)
}

type nested struct {
	cmds []operation.Command
	via  string
}

// argvOption is one option found in an argv.
type argvOption struct {
	name, val string
	operands  int // operands before it
}

// analyse applies the table to c.
func (t *execTable) analyse(c *operation.Command) execFinding {
	var f execFinding
	if len(c.Argv) == 0 {
		return f
	}
	if !c.Wrapper {
		t.envFindings(c.Env, &f)
	}
	prog := path.Base(c.Argv[0])
	if strings.Contains(c.Argv[0], "/") {
		f.files = append(f.files, c.Argv[0]) // running a file by its path
	}
	switch prog {
	case "export", "declare", "typeset", "local", "readonly":
		// Exported variables reach the commands that follow.
		var env []string
		for _, a := range c.Argv[1:] {
			if shell.IsAssign(a) {
				env = append(env, a)
			} else if t.envNamed(a) {
				// export PAGER: its value was set apart (PAGER=…;
				// export PAGER), where the table does not look.
				f.addCode("the variable " + a + " is exported with a value set elsewhere")
			}
		}
		t.envFindings(env, &f)
	}
	for _, p := range t.progs[prog] {
		p.analyse(c, &f)
	}
	return f
}

// envNamed reports whether a variable named name runs something.
func (t *execTable) envNamed(name string) bool {
	for _, e := range t.env {
		if e.name.match(name) {
			return e.runs != runNone
		}
	}
	return false
}

func (t *execTable) envFindings(env []string, f *execFinding) {
	for _, kv := range env {
		name, val, _ := strings.Cut(kv, "=")
		for _, e := range t.env {
			if !e.name.match(name) {
				continue
			}
			why := e.reason
			switch e.runs {
			case runShell:
				if why == "" {
					why = "the variable " + name + " names a command programs run"
				}
				f.addShell(val, why)
			case runCode:
				if why == "" {
					why = "the variable " + name + " makes programs run code that is not known statically"
				}
				f.addCode(why)
			case runFile:
				if val != "" {
					f.files = append(f.files, val)
				}
			}
			break
		}
	}
}

func (f *execFinding) addCode(why string) {
	if f.code == "" {
		f.code = why
	}
}

func (f *execFinding) addShell(text, why string) {
	if strings.TrimSpace(text) == "" {
		return
	}
	cmds, _ := shell.Parse(text) // a parse error is a Dynamic command
	f.nested = append(f.nested, nested{cmds: cmds, via: why})
}

// analyse finds p's triggers in c.
func (p *execProgram) analyse(c *operation.Command, f *execFinding) {
	args := c.Argv[1:]
	// Most commands have a few options and operands: keep them off the
	// heap (this runs for every command of every decision).
	var obuf [8]argvOption
	var pbuf [8]string
	var ibuf [8]int
	opts, operands, operandAt := obuf[:0], pbuf[:0], ibuf[:0] // operandAt: index in args of each operand
	endOpts := false
	safe := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if endOpts || a == "-" || len(a) < 2 || (a[0] != '-' && a[0] != '+') || (a[0] == '+' && !p.valueOpts["+"]) {
			operands = append(operands, a)
			operandAt = append(operandAt, i)
			if !p.permute && !p.subcommands {
				endOpts = true
			}
			continue
		}
		if a == "--" {
			endOpts = true
			continue
		}
		after := len(operands) > 0
		known := func(name string) bool {
			return p.valueOpts[name] && !(p.subcommands && after && !p.subOption(name, operands))
		}
		take := func(name, val string, attached bool) bool {
			if !attached {
				if i+1 >= len(args) {
					f.addCode(fmt.Sprintf("%s %s without its value", prog(c), name))
					return false
				}
				i++
				val = args[i]
			}
			opts = append(opts, argvOption{name: name, val: val, operands: len(operands)})
			return true
		}
		if a[0] == '+' {
			opts = append(opts, argvOption{name: "+", val: a[1:], operands: len(operands)})
			continue
		}
		if slices.Contains(p.safeFlags, a) {
			safe = true
		}
		if name, val, ok := strings.Cut(a, "="); ok && (known(name) || p.flags[name] || strings.HasPrefix(a, "--")) {
			opts = append(opts, argvOption{name: name, val: val, operands: len(operands)})
			continue
		}
		if known(a) {
			if !take(a, "", false) {
				return
			}
			continue
		}
		if strings.HasPrefix(a, "--") || p.flags[a] {
			if p.strict && !p.flags[a] && !after {
				f.addCode(fmt.Sprintf("unknown option %q of %s: cannot tell which argument it runs", a, prog(c)))
				return
			}
			opts = append(opts, argvOption{name: a, operands: len(operands)})
			continue
		}
		// Short options, possibly grouped (-lne CODE).
		for j := 1; j < len(a); j++ {
			name := dash(a[j])
			if slices.Contains(p.safeFlags, name) {
				safe = true
			}
			if known(name) {
				if rest := a[j+1:]; rest != "" {
					take(name, rest, true)
				} else if !take(name, "", false) {
					return
				}
				break
			}
			if p.strict && !p.flags[name] && !after {
				f.addCode(fmt.Sprintf("unknown option %q of %s: cannot tell which argument it runs", name, prog(c)))
				return
			}
			opts = append(opts, argvOption{name: name, operands: len(operands)})
		}
	}
	dir := "" // where this program's files are (make -C): per entry, so no entry moves another's
	for _, o := range opts {
		if p.dirOpts[o.name] && path.IsAbs(o.val) {
			dir = o.val
		} else if p.dirOpts[o.name] {
			dir = path.Join(dir, o.val)
		}
	}
	var ubuf [8]bool
	used := ubuf[:0]
	for range opts {
		used = append(used, false)
	}
	for _, t := range p.triggers {
		if t.runs == runCode && safe {
			continue
		}
		if !t.subcommandMatches(operands) {
			continue
		}
		switch {
		case len(t.options) > 0:
			for i, o := range opts {
				if used[i] || !slices.Contains(t.options, o.name) || (t.global && o.operands > 0) {
					continue
				}
				if len(t.subcommand) > 0 && o.operands < len(t.subcommandOf(operands)) {
					continue
				}
				if t.value != "" && !hasPrefixFold(o.val, t.value) {
					continue
				}
				used[i] = true
				rest := o.val
				if t.value != "" {
					rest = strings.TrimLeft(o.val[len(t.value):], "= \t")
				}
				what := ""
				if t.describes() {
					what = prog(c) + " " + o.name
					if t.value != "" {
						what += " " + strings.TrimRight(t.value, "=")
					}
				}
				p.apply(t, what, rest, nil, dir, f)
			}
		case t.stdin:
			if len(operands) > 0 || slices.ContainsFunc(opts, func(o argvOption) bool { return slices.Contains(t.unless, o.name) }) {
				continue
			}
			what := ""
			if t.describes() {
				what = prog(c) + " without a script reads its program from stdin, and"
			}
			p.apply(t, what, "", nil, dir, f)
		case t.positional > 0:
			if len(operands) < t.positional {
				continue
			}
			k := t.positional - 1
			what := ""
			switch {
			case t.runs == runArgv:
				what = prog(c) + " " + strings.Join(args[:operandAt[k]], " ")
			case t.describes():
				what = fmt.Sprintf("%s operand %d", prog(c), t.positional)
			}
			p.apply(t, what, operands[k], args[operandAt[k]:], dir, f)
		default:
			what := ""
			if t.describes() {
				what = prog(c)
				if len(t.subcommand) > 0 {
					what += " " + strings.Join(t.subcommandOf(operands), " ")
				}
			}
			p.apply(t, what, "", nil, dir, f)
		}
	}
}

func prog(c *operation.Command) string { return path.Base(c.Argv[0]) }

// hasPrefixFold reports whether s starts with prefix (lower-case), ASCII
// letters compared without case: git and ssh fold their keys this way,
// and only this way.
func hasPrefixFold(s, prefix string) bool {
	if len(s) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != prefix[i] {
			return false
		}
	}
	return true
}

func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// describes reports whether a finding of t needs a description (files and
// harmless values have none shown).
func (t execTrigger) describes() bool {
	return t.reason == "" && t.runs != runFile && t.runs != runNone
}

// dashLetters holds "-a", "-b", ...: the names of short options, without
// building a string per letter.
var dashLetters = func() (d [128]string) {
	for i := range d {
		d[i] = "-" + string(rune(i))
	}
	return d
}()

func dash(b byte) string {
	if b < 128 {
		return dashLetters[b]
	}
	return "-" + string(b)
}

// subOption reports whether name is an option of a trigger bound to the
// subcommand the operands start with (git rebase --exec), recognised
// after it.
func (p *execProgram) subOption(name string, operands []string) bool {
	for _, t := range p.triggers {
		if len(t.subcommand) > 0 && slices.Contains(t.options, name) && t.subcommandOf(operands) != nil {
			return true
		}
	}
	return false
}

func (t execTrigger) subcommandOf(operands []string) []string {
	for _, s := range t.subcommand {
		if len(operands) >= len(s) && slices.Equal(operands[:len(s)], s) {
			return s
		}
	}
	return nil
}

func (t execTrigger) subcommandMatches(operands []string) bool {
	return len(t.subcommand) == 0 || t.subcommandOf(operands) != nil
}

// apply records what trigger t found: val is the option value or operand,
// rest the words from the operand on.
func (p *execProgram) apply(t execTrigger, what, val string, rest []string, dir string, f *execFinding) {
	why := t.reason
	switch t.runs {
	case runShell:
		if why == "" {
			why = what + " runs a command"
		}
		if t.join {
			val = strings.Join(rest, " ")
		}
		f.addShell(val, why)
	case runArgv:
		if why == "" {
			why = what + " runs a command"
		}
		f.nested = append(f.nested, nested{cmds: shell.Expand(rest), via: why})
	case runCode:
		if why == "" {
			why = what + " runs code that is not known statically"
		}
		f.addCode(why)
	case runFile:
		files := t.files
		if len(files) == 0 && val != "" {
			files = []string{val}
		}
		if dir == "" && f.files == nil {
			f.files = files // clipped when loaded: an append copies
			break
		}
		for _, file := range files {
			if dir != "" && !path.IsAbs(file) {
				file = path.Join(dir, file)
			}
			f.files = append(f.files, file)
		}
	}
}

// runsWritten reports whether any file c runs (as f lists them) is, or is
// inside, or contains, a path the agent wrote. ws is the workspace, base
// the command's directory.
func runsWritten(f *execFinding, written []string, base string) bool {
	if len(written) == 0 || len(f.files) == 0 {
		return false
	}
	for _, file := range f.files {
		p := file
		if !filepath.IsAbs(p) {
			if base == "" {
				return true // cannot place it: assume the worst
			}
			p = filepath.Join(base, p)
		}
		p = filepath.Clean(p)
		for _, w := range written {
			if w == p || within(w, p) || within(p, w) {
				return true
			}
		}
	}
	return false
}
