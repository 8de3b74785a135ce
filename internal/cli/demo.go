package cli

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rogpeppe/go-internal/txtar"
	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
	"github.com/fluffy-agent/fluffy/internal/units"
)

// The demo's examples: a project and the conversation the replay model
// plays over it (script.jsonl), one txtar archive per language.
//
//go:embed demo/*.txtar
var demoFS embed.FS

// demoExample is the example the demo runs.
type demoExample struct {
	lang   string // "go" or "python"
	runner string // what runs the tests, for the narration
	why    string // how it was chosen
}

// pickDemoExample chooses the Go example when a Go toolchain is on PATH,
// else the Python one when python3 and pytest are; want forces one.
func (a *App) pickDemoExample(want string) (demoExample, error) {
	path, _ := a.Getenv("PATH")
	look := func(name string) string {
		for _, d := range filepath.SplitList(path) {
			p := filepath.Join(d, name)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				return p
			}
		}
		return ""
	}
	goBin, py, pytest := look("go"), look("python3"), look("pytest")
	switch {
	case want == "go" || (want == "" && goBin != ""):
		if goBin == "" {
			return demoExample{}, &ExitError{Code: ExitFailure, Msg: "demo: --lang go needs the go command on PATH\nfix: install Go (https://go.dev/dl/) or run 'fluffy demo' without --lang"}
		}
		return demoExample{lang: "go", runner: "go test", why: "found the Go toolchain at " + goBin}, nil
	case want == "python" || want == "":
		if py == "" || pytest == "" {
			return demoExample{}, &ExitError{Code: ExitFailure, Msg: "demo: no toolchain to run the example's tests: neither go nor python3 with pytest is on PATH\nfix: install Go (https://go.dev/dl/), or python3 and pytest (Debian: apt-get install python3-pytest), then run 'fluffy demo' again"}
		}
		why := "found python3 and pytest at " + pytest
		if goBin == "" && want == "" {
			why = "no Go toolchain on PATH; " + why
		}
		return demoExample{lang: "python", runner: "pytest", why: why}, nil
	}
	return demoExample{}, fmt.Errorf("%w: --lang: want go or python, not %q", errUsage, want)
}

func newDemoCmd(a *App) *cobra.Command {
	var lang string
	var keep bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Watch fluffy work: the test-first flow on a bundled example, no API key needed",
		Long: `demo copies a small bundled example project (Go, or Python when Go is not
installed) to a temporary directory and runs a session on it with the
scripted replay model, explaining each step: what the model asks, which gate
decides and why, the failing test, the code, the passing test, the change
set and its diff, the apply into the copy, and the audit log's verification.

It uses a private kernel and data directory of its own and removes them, and
the copy, at the end. It keeps the Go build cache of the example (under the
data directory's cache/) so the next demo is fast; it says so at the end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runDemo(cmd.Context(), lang, keep)
		},
	}
	cmd.Flags().StringVar(&lang, "lang", "", "example to run: go or python (default: go when the Go toolchain is installed)")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the copy and the demo's data directory, and say where they are")
	cmd.AddCommand(newDemoAssistantCmd(a))
	return cmd
}

// demoTask is the demo session's task.
const demoTask = "add a function that sums numbers, with its test"

func (a *App) runDemo(ctx context.Context, lang string, keep bool) (err error) {
	ex, err := a.pickDemoExample(lang)
	if err != nil {
		return err
	}
	l, err := a.Config()
	if err != nil {
		return err
	}
	user, err := datadir.New(l.Config.Home)
	if err != nil {
		return err
	}
	w := a.Stdout
	say := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	step := func(n int, title string) { fmt.Fprintf(w, "\n%d. %s\n", n, title) }
	say("fluffy demo: a coding session under fluffy's gates, on a bundled example, with a scripted model.")
	say("Nothing here needs an API key or the network: the model is 'replay', which plays a recorded conversation")
	say("through exactly the same gates, sandbox and audit log as a real model.")

	// The copy lives at a fixed place in the data directory (one demo at
	// a time), so the example's Go build cache is the same from one demo
	// to the next; the demo's kernel gets a data directory of its own.
	demoRoot := user.Path("demo")
	if err := os.MkdirAll(demoRoot, 0o700); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	lock, err := lockFile(filepath.Join(demoRoot, ".lock"))
	if err != nil {
		return err
	}
	defer lock.Close()
	ws := filepath.Join(demoRoot, "calc-"+ex.lang)
	_ = os.RemoveAll(ws) // a copy a killed demo left
	// The copy is a project of its own (.fluffy marks it): its .fluffy/
	// is then among the files the agent may never write.
	if err := os.MkdirAll(filepath.Join(ws, ".fluffy"), 0o755); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if n := sweepDemoLeftovers(os.TempDir()); n > 0 {
		say("(removed what %d interrupted demo(s) left in %s)", n, os.TempDir())
	}
	tmp, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", demoTmpPrefix, os.Getpid()))
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	home := filepath.Join(tmp, "home")
	da := &App{Stdin: a.Stdin, Stdout: a.Stdout, Stderr: a.Stderr, Environ: a.Environ, Cwd: ws, Self: a.Self, Core: a.Core,
		home: home, userConfig: os.DevNull, logLevel: a.logLevel}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		stopDemoKernel(cctx, da)
		if keep {
			say("\nkept (--keep): the copy %s, the demo's data directory %s", ws, home)
			return
		}
		_ = os.RemoveAll(ws)
		_ = os.RemoveAll(tmp)
		_ = os.Remove(filepath.Join(demoRoot, ".lock"))
		_ = os.Remove(demoRoot) // only when empty
	}()

	step(1, "The example")
	files, script, err := writeDemoExample(ex.lang, ws, filepath.Join(tmp, "script.jsonl"))
	if err != nil {
		return err
	}
	say("   %s: the %s example (%s), copied to %s:", ex.why, ex.lang, strings.Join(files, ", "), ws)
	say("   a package with no tests yet. The task: %q.", demoTask)

	step(2, "A kernel of the demo's own")
	// The demo kernel's build cache is the user's: the copy's path is
	// fixed, so its cache key is too.
	if err := os.MkdirAll(user.Path(datadir.Cache), 0o700); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if err := os.Symlink(user.Path(datadir.Cache), filepath.Join(home, datadir.Cache)); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	c, err := da.connectKernel(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	say("   started with a private data directory (%s): its own fluffy.db, audit log and signing key.", home)
	say("   Every write of the session goes to a change set there; the copy changes only when the change set is applied.")

	step(3, "The session")
	model := "replay/" + script
	var info kernel.Info
	if err := c.Call(ctx, kernel.MethodCreate, kernel.CreateParams{Workspace: ws, Task: demoTask, Model: model}, &info); err != nil {
		return fmt.Errorf("demo: create the session: %w", err)
	}
	say("   session %s, model replay (script %s)", info.ID, filepath.Base(script))
	say("   Each tool call takes the same road: the TDD state gate, then the policy gate, then (if allowed) the sandbox;")
	say("   every decision is in the audit log before the model sees the result.\n")
	res, err := demoRun(ctx, c, info.ID, ex, w)
	if err != nil {
		return err
	}
	if res.Fault != nil {
		return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("demo: the session stopped: %s error: %s\nfix: %s", res.Fault.Class, res.Fault.Message, res.Fault.Fix)}
	}

	step(4, "The change set")
	var d kernel.DiffResult
	if err := c.Call(ctx, kernel.MethodDiff, kernel.IDParams{ID: info.ID}, &d); err != nil {
		return fmt.Errorf("demo: read the change set: %w", err)
	}
	say("   The copy is still untouched. The session's change set holds:")
	for _, ch := range d.Changes {
		say("     %-8s %s", ch.Op, termsafe.Line(ch.Path))
	}
	say("")
	fmt.Fprint(w, indent(termsafe.String(d.Diff), "   "))

	step(5, "Apply")
	var cr kernel.CloseResult
	if err := c.Call(ctx, kernel.MethodClose, kernel.CloseParams{ID: info.ID, Apply: true}, &cr); err != nil {
		return fmt.Errorf("demo: apply: %w", err)
	}
	say("   You would review the diff and answer 'y' (or run 'fluffy session close --apply ID'). The demo applies it:")
	say("   %d change(s) written into %s, atomically, after checking the copy did not change meanwhile.", len(cr.Applied), ws)
	now, _ := os.ReadDir(ws)
	var names []string
	for _, e := range now {
		names = append(names, e.Name())
	}
	say("   The copy now holds: %s", strings.Join(names, ", "))

	step(6, "The audit log")
	say("   Every gate decision, every sandboxed run and the apply were recorded, hash-chained and signed:")
	c.Close()
	var out bytes.Buffer
	va := &App{Stdin: a.Stdin, Stdout: &out, Stderr: &out, Environ: a.Environ, Cwd: ws, Self: a.Self, Core: a.Core}
	if code := Main(ctx, va, []string{"--home", home, "--config", os.DevNull, "audit", "log"}); code != 0 {
		fmt.Fprint(w, indent(out.String(), "   "))
		return &ExitError{Code: code, Msg: "demo: audit log failed (above)"}
	}
	fmt.Fprint(w, indent(summarizeAuditLog(out.String()), "   "))
	out.Reset()
	code := Main(ctx, va, []string{"--home", home, "--config", os.DevNull, "audit", "verify"})
	say("   $ fluffy audit verify")
	fmt.Fprint(w, indent(out.String(), "   "))
	if code != 0 {
		return &ExitError{Code: code, Msg: "demo: the audit log did not verify (above)"}
	}

	step(7, "Your turn")
	say("   In one of your repositories, with a real model (fluffy models lists them and the key each needs):")
	say("     cd your-repo")
	say("     export ANTHROPIC_API_KEY=...      # or OPENAI_API_KEY, GEMINI_API_KEY, OLLAMA_HOST")
	say("     fluffy -m anthropic/claude-sonnet-4-5 \"add a --json flag to the report command\"")
	say("   Nothing reaches your files before you say yes to the diff; 'fluffy audit log' shows what happened.")
	if !keep {
		say("\nCleaned up: the copy, the demo's kernel and its data directory.")
	}
	if kept := cacheKeyDir(user, ws); exists(kept) {
		say("Kept: the example's build cache, %s (%s), so the next demo is fast; remove it with: rm -rf %s", kept, dirSize(kept), kept)
	}
	return nil
}

// writeDemoExample writes the example's files to ws and its script to
// scriptPath; it returns the file names and the script's path.
func writeDemoExample(lang, ws, scriptPath string) ([]string, string, error) {
	b, err := demoFS.ReadFile("demo/" + lang + ".txtar")
	if err != nil {
		return nil, "", fmt.Errorf("demo: no %s example: %w", lang, err)
	}
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return nil, "", fmt.Errorf("demo: %w", err)
	}
	var names []string
	for _, f := range txtar.Parse(b).Files {
		dst := filepath.Join(ws, f.Name)
		if f.Name == "script.jsonl" {
			dst = scriptPath
		} else {
			names = append(names, f.Name)
		}
		if err := os.WriteFile(dst, f.Data, 0o644); err != nil {
			return nil, "", fmt.Errorf("demo: %w", err)
		}
	}
	return names, scriptPath, nil
}

// demoRun runs the session and narrates its events.
func demoRun(ctx context.Context, c *ipc.Client, id string, ex demoExample, w io.Writer) (kernel.RunResult, error) {
	if err := c.Subscribe(ctx, kernel.Topic(id)); err != nil {
		return kernel.RunResult{}, fmt.Errorf("demo: attach to the session: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Call(ctx, kernel.MethodRun, kernel.IDParams{ID: id}, nil) }()
	n := &narrator{w: w, ex: ex}
	for {
		select {
		case ev, ok := <-c.Events():
			if !ok {
				return kernel.RunResult{}, lostKernel(id, c.Err())
			}
			var e kernel.Event
			if err := json.Unmarshal(ev.Data, &e); err != nil {
				return kernel.RunResult{}, fmt.Errorf("demo: decode an event: %w", err)
			}
			if e.Type == kernel.TypeApproval && e.Approval != nil {
				// The demo's script needs no approval; refuse rather than hang.
				_ = c.Call(ctx, kernel.MethodApprove, kernel.ApproveParams{Request: e.Approval.ID, Answer: "/deny the demo answers no approvals"}, nil)
			}
			n.event(e)
			if e.Type == kernel.TypeDone && e.Result != nil {
				return *e.Result, nil
			}
		case err := <-done:
			if err != nil {
				if ctx.Err() != nil {
					return kernel.RunResult{}, &ExitError{Code: 130, Msg: "demo: interrupted"}
				}
				return kernel.RunResult{}, fmt.Errorf("demo: run the session: %w", err)
			}
			done = nil
		}
	}
}

// narrator explains a session's events in plain words.
type narrator struct {
	w      io.Writer
	ex     demoExample
	inText bool
}

var (
	tddRE  = regexp.MustCompile(`\[tdd: ([a-z_]+) → ([a-z_]+)`)
	gateRE = regexp.MustCompile(`^refused by the (state|policy) gate \(rule ([^)]+)\)`)
)

// tddMeaning says what reaching a TDD state means.
var tddMeaning = map[string]string{
	"writing_test": "a test was written; the TDD machine now wants to see it fail before any code",
	"red":          "the new test fails, as it must: now, and only now, code may be written",
	"implementing": "code is being written; the tests must pass next",
	"green":        "the tests pass: the cycle is complete",
}

func (n *narrator) event(e kernel.Event) {
	w := n.w
	endText := func() {
		if n.inText {
			fmt.Fprintln(w, "\"")
			n.inText = false
		}
	}
	switch e.Type {
	case kernel.Type(agent.EventText):
		if !n.inText {
			fmt.Fprint(w, "   model: \"")
			n.inText = true
		}
		fmt.Fprint(w, e.Agent.Text)
	case kernel.Type(agent.EventToolCall):
		endText()
		if c := e.Agent.Call; c != nil {
			fmt.Fprintf(w, "   → the model asks for %s %s\n", c.Name, describeArgs(c.Args))
		}
	case kernel.Type(agent.EventToolResult):
		endText()
		r := e.Agent.Result
		if r == nil {
			return
		}
		first := strings.SplitN(r.Content, "\n", 2)[0]
		if m := gateRE.FindStringSubmatch(first); m != nil {
			gate := "TDD state gate"
			if m[1] == "policy" {
				gate = "policy gate"
			}
			fmt.Fprintf(w, "     ✗ refused by the %s, rule %s\n", gate, m[2])
			for _, l := range strings.Split(strings.TrimSpace(r.Content), "\n")[1:] {
				fmt.Fprintf(w, "       %s\n", clipText(l, 200))
			}
			fmt.Fprintln(w, "       Nothing ran: the model gets this refusal as the call's result and must adapt.")
			return
		}
		if r.Decision != "" {
			fmt.Fprintf(w, "     ✓ %s\n", strings.Replace(r.Decision, "allow: rule ", "allowed by the policy gate, rule ", 1))
		}
		if e.Agent.Call != nil && e.Agent.Call.Name == "test.run" {
			fmt.Fprintf(w, "     ran %s in the sandbox (no network, writes only into the change set):\n", n.ex.runner)
			for _, l := range strings.Split(strings.TrimSpace(r.Content), "\n") {
				if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "[tdd: ") {
					fmt.Fprintf(w, "       %s\n", clipText(l, 160))
				}
			}
		} else {
			fmt.Fprintf(w, "     %s\n", clipText(stripTDD(first), 160))
		}
		if m := tddRE.FindStringSubmatch(r.Content); m != nil {
			fmt.Fprintf(w, "     TDD: %s → %s: %s\n", m[1], m[2], tddMeaning[m[2]])
		}
	case kernel.Type(agent.EventStop):
		endText()
		fmt.Fprintf(w, "   · the model stopped (%s) after %d turns\n", e.Agent.Reason, e.Agent.Turn)
	case kernel.TypeError:
		endText()
		if f := e.Fault; f != nil {
			fmt.Fprintf(w, "   ! %s error: %s\n", f.Class, f.Message)
		}
	case kernel.TypeDone:
		endText()
	}
}

// describeArgs shows a call's arguments briefly: a path and its size,
// or the JSON.
func describeArgs(raw json.RawMessage) string {
	var a map[string]any
	if json.Unmarshal(raw, &a) != nil {
		return clipText(string(raw), 80)
	}
	if p, ok := a["path"].(string); ok {
		if c, ok := a["content"].(string); ok {
			return fmt.Sprintf("%s (%d bytes)", p, len(c))
		}
		return p
	}
	return clipText(string(raw), 80)
}

// stripTDD removes the router's "[tdd: ...]" note (the narrator says it
// in words).
func stripTDD(s string) string {
	if i := strings.Index(s, " [tdd: "); i >= 0 {
		if j := strings.Index(s[i:], "]"); j >= 0 {
			return s[:i] + s[i+j+1:]
		}
	}
	return s
}

func clipText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func indent(s, prefix string) string {
	if s == "" {
		return ""
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return prefix + strings.Join(lines, "\n"+prefix) + "\n"
}

// summarizeAuditLog keeps each line's sequence, kind and actor (the
// payloads are long; 'fluffy audit log' shows them).
func summarizeAuditLog(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Split(l, "\t")
		if len(f) < 5 {
			b.WriteString(l + "\n")
			continue
		}
		fmt.Fprintf(&b, "%4s  %-18s %s\n", f[0], f[3], f[4])
	}
	return b.String()
}

// demoTmpPrefix names a demo's temporary directory, with its pid:
// "fluffy-demo-<pid>-<random>".
const demoTmpPrefix = "fluffy-demo-"

// sweepDemoLeftovers removes the temporary directories of demos that were
// killed before they could clean up: the demo's pid no longer runs and no
// kernel holds the directory's data (its kernel.lock is free). It returns
// how many it removed. Only the caller's own directories are swept: the
// temporary directory is shared, and a demo run as root must not remove
// another user's directory that merely bears the demo's name.
func sweepDemoLeftovers(dir string) int {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), demoTmpPrefix)
		pid, _, ok2 := strings.Cut(rest, "-")
		p, err := strconv.Atoi(pid)
		if !ok || !ok2 || err != nil || p <= 0 || !e.IsDir() {
			continue
		}
		if fi, err := e.Info(); err != nil || !ownedBy(fi, os.Geteuid()) {
			continue
		}
		if err := syscall.Kill(p, 0); err == nil || errors.Is(err, syscall.EPERM) {
			continue // that demo still runs
		}
		path := filepath.Join(dir, e.Name())
		if f, err := os.OpenFile(filepath.Join(path, "home", kernel.LockFile), os.O_RDWR, 0); err == nil {
			busy := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil
			f.Close()
			if busy {
				continue // its kernel still runs; it exits when idle
			}
		}
		if os.RemoveAll(path) == nil {
			n++
		}
	}
	return n
}

// ownedBy reports whether fi's owner is uid.
func ownedBy(fi os.FileInfo, uid int) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == uid
}

// stopDemoKernel stops the demo's kernel, if it runs.
func stopDemoKernel(ctx context.Context, da *App) {
	c, err := da.dialRunning(ctx)
	if err != nil || c == nil {
		return
	}
	defer c.Close()
	pid := int(c.ServerCred().PID)
	if err := c.Call(ctx, kernel.MethodShutdown, nil, nil); err != nil && !errors.Is(err, ipc.ErrShuttingDown) {
		return
	}
	// The kernel records kernel.stop after it closed its connections:
	// wait for the process itself to end before its files are removed.
	for pid > 0 && syscall.Kill(pid, 0) == nil && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
}

// cacheKeyDir is the build cache directory of workspace ws.
func cacheKeyDir(d datadir.Dir, ws string) string {
	return sandbox.CacheRoot(d.Path(datadir.Cache), ws)
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// dirSize is the space a directory tree takes, readably.
func dirSize(dir string) string { return units.Size(treeBytes(dir)).Approx() }

// lockFile takes an exclusive lock on path, or says another demo runs.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, &ExitError{Code: ExitFailure, Msg: "demo: another fluffy demo is running\nfix: wait for it to finish, then run 'fluffy demo' again"}
	}
	return f, nil
}
