package approval

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

// Prompt renders the consolidated question a person reads: what needs
// their approval (with the preview), what is already allowed, and what is
// blocked and why. Steps keep their plan numbers so answers refer to them.
func (r Request) Prompt() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Approval %s for session %s", r.ID, r.Session)
	if r.Summary != "" {
		// The model writes the summary: on one line, escaped, it cannot
		// draw sections of its own (as the notes, quoted below).
		fmt.Fprintf(&b, ": %s", termsafe.Line(r.Summary))
	}
	b.WriteString("\n")
	section := func(title string, keep func(Item) bool, detail func(Item) string) {
		var rows []Item
		for _, it := range r.Items {
			if keep(it) {
				rows = append(rows, it)
			}
		}
		if len(rows) == 0 {
			return
		}
		fmt.Fprintf(&b, "\n%s:\n", title)
		for _, it := range rows {
			fmt.Fprintf(&b, "  %d. %s", it.N, describe(it))
			if d := detail(it); d != "" {
				fmt.Fprintf(&b, " — %s", d)
			}
			b.WriteString("\n")
			if it.Decision.Verdict == Pending && it.Preview != "" {
				for _, line := range strings.Split(strings.TrimRight(it.Preview, "\n"), "\n") {
					fmt.Fprintf(&b, "       %s\n", line)
				}
			}
			if it.Decision.Verdict == Pending {
				for _, line := range binding(it.Op) {
					fmt.Fprintf(&b, "       %s\n", line)
				}
			}
		}
	}
	section("Needs your approval", func(it Item) bool { return it.Decision.Verdict == Pending },
		func(it Item) string { return "rule " + it.Eval.Rule + ": " + it.Eval.Reason })
	section("Decided", func(it Item) bool { return it.Eval.Effect == EffectApprove && it.Decision.Verdict != Pending },
		func(it Item) string {
			d := string(it.Decision.Verdict)
			if it.Decision.Scope == ScopeSession {
				d += " for this session"
			}
			if it.Decision.Reason != "" {
				d += ": " + it.Decision.Reason
			}
			return d
		})
	section("Already allowed", func(it Item) bool { return it.Eval.Effect == EffectAllow },
		func(it Item) string { return it.Decision.Reason })
	section("Blocked (cannot be approved)", func(it Item) bool { return it.Eval.Effect != EffectAllow && it.Eval.Effect != EffectApprove },
		func(it Item) string { return it.Decision.Reason })
	if r.Open() {
		fmt.Fprintf(&b, "\nAnswer by %s with /approve, /approve 1-3, /approve 1-3 only, /approve 2 for session, /deny 2 reason, /deny.\n", r.Deadline.Format("15:04:05"))
	}
	return b.String()
}

func describe(it Item) string {
	var parts []string
	parts = append(parts, it.Op.Tool)
	if it.Note != "" {
		parts = append(parts, fmt.Sprintf("%q", it.Note))
	}
	if len(it.Op.Argv) > 0 {
		parts = append(parts, fmt.Sprintf("argv %q", it.Op.Argv))
	}
	if it.Op.CommandLine != "" {
		parts = append(parts, fmt.Sprintf("command %q", it.Op.CommandLine))
	}
	for _, p := range it.Op.Paths {
		parts = append(parts, termsafe.Line(p.Abs))
	}
	for _, h := range it.Op.Hosts {
		if h.Port != 0 {
			parts = append(parts, fmt.Sprintf("%s:%d", termsafe.Line(h.Name), h.Port))
		} else {
			parts = append(parts, termsafe.Line(h.Name))
		}
	}
	return strings.Join(parts, " ")
}

// binding lists what an approval of op binds beyond its command text, so
// the person sees what the token will cover: each command's environment
// assignments, directory and redirections, and the files it runs with
// their content digests (or why none carries over).
func binding(op operation.Operation) []string {
	var out []string
	for _, c := range op.Commands {
		var parts []string
		if len(c.Env) > 0 {
			parts = append(parts, "env "+visibleList(c.Env))
		}
		if c.Dir != "" {
			parts = append(parts, "in directory "+visible(c.Dir))
		}
		if len(c.Writes) > 0 {
			parts = append(parts, "writes "+visibleList(c.Writes))
		}
		if len(parts) > 0 && len(c.Argv) > 0 {
			out = append(out, visible(c.Argv[0])+": "+strings.Join(parts, "; "))
		}
	}
	if len(op.Inputs) > 0 {
		files := make([]string, 0, len(op.Inputs))
		for _, in := range op.Inputs {
			files = append(files, fmt.Sprintf("%s (sha256 %.12s)", visible(in.Path), in.SHA256))
		}
		out = append(out, "files: "+strings.Join(files, ", "))
	}
	if op.Unbound != "" {
		out = append(out, "asked every time, no approval carries over: "+visible(op.Unbound))
	}
	return out
}

// visible shows s as it is when it is plain text, quoted otherwise: when
// termsafe would escape any of it (the one judge of what a terminal must
// not act on), or when a space, quote or semicolon would blur where one
// value ends. The quote escapes everything termsafe escapes.
func visible(s string) string {
	if termsafe.Line(s) != s || strings.ContainsAny(s, " ;\"'") {
		return strconv.Quote(s)
	}
	return s
}

func visibleList(ss []string) string {
	vs := make([]string, len(ss))
	for i, s := range ss {
		vs[i] = visible(s)
	}
	return strings.Join(vs, " ")
}
