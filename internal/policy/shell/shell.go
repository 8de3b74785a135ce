// Package shell turns a command line, as a model writes it, into the full
// list of simple commands it would run, so that policy decides on every one
// of them and never on a joined string.
//
// It uses mvdan.cc/sh/v3 (the parser behind shfmt) in bash mode and walks
// pipelines, lists (; && ||), subshells, brace groups, control flow,
// function bodies, command and process substitutions and here-documents.
// Output redirections become Writes of the commands they apply to. Strings
// given to sh -c / bash -c (and the other shells) are parsed recursively, and
// wrappers (env, nice, timeout, nohup, time, stdbuf, command, exec, sudo,
// doas, xargs, find -exec) are unwrapped: the wrapper's own part and the
// wrapped command are separate entries.
//
// Anything that cannot be known statically — a variable or substitution in
// any word, eval, source, a script file given to a shell, a shell reading
// its commands from stdin, arguments added at run time by xargs or find, an
// unparseable line, input beyond the limits — yields a command with Dynamic
// set and the reason in Unresolved. Policy never allows such a command.
//
// The tool router uses this package when it normalizes a shell.exec call;
// the policy engine uses it for argv given without a shell.
package shell

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"

	"github.com/fluffy-agent/fluffy/internal/operation"
)

// Limits on what one command line may expand to. Beyond them the result is
// a Dynamic command: policy never allows it.
const (
	MaxLine     = 64 << 10 // bytes of command line
	MaxCommands = 1024     // simple commands in one line
	MaxDepth    = 8        // nesting of sh -c and wrappers
)

// ErrParse is wrapped by the error Parse returns for a line the shell parser
// rejects.
var ErrParse = errors.New("shell: cannot parse command line")

// Parse returns every simple command that line would run. On error the
// commands returned still describe the line (as one Dynamic command), so a
// caller that ignores the error stays on the safe side.
func Parse(line string) (cmds []operation.Command, err error) {
	p := &parser{}
	defer func() {
		// The parser is outside code: a panic in it must not take the
		// kernel down, and must not let the line through.
		if r := recover(); r != nil {
			cmds = []operation.Command{dynamic(nil, "command line could not be analysed")}
			err = fmt.Errorf("%w: internal error: %v", ErrParse, r)
		}
	}()
	err = p.line(line, 0)
	return p.out, err
}

// Expand returns the commands an argv given without a shell would run: the
// argv itself and, through wrappers, what it wraps.
func Expand(argv []string) (cmds []operation.Command) {
	p := &parser{}
	defer func() {
		if r := recover(); r != nil {
			cmds = []operation.Command{dynamic(argv, "command could not be analysed")}
		}
	}()
	for _, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return []operation.Command{dynamic(argv, "NUL byte in argument")}
		}
	}
	p.command(operation.Command{Argv: argv}, 0)
	return p.out
}

type parser struct {
	out []operation.Command

	// The working directory as cd statements in sequence change it:
	// cwd is relative to the start (or absolute), cwdUnknown is set after
	// a cd whose target is not known. seq holds the simple commands that
	// run in sequence at the top of the current line (joined by ; and
	// &&), the only places where a cd is followed.
	cwd        string
	cwdUnknown string
	seq        map[*syntax.CallExpr]bool
	nestedDir  string // where the next nested shell starts
}

// sequential collects the calls reachable from stmts through ; and &&.
func sequential(stmts []*syntax.Stmt, into map[*syntax.CallExpr]bool) {
	for _, st := range stmts {
		if st.Background || st.Coprocess || st.Negated {
			continue
		}
		switch c := st.Cmd.(type) {
		case *syntax.CallExpr:
			into[c] = true
		case *syntax.BinaryCmd:
			if c.Op == syntax.AndStmt {
				sequential([]*syntax.Stmt{c.X, c.Y}, into)
			}
		}
	}
}

var cdCommands = map[string]bool{"cd": true, "pushd": true, "popd": true, "chdir": true}

// chdir follows a cd. It reports false when the cd cannot be followed.
func (p *parser) chdir(c operation.Command, seq bool) {
	if !seq || c.Dynamic || c.Argv[0] != "cd" {
		p.cwdUnknown = "the working directory changes (" + c.Argv[0] + ") in a way that is not followed"
		return
	}
	var target string
	n := 0
	for _, a := range c.Argv[1:] {
		if len(a) > 1 && a[0] == '-' && n == 0 {
			continue // -L, -P, -e, -@
		}
		target = a
		n++
	}
	if n != 1 || target == "-" || target == "" {
		p.cwdUnknown = "cd without one static directory"
		return
	}
	if path.IsAbs(target) {
		p.cwd = path.Clean(target)
	} else {
		p.cwd = path.Join(p.cwd, target)
	}
	if p.cwd == "." {
		p.cwd = ""
	}
}

// placed applies the current working directory to a command.
func (p *parser) placed(c operation.Command) operation.Command {
	if p.cwdUnknown != "" && !c.Dynamic {
		c.Dynamic, c.Unresolved = true, p.cwdUnknown
	}
	if p.cwd == "" {
		return c
	}
	c.Dir = p.cwd
	if len(c.Writes) > 0 {
		ws := make([]string, len(c.Writes))
		for i, w := range c.Writes {
			if path.IsAbs(w) {
				ws[i] = w
			} else {
				ws[i] = path.Join(p.cwd, w)
			}
		}
		c.Writes = ws
	}
	return c
}

func dynamic(argv []string, why string) operation.Command {
	return operation.Command{Argv: argv, Dynamic: true, Unresolved: why}
}

func (p *parser) add(c operation.Command) {
	if len(p.out) >= MaxCommands {
		if len(p.out) == MaxCommands {
			p.out = append(p.out, dynamic(nil, fmt.Sprintf("more than %d commands", MaxCommands)))
		}
		return
	}
	p.out = append(p.out, c)
}

// line parses one shell text at the given nesting depth.
func (p *parser) line(line string, depth int) error {
	if len(line) > MaxLine {
		p.add(dynamic(nil, fmt.Sprintf("command line longer than %d bytes", MaxLine)))
		return fmt.Errorf("%w: longer than %d bytes", ErrParse, MaxLine)
	}
	if strings.IndexByte(line, 0) >= 0 {
		p.add(dynamic(nil, "NUL byte in command line"))
		return fmt.Errorf("%w: NUL byte", ErrParse)
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(line), "")
	if err != nil {
		p.add(dynamic(nil, "unparseable command line"))
		return fmt.Errorf("%w: %w", ErrParse, err)
	}
	// A nested shell (sh -c) has its own working directory.
	savedCwd, savedUnknown, savedSeq := p.cwd, p.cwdUnknown, p.seq
	if depth > 0 {
		p.cwd, p.cwdUnknown = p.nestedDir, ""
	}
	p.seq = map[*syntax.CallExpr]bool{}
	sequential(f.Stmts, p.seq)
	p.walk(f, depth)
	if depth > 0 {
		p.cwd, p.cwdUnknown = savedCwd, savedUnknown
	}
	p.seq = savedSeq
	return nil
}

// frame is what an enclosing node contributes to the simple commands below
// it: redirection targets, and whether one of them was unresolvable.
type frame struct {
	writes  []string
	dynamic string
	barrier bool // a substitution: outer redirections do not apply inside
}

func (p *parser) walk(root syntax.Node, depth int) {
	var stack []frame
	inherited := func() (writes []string, why string) {
		for i := len(stack) - 1; i >= 0; i-- {
			writes = append(writes, stack[i].writes...)
			if why == "" {
				why = stack[i].dynamic
			}
			if stack[i].barrier {
				break
			}
		}
		return writes, why
	}
	syntax.Walk(root, func(n syntax.Node) bool {
		if n == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		var fr frame
		switch n := n.(type) {
		case *syntax.Stmt:
			fr.writes, fr.dynamic = redirects(n.Redirs)
		case *syntax.CmdSubst, *syntax.ProcSubst:
			fr.barrier = true
		case *syntax.CallExpr:
			writes, why := inherited()
			p.call(n, writes, why, depth)
		case *syntax.DeclClause:
			writes, why := inherited()
			argv := []string{n.Variant.Value}
			c := operation.Command{Writes: writes}
			for _, a := range n.Args {
				if a.Naked && a.Value == nil && a.Name == nil {
					continue
				}
				if a.Name != nil {
					argv = append(argv, a.Name.Value)
				} else if s, ok := static(a.Value); ok {
					argv = append(argv, s...)
				} else {
					c.Dynamic, c.Unresolved = true, "expansion in "+n.Variant.Value+" argument"
				}
			}
			c.Argv = argv
			if why != "" && !c.Dynamic {
				c.Dynamic, c.Unresolved = true, why
			}
			p.add(c)
		}
		stack = append(stack, fr)
		return true
	})
}

// redirects returns the files a statement's redirections write.
func redirects(rs []*syntax.Redirect) (writes []string, why string) {
	for _, r := range rs {
		switch r.Op {
		case syntax.RdrOut, syntax.AppOut, syntax.RdrAll, syntax.AppAll, syntax.RdrClob, syntax.RdrInOut, syntax.AppClob, syntax.DplOut:
		default:
			continue
		}
		if r.Word == nil {
			continue
		}
		vals, ok := static(r.Word)
		if !ok || len(vals) != 1 {
			why = "redirection target is not static"
			continue
		}
		v := vals[0]
		if r.Op == syntax.DplOut && (v == "-" || isDigits(v)) {
			continue // >&2, >&-: a file descriptor, not a file
		}
		if harmlessTargets[v] {
			continue // 2>/dev/null writes nothing anywhere
		}
		writes = append(writes, v)
	}
	return writes, why
}

// harmlessTargets are redirection targets that are not files anyone keeps.
var harmlessTargets = map[string]bool{"/dev/null": true, "/dev/stdout": true, "/dev/stderr": true, "/dev/tty": true}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// call records one simple command.
func (p *parser) call(ce *syntax.CallExpr, writes []string, why string, depth int) {
	c := operation.Command{Writes: writes}
	for _, a := range ce.Assigns {
		if a.Name == nil {
			continue
		}
		val := ""
		if a.Value != nil {
			vals, ok := static(a.Value)
			if !ok || len(vals) != 1 {
				c.Dynamic, c.Unresolved = true, "expansion in assignment to "+a.Name.Value
				vals = []string{printWord(a.Value)}
			}
			val = vals[0]
		}
		if a.Array != nil || a.Index != nil {
			c.Dynamic, c.Unresolved = true, "array assignment"
		}
		c.Env = append(c.Env, a.Name.Value+"="+val)
	}
	if len(ce.Args) == 0 {
		// A bare assignment runs nothing itself; substitutions in its
		// value are walked as their own commands.
		return
	}
	for i, w := range ce.Args {
		vals, ok := static(w)
		if !ok {
			if !c.Dynamic {
				c.Dynamic = true
				if i == 0 {
					c.Unresolved = "variable or substitution in command position"
				} else {
					c.Unresolved = "variable or substitution in an argument"
				}
			}
			vals = []string{printWord(w)}
		}
		c.Argv = append(c.Argv, vals...)
	}
	if why != "" && !c.Dynamic {
		c.Dynamic, c.Unresolved = true, why
	}
	c = p.placed(c)
	p.command(c, depth)
	if len(c.Argv) > 0 && cdCommands[path.Base(c.Argv[0])] {
		p.chdir(c, p.seq[ce])
	}
}

// static returns the fields a word expands to when that is known without
// running anything: literals, quotes, escapes and brace expansion. Tilde,
// parameters, substitutions, arithmetic and extended globs are not.
func static(w *syntax.Word) ([]string, bool) {
	if w == nil {
		return nil, false
	}
	if !staticParts(w.Parts, true) {
		return nil, false
	}
	if lit, ok := w.Parts[0].(*syntax.Lit); ok && strings.HasPrefix(lit.Value, "~") {
		return nil, false
	}
	cp := *w // SplitBraces rewrites the word; keep the tree intact
	cp.Parts = append([]syntax.WordPart(nil), w.Parts...)
	w = &cp
	words := []*syntax.Word{w}
	if syntax.SplitBraces(w) {
		words = words[:0]
		for bw, err := range expand.BracesSeq(nil, w) {
			if err != nil {
				return nil, false
			}
			words = append(words, bw)
			if len(words) > MaxCommands {
				return nil, false
			}
		}
	}
	out := make([]string, 0, len(words))
	for _, bw := range words {
		// Fields removes quotes and escapes; with no environment and no
		// directory reader it neither expands parameters nor globs.
		fs, err := expand.Fields(nil, bw)
		if err != nil || len(fs) != 1 {
			return nil, false
		}
		out = append(out, fs[0])
	}
	return out, true
}

func staticParts(parts []syntax.WordPart, top bool) bool {
	for _, part := range parts {
		switch x := part.(type) {
		case *syntax.Lit:
		case *syntax.SglQuoted:
		case *syntax.DblQuoted:
			if x.Dollar || !staticParts(x.Parts, false) {
				return false
			}
		case *syntax.BraceExp:
			if !top {
				return false
			}
			for _, e := range x.Elems {
				if !staticParts(e.Parts, true) {
					return false
				}
			}
		default:
			return false
		}
	}
	return true
}

func printWord(w *syntax.Word) string {
	var b strings.Builder
	if err := syntax.NewPrinter().Print(&b, w); err != nil {
		return "?"
	}
	return b.String()
}

// command records c and what it wraps.
func (p *parser) command(c operation.Command, depth int) {
	if len(c.Argv) == 0 {
		p.add(c)
		return
	}
	if depth > MaxDepth {
		c.Dynamic, c.Unresolved = true, fmt.Sprintf("wrappers nested deeper than %d", MaxDepth)
		p.add(c)
		return
	}
	if c.Dynamic && c.Unresolved == "variable or substitution in command position" {
		p.add(c)
		return
	}
	name := path.Base(c.Argv[0])
	u, ok := wrappers[name]
	if !ok {
		switch name {
		case "eval", "source", ".":
			if !c.Dynamic {
				c.Dynamic, c.Unresolved = true, name+" runs code that is not known statically"
			}
		}
		p.add(c)
		return
	}
	w, err := u(c)
	own := w.own
	if err != nil {
		own = c
		if !own.Dynamic {
			own.Dynamic, own.Unresolved = true, err.Error()
		}
		w = unwrapped{}
	}
	own.Wrapper = err == nil && (len(w.inner) > 0 || w.script != nil)
	p.add(own)
	for _, in := range w.inner {
		in.Dir = c.Dir
		p.command(in, depth+1)
	}
	if w.script != nil {
		start := len(p.out)
		p.nestedDir = c.Dir
		_ = p.line(*w.script, depth+1) // a parse error is recorded as a Dynamic command
		for i := start; i < len(p.out); i++ {
			p.out[i].Env = append(append([]string(nil), c.Env...), p.out[i].Env...)
			p.out[i].Writes = append(p.out[i].Writes, c.Writes...)
			// The text was parsed for what it shows (block rules still
			// see an rm in it), but if the outer command was not static,
			// neither is anything it runs.
			if c.Dynamic && !p.out[i].Dynamic {
				p.out[i].Dynamic, p.out[i].Unresolved = true, c.Unresolved
			}
		}
	}
}
