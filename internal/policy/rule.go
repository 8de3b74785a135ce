package policy

import (
	"fmt"
	"strconv"

	"github.com/fluffy-agent/fluffy/internal/operation"
)

// rule is one compiled YAML rule (or an extension, which has no static
// effect).
type rule struct {
	id, description, message string
	effect                   Effect
	layer                    Layer
	source                   string
	line, col                int
	originText               string
	match                    *matcher
	except                   []*matcher
	whenSrc                  string
	when                     *celProgram
	classify                 string
	ext                      *extension

	// Index keys, computed by index(): exact tool names (nil: any tool
	// or a glob) and actions (nil: any).
	exactTools []string
	toolGlobs  bool
}

func (r *rule) origin() string {
	if r.originText != "" {
		return r.originText
	}
	if r.line > 0 {
		return fmt.Sprintf("%s:%d:%d", r.source, r.line, r.col)
	}
	return r.source
}

func (r *rule) index() {
	r.originText = ""
	r.originText = r.origin()
	if r.match == nil {
		return
	}
	for _, g := range r.match.tools {
		if g.literal {
			r.exactTools = append(r.exactTools, g.pat)
		} else {
			r.toolGlobs = true
		}
	}
}

// matcher is the compiled form of a match or except block: every field
// given must match (and), any pattern of a field may match (or).
type matcher struct {
	tools     []glob
	actions   []operation.Action
	paths     []pathGlob
	workspace *bool
	argv      []argvPattern
	hosts     []hostPattern
	tags      []glob
	env       []glob
	wrapper   *bool
	dynamic   *bool
	// execCapable and writtenByAgent match what the exec-capable table
	// says of a command (see execcap.go).
	execCapable    *bool
	writtenByAgent *bool
}

// atom is one part of an operation that is decided on its own: one path,
// one host, one simple command, or the operation itself when it has none
// of those.
type atom struct {
	action operation.Action
	path   string // canonical absolute, "" for none
	inWS   bool
	host   *operation.Host
	cmd    *operation.Command
	subj   string
	// via is set on a command found through an exec-capable argument
	// (git -c core.pager=CMD): what ran it, for the reason.
	via string
	// exec is set when the command runs code the table cannot model
	// (python -c, awk): why.
	exec string
	// written is set when the command runs a file the agent wrote.
	written bool
}

func (a *atom) subject() string {
	if a.subj == "" {
		a.subj = a.makeSubject()
	}
	return a.subj
}

func (a *atom) makeSubject() string {
	switch {
	case a.path != "":
		return string(a.action) + " " + a.path
	case a.host != nil:
		return fmt.Sprintf("%s %s:%d", a.action, a.host.Name, a.host.Port)
	case a.cmd != nil:
		return string(a.action) + " " + quoteArgv(a.cmd.Argv)
	}
	return string(a.action)
}

func quoteArgv(argv []string) string {
	n := 2
	for _, a := range argv {
		n += len(a) + 3
	}
	b := make([]byte, 0, min(n, 4096))
	b = append(b, '[')
	for i, s := range argv {
		if i > 0 {
			b = append(b, ' ')
		}
		if len(s) > 256 {
			b = strconv.AppendQuote(b, s[:256])
			b = append(b, "…"...)
			continue
		}
		b = strconv.AppendQuote(b, s)
	}
	return string(append(b, ']'))
}

// matches reports whether m matches atom a of op. strict is true for allow
// rules: program names then match narrowly (see argvPattern).
func (m *matcher) matches(op *operation.Operation, a *atom, ws string, strict bool) bool {
	if len(m.tools) > 0 && !anyGlob(m.tools, op.Tool) {
		return false
	}
	if len(m.actions) > 0 {
		ok := false
		for _, x := range m.actions {
			ok = ok || x == a.action
		}
		if !ok {
			return false
		}
	}
	if len(m.paths) > 0 {
		if a.path == "" {
			return false
		}
		ok := false
		for _, g := range m.paths {
			if g.match(a.path, ws) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if m.workspace != nil && (a.path == "" || a.inWS != *m.workspace) {
		return false
	}
	if len(m.argv) > 0 {
		if a.cmd == nil {
			return false
		}
		ok := false
		for _, p := range m.argv {
			if p.match(a.cmd.Argv, strict) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if len(m.hosts) > 0 {
		if a.host == nil {
			return false
		}
		ok := false
		for _, h := range m.hosts {
			if h.match(a.host.Name, a.host.Port) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if len(m.tags) > 0 {
		ok := false
		for _, t := range op.Tags {
			if anyGlob(m.tags, t) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if len(m.env) > 0 {
		if a.cmd == nil {
			return false
		}
		ok := false
		for _, e := range a.cmd.Env {
			if anyGlob(m.env, e) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if m.wrapper != nil && (a.cmd == nil || a.cmd.Wrapper != *m.wrapper) {
		return false
	}
	if m.dynamic != nil && (a.cmd == nil || a.cmd.Dynamic != *m.dynamic) {
		return false
	}
	if m.execCapable != nil && (a.cmd == nil || (a.exec != "") != *m.execCapable) {
		return false
	}
	if m.writtenByAgent != nil && (a.cmd == nil || a.written != *m.writtenByAgent) {
		return false
	}
	return true
}
