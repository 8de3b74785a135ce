package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

// The assistant demo's model: it reads the event, asks to run one
// command, and reports.
const assistantDemoScript = `{"turn": {"text": "A deploy of web 1.2.3 arrived. I will note it in the deploy log; writing needs your approval.", "tool_calls": [{"id": "d1", "name": "shell.exec", "args": {"command": "echo 'web 1.2.3 deployed' >> deploys.log && cat deploys.log"}}]}}
{"expect": {"id": "d1", "is_error": false, "contains": "web 1.2.3 deployed"}}
{"turn": {"text": "Noted the deploy of web 1.2.3 in deploys.log (in my change set, for you to review)."}}
{"end": {}}
`

const (
	assistantDemoEvent = `{"event": "deploy", "service": "web", "version": "1.2.3"}`
	assistantDemoKey   = "demo-secret-0123456789abcdef0123"
)

func newDemoAssistantCmd(a *App) *cobra.Command {
	var keep bool
	cmd := &cobra.Command{
		Use:   "assistant",
		Short: "Watch the assistant daemon: a signed webhook, an approval, a sandboxed command, a report",
		Long: `demo assistant starts 'fluffy serve' with a private data directory and a
temporary assistant workspace, on the scripted replay model (no API key, no
network beyond loopback). A signed webhook arrives; the assistant plans,
asks for approval (the demo answers as you would with 'fluffy approve'),
runs its command in the sandbox and reports. Then the audit log is shown
and verified, and everything is removed (--keep keeps it).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runDemoAssistant(cmd.Context(), keep)
		},
	}
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the demo's data directory and workspace, and say where they are")
	return cmd
}

func (a *App) runDemoAssistant(ctx context.Context, keep bool) error {
	w := a.Stdout
	say := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	step := func(n int, title string) { fmt.Fprintf(w, "\n%d. %s\n", n, title) }
	say("fluffy demo assistant: the assistant daemon (fluffy serve) reacting to a signed webhook, with a scripted model.")
	say("Nothing here needs an API key or the network: the model is 'replay', and the webhook is posted on loopback.")

	tmp, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", demoTmpPrefix, os.Getpid()))
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	// Short names: the kernel's socket is in home, and a socket's path
	// is limited to about 100 bytes.
	home, ws := filepath.Join(tmp, "h"), filepath.Join(tmp, "workspace")
	// The configuration's directory is fluffy's own files, which no
	// sandbox may run over: it is beside the workspace, not above it.
	cfg, script, key := filepath.Join(tmp, "c", "config.yaml"), filepath.Join(tmp, "script.jsonl"), filepath.Join(tmp, "c", "hook.key")
	da := &App{Stdin: a.Stdin, Stdout: io.Discard, Stderr: io.Discard, Environ: a.Environ, Cwd: tmp, Self: a.Self, Core: a.Core,
		home: home, userConfig: cfg, logLevel: a.logLevel}
	var exited chan error // the daemon's Wait, once it started
	defer func() {
		if exited != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			stopDemoKernel(cctx, da)
			cancel()
			<-exited
		}
		if keep {
			say("\nkept (--keep): the demo's data directory %s, the workspace %s, the daemon's log %s", home, ws, filepath.Join(tmp, "serve.log"))
			return
		}
		_ = os.RemoveAll(tmp)
	}()
	config := fmt.Sprintf(`model: replay/%s
serve:
  workspace: %s
  listen: 127.0.0.1:0
  grace: 5s
  webhooks:
    - name: deploy
      secret: file:%s
      signature: fluffy
      prompt: Note each deploy in deploys.log; ask before running anything.
`, script, ws, key)
	if err := os.Mkdir(filepath.Dir(cfg), 0o700); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	for p, text := range map[string]string{cfg: config, script: assistantDemoScript, key: assistantDemoKey,
		filepath.Join(tmp, "event.json"): assistantDemoEvent} {
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return fmt.Errorf("demo: %w", err)
	}

	step(1, "The assistant's workspace")
	var out bytes.Buffer
	va := &App{Stdin: a.Stdin, Stdout: &out, Stderr: &out, Environ: a.Environ, Cwd: tmp, Self: a.Self, Core: a.Core}
	fl := func(args ...string) (string, error) {
		out.Reset()
		if code := Main(ctx, va, append([]string{"--home", home, "--config", cfg}, args...)); code != 0 {
			return out.String(), &ExitError{Code: code, Msg: fmt.Sprintf("demo: fluffy %s failed:\n%s", strings.Join(args, " "), indent(out.String(), "   "))}
		}
		return out.String(), nil
	}
	if _, err := fl("serve", "init"); err != nil {
		return err
	}
	say("   $ fluffy serve init    # SOUL.md, USER.md, AGENTS.md, TOOLS.md, HEARTBEAT.md, MEMORY.md in %s", ws)
	say("   The configuration: one webhook, 'deploy', signed with a secret kept in a 0600 file.")

	step(2, "The daemon")
	logf, err := os.OpenFile(filepath.Join(tmp, "serve.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer logf.Close()
	daemon := exec.Command(a.Self, "--home", home, "--config", cfg, "serve")
	daemon.Env, daemon.Dir, daemon.Stdout, daemon.Stderr = a.Environ, tmp, logf, logf
	// A demo killed before its cleanup takes its daemon along: a daemon
	// left running would hold a directory the next demo's sweep removes.
	daemon.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := daemon.Start(); err != nil {
		return fmt.Errorf("demo: start fluffy serve: %w", err)
	}
	exited = make(chan error, 1)
	go func() { exited <- daemon.Wait() }()
	listen, err := demoListenAddr(ctx, da, exited)
	if err != nil {
		b, _ := os.ReadFile(filepath.Join(tmp, "serve.log"))
		return fmt.Errorf("%w; its log:\n%s", err, indent(termsafe.String(string(b)), "   "))
	}
	say("   $ fluffy serve    (in the background, with a private data directory: its own fluffy.db, audit log and key)")
	say("   listening for webhooks on http://%s/hooks/deploy", listen)

	step(3, "A signed webhook arrives")
	headers, err := fl("hook", "sign", "deploy", "--body", filepath.Join(tmp, "event.json"), "--event", "deploy")
	if err != nil {
		return err
	}
	say("   $ fluffy hook sign deploy --body event.json    # the headers a sender computes with the shared secret")
	fmt.Fprint(w, indent(termsafe.String(headers), "     "))
	id, err := demoPost(ctx, listen, headers)
	if err != nil {
		return err
	}
	say("   POST /hooks/deploy %s → 202, session %s", assistantDemoEvent, id)
	say("   The signature and the delivery id were checked (a replay or a bad signature is refused and recorded);")
	say("   the payload reaches the model wrapped and labelled as untrusted data, never as instructions,")
	say("   and the session is marked untrusted: policy holds writes to memory, persona and schedules for you.")

	step(4, "The assistant plans, asks, acts")
	c, err := da.connectKernel(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	res, answered, err := demoAssistantRun(ctx, c, id, w)
	if err != nil {
		return err
	}
	if res.Fault != nil {
		return &ExitError{Code: ExitFailure, Msg: fmt.Sprintf("demo: the session stopped: %s error: %s", res.Fault.Class, res.Fault.Message)}
	}

	// The first answer wins; any later one, from any channel, is refused.
	for req := range answered {
		var ie *ipc.Error
		err := c.Call(ctx, approval.MethodAnswer, approval.AnswerParams{ID: req, Answer: "/deny", Who: "demo"}, nil)
		if !errors.As(err, &ie) || ie.Code != approval.CodeUnknownRequest {
			return fmt.Errorf("demo: a second answer to %s: %v, want it refused as already answered", req, err)
		}
		say("   $ fluffy approve %s /deny    → refused: request %s was already answered", req, req)
	}

	step(5, "The report and the change set")
	say("   A webhook cannot carry a reply: the report goes to the hook's report route (serve.webhooks[].report)")
	say("   or your approval channels; here the session keeps it (fluffy session show %s).", id)
	var d kernel.DiffResult
	if err := c.Call(ctx, kernel.MethodDiff, kernel.IDParams{ID: id}, &d); err != nil {
		return fmt.Errorf("demo: read the change set: %w", err)
	}
	for _, ch := range d.Changes {
		say("     %-8s %s", ch.Op, termsafe.Line(ch.Path))
	}
	say("   The workspace itself is untouched until you apply the change set.")
	c.Close()

	step(6, "The audit log")
	log, err := fl("audit", "log")
	if err != nil {
		return err
	}
	fmt.Fprint(w, indent(summarizeAuditLog(log), "   "))
	v, err := fl("audit", "verify")
	say("   $ fluffy audit verify")
	fmt.Fprint(w, indent(v, "   "))
	if err != nil {
		return err
	}

	step(7, "Your turn")
	say("   fluffy serve init          # your assistant's workspace and a commented serve: section")
	say("   fluffy serve --check       # validate it; then fluffy serve, or fluffy serve install-unit")
	say("   docs/serve.md and docs/webhooks.md say the rest.")
	if !keep {
		say("\nCleaned up: the daemon, its data directory and the workspace.")
	}
	return nil
}

// demoListenAddr waits for the demo's daemon to serve and returns its
// webhook address (serve.listen was port 0). It only dials: a command
// such as 'fluffy status' would start a kernel of its own on the socket
// when it came before the daemon.
func demoListenAddr(ctx context.Context, da *App, exited chan error) (string, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		if c, err := da.dialRunning(ctx); err == nil && c != nil {
			var st kernel.DaemonStatus
			err := c.Call(ctx, kernel.MethodStatus, nil, &st)
			c.Close()
			if err == nil && st.Serve != nil && st.Serve.Listen != "" {
				return st.Serve.Listen, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", errors.New("demo: the daemon did not start within a minute")
		}
		select {
		case err := <-exited:
			exited <- err // for the caller's cleanup
			return "", fmt.Errorf("demo: the daemon exited: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// demoPost posts the demo's event with headers (as 'fluffy hook sign'
// prints them) and returns the session id of the 202.
func demoPost(ctx context.Context, listen, headers string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+listen+"/hooks/deploy", strings.NewReader(assistantDemoEvent))
	if err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	for _, l := range strings.Split(strings.TrimSpace(headers), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
		}
	}
	res, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return "", fmt.Errorf("demo: post the webhook: %w", err)
	}
	defer res.Body.Close()
	var body struct {
		Session string `json:"session"`
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 1<<16)).Decode(&body); err != nil || res.StatusCode != http.StatusAccepted || body.Session == "" {
		return "", fmt.Errorf("demo: the webhook was not taken: %s (%v)", res.Status, err)
	}
	return body.Session, nil
}

// demoAssistantRun follows session id until its run is done, narrating
// its events; each approval request is shown and answered yes, as a
// person would with 'fluffy approve ID /approve'. It returns the ids of
// the requests it answered.
func demoAssistantRun(ctx context.Context, c *ipc.Client, id string, w io.Writer) (kernel.RunResult, map[string]bool, error) {
	if err := c.Subscribe(ctx, kernel.Topic(id)); err != nil {
		return kernel.RunResult{}, nil, fmt.Errorf("demo: attach to the session: %w", err)
	}
	answered := map[string]bool{}
	answer := func() error {
		var l approval.ListResult
		if err := c.Call(ctx, approval.MethodList, approval.ListParams{Session: id}, &l); err != nil {
			return fmt.Errorf("demo: list approvals: %w", err)
		}
		for _, r := range l.Requests {
			if answered[r.ID] {
				continue
			}
			answered[r.ID] = true
			fmt.Fprintf(w, "   ? approval request %s, as 'fluffy approvals' shows it:\n", r.ID)
			fmt.Fprint(w, indent(termsafe.String(r.Prompt), "       "))
			fmt.Fprintf(w, "   $ fluffy approve %s /approve    (the demo answers for you)\n", r.ID)
			var res approval.AnswerResult
			if err := c.Call(ctx, approval.MethodAnswer, approval.AnswerParams{ID: r.ID, Answer: "/approve", Who: "demo"}, &res); err != nil {
				return fmt.Errorf("demo: answer %s: %w", r.ID, err)
			}

		}
		return nil
	}
	n := &narrator{w: w, ex: demoExample{runner: "the command"}}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-c.Events():
			if !ok {
				return kernel.RunResult{}, nil, lostKernel(id, c.Err())
			}
			var e kernel.Event
			if err := json.Unmarshal(ev.Data, &e); err != nil {
				return kernel.RunResult{}, nil, fmt.Errorf("demo: decode an event: %w", err)
			}
			if e.Type == kernel.TypeApproval {
				continue // answered from the list below, with its prompt
			}
			n.event(e)
			if e.Type == kernel.TypeDone && e.Result != nil {
				return *e.Result, answered, nil
			}
		case <-tick.C:
			if err := answer(); err != nil {
				return kernel.RunResult{}, nil, err
			}
			var info kernel.Info
			if err := c.Call(ctx, kernel.MethodGet, kernel.IDParams{ID: id}, &info); err == nil && info.StopReason != "" && info.Status != kernel.StatusRunning && len(answered) > 0 {
				// The run ended before this client saw its last event.
				if info.StopReason == "fault" {
					return kernel.RunResult{}, nil, &ExitError{Code: ExitFailure, Msg: "demo: the session stopped: " + info.Error}
				}
				return kernel.RunResult{}, answered, nil
			}
		case <-ctx.Done():
			return kernel.RunResult{}, nil, &ExitError{Code: 130, Msg: "demo: interrupted"}
		}
	}
}
