// Package approval owns asking a person: plans of steps submitted for one
// consolidated approval, the answer language people type to approve or deny
// them, and (as the kernel grows) routing, time-outs and the decision
// cache.
//
// The answer language is deliberately small and strict. An answer that is
// not understood is never guessed at: it is refused with an explanation, and
// the question stays open.
package approval

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Verdict is what a person decided for one step.
type Verdict string

// The verdicts. Pending means the answer did not cover the step: it stays
// open and will be asked again.
const (
	Pending  Verdict = "pending"
	Approved Verdict = "approved"
	Denied   Verdict = "denied"
)

// Scope is how far an approval reaches.
type Scope string

// The scopes. ScopeOnce covers the exact operation once; ScopeSession
// covers the step's rule and operation signature for the rest of the
// session.
const (
	ScopeOnce    Scope = "once"
	ScopeSession Scope = "session"
)

// Decision is the verdict for one step.
type Decision struct {
	Verdict Verdict `json:"verdict"`
	Scope   Scope   `json:"scope,omitempty"`
	// Reason is the person's words for a denial.
	Reason string `json:"reason,omitempty"`
}

// Answer is a parsed reply to a question about steps 1..N.
type Answer struct {
	// Steps holds a decision for every step 1..N (index 0 is step 1).
	Steps []Decision `json:"steps"`
}

// Approved reports whether step n (1-based) was approved.
func (a Answer) Approved(n int) bool {
	return n >= 1 && n <= len(a.Steps) && a.Steps[n-1].Verdict == Approved
}

// SyntaxError explains a malformed answer. Col is 1-based within Line.
type SyntaxError struct {
	Line int
	Col  int
	Msg  string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("answer line %d, column %d: %s\n%s", e.Line, e.Col, e.Msg, Help)
}

// Help is the answer language in brief, shown with every syntax error.
const Help = `Answer with one command per line:
  /approve                 approve every step
  /approve 1-3             approve steps 1 to 3 (others stay open)
  /approve 1,4             approve steps 1 and 4
  /approve 1-3 only        approve steps 1 to 3, deny the rest
  /approve 2 for session   approve step 2 and operations like it for this session
  /deny 2 too broad        deny step 2, telling the agent why
  /deny                    deny every step (a reason may follow: /deny not now)`

// MaxAnswerLen bounds the text the parser reads; a longer answer is
// refused rather than truncated.
const MaxAnswerLen = 4096

// ParseAnswer parses an answer to a question about n steps (n >= 1). Every
// step gets a decision; steps the answer does not name stay Pending unless
// "only" or an "all" form covers them. Contradictions (a step both approved
// and denied, or named twice) are errors.
func ParseAnswer(text string, n int) (Answer, error) {
	if n < 1 {
		return Answer{}, fmt.Errorf("approval: a question needs at least one step, got %d", n)
	}
	if len(text) > MaxAnswerLen {
		return Answer{}, &SyntaxError{Line: 1, Col: 1, Msg: fmt.Sprintf("answer is %d bytes; the limit is %d", len(text), MaxAnswerLen)}
	}
	ans := Answer{Steps: make([]Decision, n)}
	for i := range ans.Steps {
		ans.Steps[i] = Decision{Verdict: Pending}
	}
	named := make([]int, n) // line number that decided each step, 0 for none
	var rest *Decision      // what "only" or "all" assigns to unnamed steps
	restLine := 0
	lines := strings.Split(text, "\n")
	commands := 0
	for li, raw := range lines {
		line := strings.TrimRight(raw, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		lineNo := li + 1
		if i := strings.IndexFunc(line, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }); i >= 0 {
			return Answer{}, &SyntaxError{Line: lineNo, Col: i + 1, Msg: "control character in the answer"}
		}
		cmd, err := parseLine(line, lineNo, n)
		if err != nil {
			return Answer{}, err
		}
		commands++
		for _, s := range cmd.steps {
			if prev := named[s-1]; prev != 0 {
				return Answer{}, &SyntaxError{Line: lineNo, Col: cmd.col, Msg: fmt.Sprintf("step %d was already decided on line %d", s, prev)}
			}
			named[s-1] = lineNo
			ans.Steps[s-1] = cmd.decision
		}
		if cmd.rest != nil {
			if rest != nil {
				return Answer{}, &SyntaxError{Line: lineNo, Col: cmd.col, Msg: fmt.Sprintf("line %d already decided every remaining step", restLine)}
			}
			rest, restLine = cmd.rest, lineNo
		}
	}
	if commands == 0 {
		return Answer{}, &SyntaxError{Line: 1, Col: 1, Msg: "empty answer"}
	}
	if rest != nil {
		for i := range ans.Steps {
			if named[i] == 0 {
				ans.Steps[i] = *rest
			}
		}
	}
	return ans, nil
}

type command struct {
	col      int
	steps    []int     // named steps, sorted
	decision Decision  // for the named steps
	rest     *Decision // for every step not named anywhere
}

// token is a word of a line with its 1-based column.
type token struct {
	s   string
	col int
}

func split(line string) []token {
	var out []token
	i := 0
	for i < len(line) {
		for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
			i++
		}
		start := i
		for i < len(line) && line[i] != ' ' && line[i] != '\t' {
			i++
		}
		if start < i {
			out = append(out, token{line[start:i], start + 1})
		}
	}
	return out
}

func parseLine(line string, lineNo, n int) (command, error) {
	toks := split(line)
	errAt := func(t token, format string, args ...any) error {
		return &SyntaxError{Line: lineNo, Col: t.col, Msg: fmt.Sprintf(format, args...)}
	}
	verb := toks[0]
	var approve bool
	switch strings.ToLower(verb.s) {
	case "/approve":
		approve = true
	case "/deny":
	default:
		return command{}, errAt(verb, "expected /approve or /deny, got %q", verb.s)
	}
	cmd := command{col: verb.col}
	args := toks[1:]
	all := len(args) == 0
	if !all && strings.EqualFold(args[0].s, "all") {
		all, args = true, args[1:]
	}
	// "/deny not now": a denial whose first word is not a step list
	// denies everything, with the words as the reason. Step lists always
	// start with a digit, so this cannot swallow a mistyped list.
	if !all && !approve && (args[0].s[0] < '0' || args[0].s[0] > '9') {
		all = true
	}
	if !all {
		steps, err := parseSteps(args[0], n, lineNo)
		if err != nil {
			return command{}, err
		}
		cmd.steps, args = steps, args[1:]
	}
	if approve {
		d := Decision{Verdict: Approved, Scope: ScopeOnce}
		only := false
		for len(args) > 0 {
			switch {
			case strings.EqualFold(args[0].s, "only") && !all && !only:
				only, args = true, args[1:]
			case strings.EqualFold(args[0].s, "for"):
				rest := args[1:]
				if len(rest) > 0 && strings.EqualFold(rest[0].s, "this") {
					rest = rest[1:]
				}
				if len(rest) != 1 || !strings.EqualFold(rest[0].s, "session") {
					return command{}, errAt(args[0], `expected "for session" or "for this session"`)
				}
				d.Scope, args = ScopeSession, nil
			default:
				return command{}, errAt(args[0], "unexpected %q after /approve; approvals take no reason (use only, or for session)", args[0].s)
			}
		}
		if all {
			cmd.rest = &d
		} else {
			cmd.decision = d
			if only {
				cmd.rest = &Decision{Verdict: Denied, Reason: "not in the approved steps"}
			}
		}
		return cmd, nil
	}
	var reason []string
	for _, a := range args {
		reason = append(reason, a.s)
	}
	d := Decision{Verdict: Denied, Reason: strings.Join(reason, " ")}
	if all {
		cmd.rest = &d
	} else {
		cmd.decision = d
	}
	return cmd, nil
}

// parseSteps reads "3", "1-3", "1,4" or "1-3,5" against steps 1..n.
func parseSteps(t token, n, lineNo int) ([]int, error) {
	errAt := func(off int, format string, args ...any) error {
		return &SyntaxError{Line: lineNo, Col: t.col + off, Msg: fmt.Sprintf(format, args...)}
	}
	seen := map[int]bool{}
	off := 0
	for _, part := range strings.Split(t.s, ",") {
		if part == "" {
			return nil, errAt(off, "empty step in %q: write steps as 2, 1-3 or 1,4", t.s)
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := stepNumber(lo, n)
		if err != nil {
			return nil, errAt(off, "%v", err)
		}
		b := a
		if isRange {
			if b, err = stepNumber(hi, n); err != nil {
				return nil, errAt(off+len(lo)+1, "%v", err)
			}
			if b < a {
				return nil, errAt(off, "range %s runs backwards; write %d-%d", part, b, a)
			}
		}
		for s := a; s <= b; s++ {
			if seen[s] {
				return nil, errAt(off, "step %d is named twice", s)
			}
			seen[s] = true
		}
		off += len(part) + 1
	}
	steps := make([]int, 0, len(seen))
	for s := range seen {
		steps = append(steps, s)
	}
	sort.Ints(steps)
	return steps, nil
}

func stepNumber(s string, n int) (int, error) {
	if s == "" || len(s) > 6 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a step number: write steps as 2, 1-3 or 1,4", s)
	}
	v, _ := strconv.Atoi(s)
	if v < 1 || v > n {
		if n == 1 {
			return 0, fmt.Errorf("there is no step %d: the only step is 1", v)
		}
		return 0, fmt.Errorf("there is no step %d: steps run from 1 to %d", v, n)
	}
	return v, nil
}
