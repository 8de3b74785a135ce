package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/tui"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

// renderer prints a session's events: model text as it streams, one
// compact line per tool call and per gate decision (coloured on a
// terminal), faults with their fix — or JSON lines for scripts. It keeps
// what the status line and the end summary show.
type renderer struct {
	w      io.Writer
	caps   tui.Caps
	asJSON bool
	inText bool
	// stats are the session's latest totals; tests the last test.run's
	// outcome line.
	stats kernel.Stats
	tests string
	// onStats is told when stats change (the status line).
	onStats func()
}

func (r *renderer) endText() {
	if r.inText {
		fmt.Fprintln(r.w)
		r.inText = false
	}
}

func (r *renderer) render(e kernel.Event) {
	if e.Type == kernel.TypeStats && e.Stats != nil {
		r.stats = *e.Stats
		if r.onStats != nil {
			r.onStats()
		}
	}
	if e.Type == kernel.Type(agent.EventToolResult) && e.Agent != nil && e.Agent.Call != nil && e.Agent.Call.Name == "test.run" && e.Agent.Result != nil {
		r.tests = oneLine(e.Agent.Result.Content, 100)
	}
	if r.asJSON {
		b, _ := json.Marshal(e)
		fmt.Fprintf(r.w, "%s\n", termsafe.JSON(b))
		return
	}
	p := r.caps.Paint
	switch e.Type {
	case kernel.Type(agent.EventText):
		fmt.Fprint(r.w, termsafe.String(e.Agent.Text))
		r.inText = true
	case kernel.Type(agent.EventToolCall):
		r.endText()
		if c := e.Agent.Call; c != nil {
			fmt.Fprintf(r.w, "%s %s %s\n", p(tui.Cyan, "→"), p(tui.Bold, termsafe.Line(c.Name)), oneLine(string(c.Args), 120))
		}
	case kernel.Type(agent.EventToolResult):
		r.endText()
		if res := e.Agent.Result; res != nil {
			mark, colour := "✓", tui.Green
			if res.IsError {
				mark, colour = "✗", tui.Red
			}
			dec := ""
			if res.Decision != "" {
				dc := tui.Dim
				switch {
				case strings.HasPrefix(res.Decision, "approve"):
					dc = tui.Yellow
				case strings.HasPrefix(res.Decision, "deny"), strings.HasPrefix(res.Decision, "block"):
					dc = tui.Red
				}
				dec = " " + p(dc, "["+termsafe.Line(res.Decision)+"]")
			}
			fmt.Fprintf(r.w, "  %s %s%s: %s\n", p(colour, mark), termsafe.Line(e.Agent.Call.Name), dec, oneLine(res.Content, 160))
		}
	case kernel.Type(agent.EventContext):
		r.endText()
		fmt.Fprintf(r.w, "%s\n", p(tui.Dim, "· "+termsafe.String(e.Agent.Text)))
	case kernel.Type(agent.EventStop):
		r.endText()
		u := e.Agent.Usage
		cost := ""
		if e.Agent.Cost > 0 {
			cost = fmt.Sprintf(", $%.4f", e.Agent.Cost)
		}
		fmt.Fprintf(r.w, "%s\n", p(tui.Dim, fmt.Sprintf("· stopped: %s after %d turn(s), %d tokens in, %d out%s", termsafe.Line(string(e.Agent.Reason)), e.Agent.Turn, u.InputTokens, u.OutputTokens, cost)))
	case kernel.TypeError:
		r.endText()
		if f := e.Fault; f != nil {
			fmt.Fprintf(r.w, "%s %s error: %s\n", p(tui.Red, "!"), termsafe.Line(string(f.Class)), termsafe.String(f.Message))
			if f.Fix != "" {
				fmt.Fprintf(r.w, "  fix: %s\n", termsafe.String(f.Fix))
			}
		}
	case kernel.TypeWarning:
		r.endText()
		fmt.Fprintf(r.w, "%s %s\n", p(tui.Yellow, "! warning:"), termsafe.String(e.Text))
	case kernel.TypeApproval:
		r.endText()
		fmt.Fprintf(r.w, "%s\n%s\n", p(tui.Yellow, "? approval needed"), termsafe.String(e.Text))
	case kernel.TypeDone:
		r.endText()
	}
}

// statusText is the status line: model, tokens, cost, TDD state.
func statusText(s kernel.Stats, extra string) string {
	model := s.Model
	if p, ok := strings.CutPrefix(model, "replay/"); ok && strings.Contains(p, "/") {
		model = "replay/" + filepath.Base(p) // a script file: its name is enough
	}
	parts := []string{model}
	parts = append(parts, fmt.Sprintf("turn %d", s.Turns))
	parts = append(parts, fmt.Sprintf("tokens %s in / %s out", count(s.Usage.InputTokens), count(s.Usage.OutputTokens)))
	parts = append(parts, fmt.Sprintf("$%.4f", s.Cost))
	if s.TDD != "" {
		parts = append(parts, fmt.Sprintf("tdd %s (%s)", s.TDD, s.Mode))
	}
	if extra != "" {
		parts = append(parts, extra)
	}
	return strings.Join(parts, " · ")
}

// count writes n with thousands separators.
func count(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return s
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// oneLine shows untrusted s on one line: its words joined by single
// spaces, escaped for the terminal, clipped to max runes.
func oneLine(s string, max int) string {
	s = termsafe.Line(strings.Join(strings.Fields(s), " "))
	if utf8.RuneCountInString(s) > max {
		s = string([]rune(s)[:max]) + "…"
	}
	return s
}

// auditRange returns the first and last audit sequence numbers of a
// session's entries, read from the audit database (readers never block
// the kernel, which writes it).
func (a *App) auditRange(ctx context.Context, id string) (first, last uint64, err error) {
	d, err := a.DataDir()
	if err != nil {
		return 0, 0, err
	}
	r, err := audit.OpenReader(ctx, d.Path(datadir.AuditDB))
	if err != nil {
		return 0, 0, err
	}
	defer r.Close()
	for _, f := range []audit.Filter{{Session: id, Limit: 1}, {Session: id, Limit: 1, Last: true}} {
		err := r.Entries(ctx, f, func(e audit.Entry) error {
			if f.Last {
				last = e.Seq
			} else {
				first = e.Seq
			}
			return nil
		})
		if err != nil {
			return 0, 0, err
		}
	}
	return first, last, nil
}

// diffOut is a diff or file content as a data command (changes diff,
// session diff, sandbox diff) writes it to w: escaped with
// termsafe.String when w is a terminal, so a file's bytes cannot act on
// it; byte for byte into a pipe or file, so the output still applies as a
// patch (git apply) with its carriage returns and escapes intact.
func diffOut(w io.Writer, s string) string {
	if f, ok := w.(*os.File); ok && tui.IsTerminal(int(f.Fd())) {
		return termsafe.String(s)
	}
	return s
}
