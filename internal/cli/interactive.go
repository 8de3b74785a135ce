package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ergochat/readline"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/tui"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

// Ctrl-C: once cancels the turn; twice within detachWindow leaves the
// session open and resumable.
const detachWindow = 2 * time.Second

var (
	// errInterrupt: Ctrl-C while a question was asked.
	errInterrupt = errors.New("interrupted")
	// errDetach: the user left with the session open (Ctrl-C twice).
	errDetach = errors.New("detached")
)

// lineReader asks for one line of input.
type lineReader interface {
	// ReadLine shows prompt and returns the line without its newline;
	// errInterrupt on Ctrl-C, io.EOF at the end of the input.
	ReadLine(prompt string) (string, error)
	Close() error
}

// ttyReader edits lines on a terminal (history, bracketed paste).
type ttyReader struct {
	rl *readline.Instance
	w  io.Writer
}

func newTTYReader(in io.Reader, out io.Writer, history string) (*ttyReader, error) {
	if history != "" {
		if f, err := os.OpenFile(history, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
			f.Close()
		}
	}
	rl, err := readline.NewFromConfig(&readline.Config{
		Stdin: tui.NewPasteFilter(in), Stdout: out, HistoryFile: history, HistoryLimit: 1000,
		DisableAutoSaveHistory: true,
	})
	if err != nil {
		return nil, err
	}
	return &ttyReader{rl: rl, w: out}, nil
}

func (t *ttyReader) ReadLine(prompt string) (string, error) {
	t.rl.SetPrompt(prompt)
	io.WriteString(t.w, tui.PasteOn)
	line, err := t.rl.ReadLine()
	io.WriteString(t.w, tui.PasteOff)
	if errors.Is(err, readline.ErrInterrupt) {
		return "", errInterrupt
	}
	return tui.Unmark(line), err
}

func (t *ttyReader) save(line string) { _ = t.rl.SaveToHistory(line) }

func (t *ttyReader) Close() error { return t.rl.Close() }

// pipeReader reads lines from a pipe or file. A SIGINT while it waits
// interrupts the question.
type pipeReader struct {
	lines  chan string
	err    error // set before lines is closed
	prompt io.Writer
	sigint <-chan os.Signal
}

func newPipeReader(in io.Reader, prompt io.Writer, sigint <-chan os.Signal) *pipeReader {
	p := &pipeReader{lines: make(chan string), prompt: prompt, sigint: sigint}
	go func() {
		br := bufio.NewReader(in)
		for {
			line, err := br.ReadString('\n')
			if line != "" {
				p.lines <- strings.TrimRight(line, "\r\n")
			}
			if err != nil {
				p.err = err
				close(p.lines)
				return
			}
		}
	}()
	return p
}

func (p *pipeReader) ReadLine(prompt string) (string, error) {
	if prompt != "" {
		fmt.Fprint(p.prompt, prompt)
	}
	select {
	case line, ok := <-p.lines:
		if !ok {
			if p.err == nil || errors.Is(p.err, io.EOF) {
				return "", io.EOF
			}
			return "", p.err
		}
		return line, nil
	case <-p.sigint:
		return "", errInterrupt
	}
}

func (p *pipeReader) Close() error { return nil }

// console is one terminal's view of a session: it renders the events,
// keeps the status line, asks for approvals and choices, and follows
// Ctrl-C.
type console struct {
	a    *App
	c    *ipc.Client
	caps tui.Caps
	out  io.Writer // the terminal (through the bar when it is on)
	bar  *tui.Bar  // nil unless a terminal
	in   lineReader
	r    *renderer
	f    taskFlags

	id    string // the session ("" until the first message)
	model string
	mode  string // a TDD mode asked for before the session exists

	events   <-chan ipc.Event // the client's events, never left unread (pump)
	sigs     chan os.Signal   // SIGINT
	running  bool             // a turn runs
	lastInt  time.Time
	stopSigs func()
	// leaveMsg is what a SIGTERM or SIGHUP prints as the client leaves.
	leaveMsg atomic.Value
}

// newConsole sets up the terminal side: colours, the status line,
// line editing on a terminal, signals.
func (a *App) newConsole(c *ipc.Client, f taskFlags) (*console, error) {
	k := &console{a: a, c: c, f: f, out: a.Stdout, sigs: make(chan os.Signal, 4)}
	k.caps = tui.Detect(a.Stdout, a.Getenv)
	if f.asJSON {
		k.caps.Color = false
	}
	inTTY := false
	if fi, ok := a.Stdin.(*os.File); ok {
		inTTY = tui.IsTerminal(int(fi.Fd()))
	}
	if k.caps.TTY && !f.asJSON {
		fd := k.caps.FD
		k.bar = tui.NewBar(a.Stdout, func() (int, int, error) { return tui.Size(fd) })
		k.out = k.bar
	}
	// SIGINT is handled where the client waits (turn, questions); a
	// resize, a SIGTERM or a hang-up at any time, by a goroutine of its own.
	signal.Notify(k.sigs, os.Interrupt)
	other := make(chan os.Signal, 2)
	signal.Notify(other, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGWINCH)
	done := make(chan struct{})
	go k.watch(other, done)
	k.stopSigs = func() {
		signal.Stop(k.sigs)
		signal.Stop(other)
		close(done)
	}
	k.leaveMsg.Store("")
	if inTTY && k.caps.TTY {
		history := ""
		if d, err := a.DataDir(); err == nil {
			history = filepath.Join(d.Root, "history")
		}
		t, err := newTTYReader(a.Stdin, a.Stdout, history)
		if err != nil {
			k.stopSigs()
			return nil, err
		}
		k.in = t
	} else {
		k.in = newPipeReader(a.Stdin, a.Stderr, k.sigs)
	}
	k.r = &renderer{w: k.out, caps: k.caps, asJSON: f.asJSON, onStats: k.drawStatus}
	k.events = pump(c.Events())
	return k, nil
}

// pump drains in into an unbounded queue and hands the events on in
// order. A client that stops reading its events also stops reading the
// answers to its calls, and the kernel drops a peer that falls 256 events
// behind; while a person takes their time over a question (an approval
// answered elsewhere meanwhile lets the run stream on), the console must
// not be that peer. The returned channel is closed after in is closed and
// everything queued was handed on.
func pump(in <-chan ipc.Event) <-chan ipc.Event {
	out := make(chan ipc.Event)
	go func() {
		defer close(out)
		var q []ipc.Event
		for in != nil || len(q) > 0 {
			var send chan<- ipc.Event
			var first ipc.Event
			if len(q) > 0 {
				send, first = out, q[0]
			}
			select {
			case ev, ok := <-in:
				if !ok {
					in = nil
					continue
				}
				q = append(q, ev)
			case send <- first:
				q[0] = ipc.Event{}
				q = q[1:]
			}
		}
	}()
	return out
}

func (k *console) close() {
	if k.bar != nil {
		k.bar.Stop()
	}
	k.stopSigs()
	k.in.Close()
}

func (k *console) drawStatus() {
	if k.bar == nil {
		return
	}
	extra := "no session yet"
	if k.id != "" {
		extra = k.id + " · ready"
		if k.running {
			extra = k.id + " · working"
		}
	}
	st := k.r.stats
	if st.Model == "" {
		st.Model = k.model
	}
	k.bar.Set(statusText(st, extra))
	k.bar.Start()
}

// printf writes a line of the client's own (not the model's).
func (k *console) printf(format string, a ...any) {
	k.r.endText()
	fmt.Fprintf(k.out, format, a...)
}

// watch follows resizes, and leaves on SIGTERM or SIGHUP whatever the
// client is doing (a line editor blocks other signal handling): the
// terminal is restored, the session stays open (the kernel pauses a run
// whose client went away) and the process exits.
func (k *console) watch(sigs <-chan os.Signal, done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case s := <-sigs:
			if s == syscall.SIGWINCH {
				k.resize()
				continue
			}
			if k.bar != nil {
				k.bar.Stop()
			}
			k.in.Close()
			if msg, _ := k.leaveMsg.Load().(string); msg != "" {
				fmt.Fprintln(k.a.Stderr, "fluffy:", msg)
			}
			code := 143
			if s == syscall.SIGHUP {
				code = 129
			}
			os.Exit(code)
		}
	}
}

func (k *console) resize() {
	if k.bar != nil {
		k.bar.Resize()
	}
}

// interrupt is one Ctrl-C: the first cancels the running turn, a second
// within detachWindow detaches.
func (k *console) interrupt() error {
	now := time.Now()
	if !k.lastInt.IsZero() && now.Sub(k.lastInt) < detachWindow {
		return errDetach
	}
	k.lastInt = now
	echo := "^C " // a terminal echoes it itself
	if k.caps.TTY {
		echo = ""
	}
	if !k.running {
		k.printf("%s\n", k.caps.Paint(tui.Yellow, echo+"(Ctrl-C again within 2s to leave; the session stays open and resumable)"))
		return nil
	}
	if k.id != "" {
		// Asynchronous: the run's answer and its done event follow.
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = k.c.Call(ctx, kernel.MethodCancel, kernel.IDParams{ID: k.id}, nil)
		}()
	}
	k.printf("%s\n", k.caps.Paint(tui.Yellow, echo+"cancelling the turn (Ctrl-C again within 2s to detach; the session stays resumable)"))
	return nil
}

// detached is the message and exit status of leaving a session open.
func (k *console) detached() error {
	if k.bar != nil {
		k.bar.Stop()
	}
	if k.id == "" {
		return &ExitError{Code: 130}
	}
	return &ExitError{Code: 130, Msg: fmt.Sprintf("detached: session %s stays open with its change set; resume it: fluffy session resume %s · review it: fluffy session diff %s", k.id, k.id, k.id)}
}

// attach subscribes to the session's events.
func (k *console) attach(ctx context.Context, id string) error {
	k.id = id
	k.leaveMsg.Store(fmt.Sprintf("detached: session %s stays open with its change set; resume it: fluffy session resume %s", id, id))
	if err := k.c.Subscribe(ctx, kernel.Topic(id)); err != nil {
		return fmt.Errorf("attach to the session: %w", err)
	}
	return nil
}

// create starts the session with its first message as the task.
func (k *console) create(ctx context.Context, task string) error {
	var info kernel.Info
	if err := k.c.Call(ctx, kernel.MethodCreate, kernel.CreateParams{Workspace: repoRoot(k.a.Cwd), Task: task, Model: k.model}, &info); err != nil {
		return fmt.Errorf("create the session: %w", err)
	}
	if !k.f.asJSON {
		fmt.Fprintf(k.a.Stderr, "session %s · %s · %s\n", info.ID, termsafe.Line(info.Model), termsafe.Line(info.Workspace))
	}
	if err := k.attach(ctx, info.ID); err != nil {
		return err
	}
	if k.mode != "" {
		mode := k.mode
		k.mode = ""
		return k.switchMode(ctx, mode)
	}
	return nil
}

// turn runs the session once (with the user's next message, if any) and
// renders it until it ends. It returns errDetach when the user leaves.
func (k *console) turn(ctx context.Context, message string) (kernel.RunResult, error) {
	type answer struct {
		res kernel.RunResult
		err error
	}
	k.lastInt = time.Time{}
	k.running = true
	defer func() { k.running = false }()
	done := make(chan answer, 1)
	id := k.id
	go func() {
		var res kernel.RunResult
		err := k.c.Call(ctx, kernel.MethodRun, kernel.RunParams{ID: id, Message: message}, &res)
		done <- answer{res, err}
	}()
	k.drawStatus()
	var (
		final *kernel.RunResult
		grace <-chan time.Time
	)
	for {
		select {
		case <-k.sigs:
			if err := k.interrupt(); err != nil {
				return kernel.RunResult{}, err
			}
		case ev, ok := <-k.events:
			if !ok {
				return kernel.RunResult{}, lostKernel(id, k.c.Err())
			}
			var e kernel.Event
			if err := json.Unmarshal(ev.Data, &e); err != nil {
				return kernel.RunResult{}, fmt.Errorf("decode an event: %w", err)
			}
			if e.Session != id {
				continue
			}
			k.r.render(e)
			if e.Type == kernel.TypeApproval && e.Approval != nil {
				if err := k.answerApproval(ctx, e); err != nil {
					return kernel.RunResult{}, err
				}
			}
			if e.Type == kernel.TypeDone && e.Result != nil {
				k.endOfTurn()
				return *e.Result, nil
			}
		case ans := <-done:
			if ans.err != nil {
				select {
				case <-k.c.Done():
					return kernel.RunResult{}, lostKernel(id, ans.err)
				default:
				}
				return kernel.RunResult{}, fmt.Errorf("run the session: %w", ans.err)
			}
			// The answer can overtake the last events: drain until the
			// done event, or give up after a grace period.
			done = nil
			final = &ans.res
			grace = time.After(2 * time.Second)
		case <-grace:
			k.endOfTurn()
			return *final, nil
		}
	}
}

// endOfTurn prints the status line in plain mode (on a terminal it is
// on the bottom row already).
func (k *console) endOfTurn() {
	k.running = false
	k.drawStatus()
	if k.bar == nil && !k.f.asJSON && k.r.stats.Model != "" {
		k.printf("· status: %s\n", statusText(k.r.stats, ""))
	}
}

// answerApproval asks until the kernel accepts an answer: y/n or the
// approval language. End of input denies; Ctrl-C cancels the turn (the
// request is withdrawn with it) or, twice, detaches.
func (k *console) answerApproval(ctx context.Context, e kernel.Event) error {
	for {
		line, err := k.in.ReadLine(k.caps.Paint(tui.Yellow, "approve? [y]es / [n]o, or /approve …, /deny [reason]: "))
		switch {
		case errors.Is(err, errInterrupt):
			return k.interrupt()
		case errors.Is(err, io.EOF) && strings.TrimSpace(line) == "":
			line = "/deny no answer (input closed)"
		case err != nil && !errors.Is(err, io.EOF):
			return err
		}
		answer := strings.TrimSpace(line)
		switch strings.ToLower(answer) {
		case "":
			continue
		case "y", "yes":
			answer = "/approve"
		case "n", "no":
			answer = "/deny"
		}
		cerr := k.c.Call(ctx, kernel.MethodApprove, kernel.ApproveParams{Request: e.Approval.ID, Answer: answer}, nil)
		if cerr == nil {
			return nil
		}
		k.printf("fluffy: %s\n", termsafe.String(cerr.Error()))
		if ie, ok := errors.AsType[*ipc.Error](cerr); ok && ie.Code == approval.CodeUnknownRequest {
			// Expired, or answered by another client: nothing to ask.
			return nil
		}
		if err != nil {
			return fmt.Errorf("answer the approval: %w", cerr)
		}
	}
}

// ask reads one answer; Ctrl-C twice detaches, once repeats the question.
func (k *console) ask(prompt string) (string, error) {
	for {
		line, err := k.in.ReadLine(prompt)
		if errors.Is(err, errInterrupt) {
			if err := k.interrupt(); err != nil {
				return "", err
			}
			continue
		}
		return strings.TrimSpace(line), err
	}
}

// pending returns the session's change set.
func (k *console) pending(ctx context.Context, paths ...string) (kernel.DiffResult, error) {
	var d kernel.DiffResult
	if err := k.c.Call(ctx, kernel.MethodDiff, kernel.DiffParams{ID: k.id, Paths: paths}, &d); err != nil {
		return d, fmt.Errorf("read the change set: %w", err)
	}
	return d, nil
}

// showDiff prints the change set's stat and its diff.
func (k *console) showDiff(ctx context.Context) error {
	d, err := k.pending(ctx)
	if err != nil {
		return err
	}
	if len(d.Changes) == 0 {
		k.printf("no changes\n")
		return nil
	}
	k.printf("%s%s%s", widening(k.caps, d.Widening), tui.Stat(k.caps, tui.SplitDiff(d.Diff), k.width()), tui.ColorDiff(k.caps, d.Diff))
	return nil
}

func (k *console) width() int {
	if k.caps.TTY {
		if c, _, err := tui.Size(k.caps.FD); err == nil {
			return c
		}
	}
	return 80
}

// summary prints what the session changed, its tests and audit range;
// it returns the changes.
func (k *console) summary(ctx context.Context, out io.Writer) (kernel.DiffResult, error) {
	d, err := k.pending(ctx)
	if err != nil {
		return d, err
	}
	k.r.endText()
	if len(d.Changes) == 0 {
		fmt.Fprintln(out, "no changes")
	} else {
		fmt.Fprintf(out, "\n%d change(s):\n", len(d.Changes))
		for _, ch := range d.Changes {
			fmt.Fprintf(out, "  %-8s %s\n", ch.Op, termsafe.Line(ch.Path))
		}
		fmt.Fprintln(out)
		fmt.Fprint(out, widening(k.caps, d.Widening))
		fmt.Fprint(out, tui.Stat(k.caps, tui.SplitDiff(d.Diff), k.width()))
		if !k.caps.TTY {
			// Logs of pipes and CI keep the whole diff.
			fmt.Fprintln(out)
			fmt.Fprint(out, termsafe.String(d.Diff))
		}
	}
	if k.r.tests != "" {
		fmt.Fprintf(out, "tests: %s\n", k.r.tests)
	}
	if s := k.r.stats; s.TDD != "" {
		fmt.Fprintf(out, "tdd:   %s (%s)\n", s.TDD, s.Mode)
	}
	if first, last, err := k.a.auditRange(ctx, k.id); err == nil && first > 0 {
		fmt.Fprintf(out, "audit: entries %d..%d (fluffy audit log --session %s)\n", first, last, k.id)
	}
	return d, nil
}

// finish shows the summary and applies, reviews, keeps or discards the
// change set, as flags or the user say. A session without changes is
// closed, unless its run faulted (then it stays for a resume).
func (k *console) finish(ctx context.Context, res kernel.RunResult) error {
	out := k.out
	if k.f.asJSON {
		out = k.a.Stderr
	}
	if res.AutoApply != nil {
		k.r.endText()
		fmt.Fprintln(out, termsafe.String(res.AutoApply.Summary()))
	}
	d, err := k.summary(ctx, out)
	if err != nil {
		return err
	}
	if len(d.Changes) == 0 {
		if res.Fault != nil || res.Reason == "cancelled" {
			// Left for a resume.
			fmt.Fprintf(out, "session %s stays open: resume it with 'fluffy session resume %s'\n", k.id, k.id)
			return nil
		}
		if err := k.c.Call(ctx, kernel.MethodClose, kernel.CloseParams{ID: k.id}, &kernel.CloseResult{}); err != nil {
			return fmt.Errorf("close the session: %w", err)
		}
		return nil
	}
	choice := "k"
	switch {
	case k.f.yes:
		choice = "a"
	case k.f.noApply:
	default:
		ans, err := k.ask("apply these changes to the working tree? [a]pply all / [r]eview file by file / [k]eep pending / [d]iscard: ")
		if errors.Is(err, errDetach) {
			return err
		}
		choice = strings.ToLower(ans)
	}
	switch choice {
	case "a", "apply", "y", "yes":
		var cr kernel.CloseResult
		if err := k.c.Call(ctx, kernel.MethodClose, kernel.CloseParams{ID: k.id, Apply: true}, &cr); err != nil {
			return fmt.Errorf("apply: %w", err)
		}
		fmt.Fprintf(out, "applied %d change(s)\n", len(cr.Applied))
	case "r", "review":
		return k.review(ctx, out, d)
	case "d", "discard":
		if err := k.c.Call(ctx, kernel.MethodClose, kernel.CloseParams{ID: k.id}, &kernel.CloseResult{}); err != nil {
			return fmt.Errorf("discard: %w", err)
		}
		fmt.Fprintln(out, "discarded")
	default:
		fmt.Fprintf(out, "kept pending: apply with 'fluffy session close --apply %s', discard with 'fluffy session close %s'\n", k.id, k.id)
	}
	return nil
}

// review goes through the changed files one by one: each one's diff, then
// apply, skip or quit. The chosen files are applied together (all or
// nothing, through changeset.apply); the others stay pending.
func (k *console) review(ctx context.Context, out io.Writer, d kernel.DiffResult) error {
	var paths []string
	for _, ch := range d.Changes {
		if ch.Kind == changeset.KindDir && ch.Op != changeset.Deleted {
			continue // applied with the files below it
		}
		if len(paths) > 0 && paths[len(paths)-1] == ch.Path {
			continue // a type change lists a path twice
		}
		paths = append(paths, ch.Path)
	}
	var chosen []string
review:
	for i, p := range paths {
		fd, err := k.pending(ctx, p)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "\n%s\n%s%s", k.caps.Paint(tui.Bold, fmt.Sprintf("[%d/%d] %s", i+1, len(paths), termsafe.Line(p))), widening(k.caps, fd.Widening), tui.ColorDiff(k.caps, fd.Diff))
		for {
			ans, err := k.ask(fmt.Sprintf("apply %s? [a]pply / [s]kip / [q]uit: ", termsafe.Line(p)))
			if errors.Is(err, errDetach) {
				return err
			}
			switch strings.ToLower(ans) {
			case "a", "apply", "y", "yes":
				chosen = append(chosen, p)
			case "s", "skip", "n", "no":
			case "q", "quit":
				break review
			default:
				if err != nil { // end of input: skip the rest
					break review
				}
				continue
			}
			break
		}
	}
	if len(chosen) > 0 {
		applied, err := k.apply(ctx, chosen)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "applied %d change(s): %s\n", len(applied), termsafe.Line(strings.Join(chosen, ", ")))
	}
	rest, err := k.pending(ctx)
	if err != nil {
		return err
	}
	if len(rest.Changes) == 0 {
		return k.c.Call(ctx, kernel.MethodClose, kernel.CloseParams{ID: k.id}, &kernel.CloseResult{})
	}
	fmt.Fprintf(out, "kept %d change(s) pending: apply with 'fluffy session close --apply %s', discard with 'fluffy session close %s'\n", len(rest.Changes), k.id, k.id)
	return nil
}

func (k *console) switchMode(ctx context.Context, mode string) error {
	var res kernel.ModeResult
	if err := k.c.Call(ctx, kernel.MethodMode, kernel.ModeParams{ID: k.id, Mode: mode}, &res); err != nil {
		return fmt.Errorf("switch mode: %w", err)
	}
	k.r.stats.Mode, k.r.stats.TDD = string(res.To), string(res.State)
	k.printf("tdd mode %s → %s (state %s)\n", res.From, res.To, res.State)
	for _, p := range res.Reverted {
		k.printf("reverted instrumentation: %s\n", termsafe.Line(p))
	}
	k.drawStatus()
	return nil
}

// apply writes the pending changes at or below paths (all when none) to
// the working tree, all or nothing, and keeps the session open
// (changeset.apply, as fluffy changeset apply). A conflict applies
// nothing and shows each path's three versions.
func (k *console) apply(ctx context.Context, paths []string) ([]changeset.Change, error) {
	var res kernel.ChangesResult
	if err := k.c.Call(ctx, kernel.MethodChangesApply, kernel.ChangesParams{Session: k.id, Paths: paths}, &res); err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	if err := res.Refused(); err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	return res.Changes, nil
}

// discard drops the pending changes at or below paths (all when none) and
// keeps the session open (changeset.discard).
func (k *console) discard(ctx context.Context, paths []string) (int, error) {
	var res kernel.ChangesResult
	if err := k.c.Call(ctx, kernel.MethodChangesDiscard, kernel.ChangesParams{Session: k.id, Paths: paths}, &res); err != nil {
		return 0, fmt.Errorf("discard: %w", err)
	}
	return len(res.Changes), nil
}
