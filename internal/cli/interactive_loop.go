package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm/catalog"
	"github.com/fluffy-agent/fluffy/internal/tui"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

const interactiveHelp = `Type a task or a message and press Enter; each message is a turn of the same session.
End a line with \ to continue on the next one; a paste keeps its lines together.
  /diff                      the pending change set (stat and diff)
  /apply [path...]           apply the pending changes (or some) to the working tree; the session goes on
  /discard [path...]         drop the pending changes (or some)
  /mode strict|explore|debug switch the session's TDD mode (your decision, audited)
  /approve, /deny [reason]   answer an approval (asked while a turn runs: y or n also answer)
  /status                    the session: model, tokens, cost, TDD state, pending changes, audit range
  /model [provider/name]     show the model; before the first message, choose another
  /help                      this text
  /quit                      leave: the summary, then apply, review file by file, keep or discard
Keys: Ctrl-C cancels the running turn; twice within 2s leaves the session open (fluffy session resume ID).
Ctrl-D on an empty line is /quit. History is kept in the data directory.`

// resolveModel returns the model to use: the flag, else the configured
// one; a relative replay script path is made absolute (the kernel may run
// elsewhere).
func (a *App) resolveModel(flag string) (string, error) {
	l, err := a.Config()
	if err != nil {
		return "", err
	}
	model := flag
	if model == "" {
		model = l.Config.Model
	}
	prov, name, err := catalog.Split(model)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errUsage, err)
	}
	if prov == "replay" && strings.Contains(name, "/") && !filepath.IsAbs(name) {
		model = "replay/" + filepath.Join(a.Cwd, name)
	}
	return model, nil
}

// oneShot runs the attached session to its end, then the summary and the
// choice.
func (k *console) oneShot(ctx context.Context) error {
	res, err := k.turn(ctx, "")
	if errors.Is(err, errDetach) {
		return k.detached()
	}
	if err != nil {
		return err
	}
	if err := k.finish(ctx, res); err != nil {
		if errors.Is(err, errDetach) {
			return k.detached()
		}
		return err
	}
	if res.Reason == "cancelled" {
		return &ExitError{Code: 130}
	}
	return runExit(res)
}

// openConsole resolves the model, connects to the kernel (starting one
// if none answers), reports sessions a crash interrupted and opens the
// console; done closes the console, then the connection.
func (a *App) openConsole(ctx context.Context, f taskFlags) (_ *console, done func(), _ error) {
	model, err := a.resolveModel(f.model)
	if err != nil {
		return nil, nil, err
	}
	c, err := a.connectKernel(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := a.reportInterrupted(ctx, c); err != nil {
		c.Close()
		return nil, nil, err
	}
	k, err := a.newConsole(c, f)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	k.model = model
	return k, func() { k.close(); c.Close() }, nil
}

// interactive is `fluffy` alone: a conversation with one session, a turn
// per message, slash commands between turns. On a terminal it edits lines
// (history, multi-line input) and keeps a status line; from a pipe it
// reads one message per line and prints plain text.
func (a *App) interactive(ctx context.Context, f taskFlags) error {
	k, done, err := a.openConsole(ctx, f)
	if err != nil {
		return err
	}
	defer done()
	ctx = context.WithoutCancel(ctx)
	if _, tty := k.in.(*ttyReader); tty {
		fmt.Fprintf(k.out, "%s · %s · %s\n%s\n", k.caps.Paint(tui.Bold, "fluffy"), termsafe.Line(k.model), termsafe.Line(repoRoot(a.Cwd)),
			k.caps.Paint(tui.Dim, "Type a task. /help lists the commands; Ctrl-D or /quit leaves."))
		k.drawStatus()
	}
	var last kernel.RunResult
	for {
		msg, err := k.readMessage()
		switch {
		case errors.Is(err, errInterrupt):
			if k.interrupt() != nil {
				return k.detached()
			}
			continue
		case errors.Is(err, errDetach):
			return k.detached()
		case errors.Is(err, io.EOF):
			return k.quit(ctx, last)
		case err != nil:
			return err
		}
		if strings.TrimSpace(msg) == "" {
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(msg), "/") {
			quit, err := k.command(ctx, strings.TrimSpace(msg))
			if errors.Is(err, errDetach) {
				return k.detached()
			}
			if err != nil {
				var ee *ExitError
				if errors.As(err, &ee) {
					return err
				}
				k.printf("%s %s\n", k.caps.Paint(tui.Red, "fluffy:"), termsafe.String(err.Error()))
			}
			if quit {
				return k.quit(ctx, last)
			}
			continue
		}
		next := msg
		if k.id == "" {
			if err := k.create(ctx, msg); err != nil {
				return err
			}
			next = "" // the first message is the task
		}
		res, err := k.turn(ctx, next)
		if errors.Is(err, errDetach) {
			return k.detached()
		}
		if err != nil {
			return err
		}
		last = res
		if res.Fault != nil && res.Fault.Class == kernel.FaultRuntime {
			// The session failed closed: nothing more can run in it.
			return k.quit(ctx, last)
		}
	}
}

// readMessage reads a message: a line, continued while it ends with a
// backslash.
func (k *console) readMessage() (string, error) {
	prompt := ""
	if _, tty := k.in.(*ttyReader); tty {
		prompt = k.caps.Paint(tui.Bold, "fluffy› ")
	}
	var parts []string
	for {
		line, err := k.in.ReadLine(prompt)
		if err != nil {
			if errors.Is(err, io.EOF) && len(parts) > 0 {
				return strings.Join(append(parts, line), "\n"), nil
			}
			return "", err
		}
		if strings.HasSuffix(line, `\`) {
			parts = append(parts, strings.TrimSuffix(line, `\`))
			prompt = ""
			if _, tty := k.in.(*ttyReader); tty {
				prompt = k.caps.Paint(tui.Dim, "     … ")
			}
			continue
		}
		msg := strings.Join(append(parts, line), "\n")
		if t, ok := k.in.(*ttyReader); ok && strings.TrimSpace(msg) != "" {
			t.save(strings.ReplaceAll(msg, "\n", string(tui.NewlineMark)))
		}
		return msg, nil
	}
}

// quit ends the conversation: the summary and the choice, when there is
// a session.
func (k *console) quit(ctx context.Context, last kernel.RunResult) error {
	if k.id == "" {
		return nil
	}
	if err := k.finish(ctx, last); err != nil {
		if errors.Is(err, errDetach) {
			return k.detached()
		}
		return err
	}
	return nil
}

// command runs a slash command; quit says the user wants to leave.
func (k *console) command(ctx context.Context, line string) (quit bool, err error) {
	name, rest, _ := strings.Cut(line, " ")
	rest = strings.TrimSpace(rest)
	needSession := func() error {
		if k.id == "" {
			return errors.New("no session yet: type a task first")
		}
		return nil
	}
	switch name {
	case "/help", "/?":
		k.printf("%s\n", interactiveHelp)
	case "/quit", "/exit", "/q":
		return true, nil
	case "/diff":
		if err := needSession(); err != nil {
			return false, err
		}
		return false, k.showDiff(ctx)
	case "/apply":
		if err := needSession(); err != nil {
			return false, err
		}
		applied, err := k.apply(ctx, strings.Fields(rest))
		if err != nil {
			return false, err
		}
		if len(applied) == 0 {
			k.printf("nothing to apply\n")
			return false, nil
		}
		k.printf("applied %d change(s) to the working tree:\n", len(applied))
		for _, ch := range applied {
			k.printf("  %-8s %s\n", ch.Op, termsafe.Line(ch.Path))
		}
	case "/discard":
		if err := needSession(); err != nil {
			return false, err
		}
		n, err := k.discard(ctx, strings.Fields(rest))
		if err != nil {
			return false, err
		}
		k.printf("discarded %d change(s)\n", n)
	case "/mode":
		if rest == "" {
			mode := k.r.stats.Mode
			if mode == "" {
				mode = "(the configured tdd.mode until the first turn)"
			}
			k.printf("tdd mode: %s; switch with /mode strict|explore|debug\n", mode)
			return false, nil
		}
		if k.id == "" {
			k.mode = rest
			k.printf("tdd mode %s from the first turn\n", rest)
			return false, nil
		}
		return false, k.switchMode(ctx, rest)
	case "/approve", "/deny":
		return false, errors.New("no approval is pending (approvals are asked while a turn runs; answer them there)")
	case "/status":
		if k.id == "" {
			k.printf("no session yet · model %s · workspace %s\n", termsafe.Line(k.model), termsafe.Line(repoRoot(k.a.Cwd)))
			return false, nil
		}
		var info kernel.Info
		if err := k.c.Call(ctx, kernel.MethodGet, kernel.IDParams{ID: k.id}, &info); err != nil {
			return false, err
		}
		d, err := k.pending(ctx)
		if err != nil {
			return false, err
		}
		k.printf("session %s · %s · %s\n", info.ID, info.Status, termsafe.Line(info.Workspace))
		st := k.r.stats
		st.Model, st.Turns, st.Usage, st.Cost = info.Model, info.Turns, info.Usage, info.Cost
		k.printf("%s\n", statusText(st, ""))
		k.printf("pending changes: %d\n", len(d.Changes))
		if k.r.tests != "" {
			k.printf("tests: %s\n", k.r.tests)
		}
		if first, last, err := k.a.auditRange(ctx, k.id); err == nil && first > 0 {
			k.printf("audit: entries %d..%d\n", first, last)
		}
	case "/model":
		if rest == "" {
			k.printf("model: %s\n", k.model)
			return false, nil
		}
		if k.id != "" {
			return false, fmt.Errorf("a session keeps its model; leave (/quit) and start another with fluffy -m %s", rest)
		}
		m, err := k.a.resolveModel(rest)
		if err != nil {
			return false, err
		}
		k.model = m
		k.r.stats.Model = m
		k.printf("model: %s\n", m)
	default:
		return false, fmt.Errorf("unknown command %s (/help lists them)", name)
	}
	return false, nil
}
