package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/plugin"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// ErrFailed: the plugin was given up (its server crashed too often, or
// its files changed since they were approved) and disabled.
var ErrFailed = errors.New("plugin failed")

// ErrHeld: the tool differs from what the person approved (or is new)
// and waits for their re-approval.
var ErrHeld = errors.New("plugin tool held until re-approved")

// server is one plugin's MCP server and the supervisor that keeps it
// running: it starts the process, connects, lists and checks the tools,
// and restarts it with backoff when it exits.
type server struct {
	h       *Host
	rec     plugin.Record
	name    string
	runtime sandbox.Runtime
	rtName  string
	log     *logFile

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	// firstReady is closed when the first start listed its tools, or the
	// plugin was given up.
	firstReady chan struct{}
	readyOnce  sync.Once

	mu sync.Mutex // guards the fields below
	// cs is the current MCP session, nil while the server is down; up
	// is closed when cs is set and replaced when it goes.
	cs *mcp.ClientSession
	up chan struct{}
	// regs are the registries the tools go into (a session's router is
	// built anew for each of its runs).
	regs []*tool.Registry
	// tools are the tools built, by registry name.
	tools map[string]*tool.Tool
	// registered maps a registry name to the server's tool name.
	registered map[string]string
	// held are the tools held back, by registry name, with why.
	held     map[string]string
	crashes  []time.Time
	restarts int
	failed   error
	lastErr  error
	// redact strips the current start's credential values (nil: none).
	redact func([]byte) []byte
	// The change set's turns (write-changeset): no two overlays on one
	// change set are mounted at once, so the server's sandbox gives the
	// change set up when a sandbox of the session's commands needs it
	// (yield), once no call is in flight (calls), and starts again, on
	// the change set as it is then, when the next call wants it (parked
	// is closed). stopRun ends the current run.
	calls    int
	yielding bool
	stopRun  context.CancelFunc
	parked   chan struct{}

	// image runs an image plugin's server, resolved from its pinned
	// reference before each start, with the image's own command
	// (imageArgv), or imageErr why it could not be; supervise's only.
	images    sandbox.ImageRuntime
	image     sandbox.Runtime
	imageArgv []string
	imageErr  error
}

// resolveImage resolves an image plugin's pinned image for its next
// start: a runtime that starts exactly that image, or why not (an error
// wrapping sandbox.ErrImageDigest when the name now holds another
// image).
func (s *server) resolveImage(ctx context.Context) error {
	ref := s.rec.Manifest.Run.Image
	if ref == "" {
		return nil
	}
	s.image, s.imageArgv, s.imageErr = nil, nil, nil
	rt, argv, err := s.images.Pinned(ctx, ref)
	if err != nil {
		s.imageErr = fmt.Errorf("image %s: %w", ref, err)
		return s.imageErr
	}
	s.image, s.imageArgv = rt, argv
	return nil
}

func newServer(h *Host, rec plugin.Record, reg *tool.Registry) (*server, error) {
	m := rec.Manifest
	rtName := m.Sandbox.Runtime
	if rtName == "" {
		rtName = h.o.DefaultRuntime
	}
	rt := h.o.Runtimes[rtName]
	var images sandbox.ImageRuntime
	if m.Run.Image != "" {
		images, _ = rt.(sandbox.ImageRuntime)
		if h.o.Images != nil {
			images = h.o.Images
			if m.Sandbox.Runtime == "" {
				rtName = "docker"
			}
		}
		if images == nil {
			return nil, fmt.Errorf("plugin %s: its image needs a container runtime, not %q", m.Name, rtName)
		}
		rt = nil
	}
	if rt == nil && images == nil {
		return nil, fmt.Errorf("plugin %s: its runtime %q is not available here", m.Name, rtName)
	}
	if len(m.Run.Command) == 0 && m.Run.Image == "" {
		return nil, fmt.Errorf("plugin %s: its manifest has no run.command", m.Name)
	}
	if m.Run.Transport != "" && m.Run.Transport != "stdio" && m.Run.Transport != "http" {
		return nil, fmt.Errorf("plugin %s: transport %q is not supported (stdio or http)", m.Name, m.Run.Transport)
	}
	s := &server{h: h, rec: rec, name: m.Name, runtime: rt, images: images, rtName: rtName, regs: []*tool.Registry{reg}, tools: map[string]*tool.Tool{},
		done: make(chan struct{}), firstReady: make(chan struct{}), up: make(chan struct{}),
		registered: map[string]string{}, held: map[string]string{}}
	if h.o.LogDir != "" {
		s.log = newLogFile(filepath.Join(h.o.LogDir, m.Name, plugin.LogName), h.o.LogSize)
	}
	return s, nil
}

func (s *server) start() {
	s.ctx, s.cancel = context.WithCancel(context.Background())
	go s.supervise()
}

func (s *server) stop() {
	s.cancel()
	<-s.done
}

func (s *server) ready() { s.readyOnce.Do(func() { close(s.firstReady) }) }

// supervise runs the server until the host closes, restarting it with
// backoff after each exit, and gives it up after Restart.Max crashes
// within Restart.Window.
func (s *server) supervise() {
	defer close(s.done)
	defer s.ready()
	defer s.log.Close()
	r := s.h.o.Restart
	for {
		// The files must still be the ones a person approved: changed,
		// the plugin is disabled until they approve them again.
		if d := s.rec.Digest; d != "" {
			if err := plugin.Verify(s.rec.Dir, d); err != nil {
				s.giveUp(err.Error())
				return
			}
		}
		if err := s.resolveImage(s.ctx); errors.Is(err, sandbox.ErrImageDigest) {
			// Another image under the approved name: never run it.
			s.giveUpErr(err)
			return
		}
		res, err := s.runOnce(s.ctx)
		if s.ctx.Err() != nil {
			return
		}
		if errors.Is(err, ErrNoSecrets) {
			// A credential the policy refused, or one that is missing,
			// is refused again at every restart: not a crash, and not
			// retried in this session.
			s.refuseCredentials(err)
			return
		}
		if s.park() {
			if s.ctx.Err() != nil {
				return
			}
			continue
		}
		now := time.Now()
		s.mu.Lock()
		s.lastErr = err
		s.restarts++
		s.crashes = append(s.crashes, now)
		for len(s.crashes) > 0 && now.Sub(s.crashes[0]) > r.Window {
			s.crashes = s.crashes[1:]
		}
		n, restarts := len(s.crashes), s.restarts
		s.mu.Unlock()
		ev := audit.PluginServer{Plugin: s.name, Event: "exit", Runtime: s.rtName, Restarts: restarts,
			ExitCode: res.ExitCode, Signal: res.Signal, Killed: string(res.Killed)}
		if err != nil {
			ev.Error = err.Error()
		}
		s.h.record(s.ctx, ev)
		s.h.o.Logger.Warn("plugin server exited", "plugin", s.name, "exit_code", res.ExitCode, "killed", res.Killed, "err", err, "crashes", n)
		s.setState(plugin.Failed, "its server exited ("+exitText(res, err)+"); restarting")
		if n >= r.Max {
			s.giveUp(fmt.Sprintf("its server exited %d times within %s (last: %s)", n, r.Window, exitText(res, err)))
			return
		}
		wait := r.Backoff << min(n-1, 20)
		if wait > r.MaxBackoff || wait <= 0 {
			wait = r.MaxBackoff
		}
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// yield asks the server's sandbox to give the change set up
// (sandbox.Spec.Yield): it ends now, or when the calls in flight have.
func (s *server) yield() {
	s.mu.Lock()
	s.yielding = true
	stop := s.stopRun
	if s.calls > 0 {
		stop = nil // endCall stops it
	}
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// beginCall counts a tool call in flight; a server stopped for the
// change set starts again.
func (s *server) beginCall() {
	s.mu.Lock()
	s.calls++
	if s.parked != nil {
		close(s.parked)
		s.parked = nil
	}
	s.mu.Unlock()
}

// endCall ends a call begun by beginCall; the last one in flight ends a
// run asked to yield.
func (s *server) endCall() {
	s.mu.Lock()
	s.calls--
	var stop context.CancelFunc
	if s.calls == 0 && s.yielding {
		stop = s.stopRun
	}
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// park, after a run that ended because it yielded the change set,
// records that and waits until a call wants the server again (true), or
// the host closes (false, as for any other end).
func (s *server) park() bool {
	s.mu.Lock()
	if !s.yielding {
		s.mu.Unlock()
		return false
	}
	s.yielding = false
	p := make(chan struct{})
	if s.calls > 0 {
		close(p) // a call waits for it already
	} else {
		s.parked = p
	}
	s.mu.Unlock()
	s.h.record(s.ctx, audit.PluginServer{Plugin: s.name, Event: "yield", Runtime: s.rtName})
	select {
	case <-p:
		return true
	case <-s.ctx.Done():
		return true
	}
}

// setState stores the plugin's state; a store that fails is logged (the
// server's supervision goes on).
func (s *server) setState(st plugin.State, reason string) {
	if err := s.h.o.Store.SetState(context.WithoutCancel(s.ctx), s.name, st, reason); err != nil {
		s.h.o.Logger.Error("plugin: storing its state", "plugin", s.name, "state", st, "err", err)
	}
}

// giveUp disables the plugin with reason (its crashes, its changed
// files), records it and makes every later call fail.
func (s *server) giveUp(reason string) { s.giveUpErr(errors.New(reason)) }

// giveUpErr is giveUp keeping why for callers to branch on
// (sandbox.ErrImageDigest).
func (s *server) giveUpErr(why error) {
	s.fail(why, why.Error(), plugin.Disabled, "disabled by the runtime: ", "failed", "plugin given up")
}

// refuseCredentials fails the plugin for this session because its
// credentials were not handed out (why names the credential and the rule
// or the missing secret): state failed with that reason, a plugin.server
// entry with event refused, every call failing with it. It is not
// disabled: the next session asks again, once the person has changed
// the policy or stored the secret.
func (s *server) refuseCredentials(why error) {
	reason := why.Error()
	if ce, ok := errors.AsType[*CredentialsError](why); ok {
		reason = ce.Err.Error()
	}
	s.fail(why, reason, plugin.Failed, "credentials refused: ", "refused", "plugin credentials refused")
}

// fail makes every later call fail with why, sets the plugin's state
// with reason, and records it (audit event, durable) and logs it.
func (s *server) fail(why error, reason string, state plugin.State, statePrefix, event, logMsg string) {
	s.mu.Lock()
	s.failed = fmt.Errorf("%w: %s: %w", ErrFailed, s.name, why)
	s.mu.Unlock()
	s.setState(state, statePrefix+reason)
	s.h.record(s.ctx, audit.PluginServer{Plugin: s.name, Event: event, Runtime: s.rtName, Error: reason})
	if err := s.h.o.Audit.Flush(context.WithoutCancel(s.ctx)); err != nil {
		s.h.o.Logger.Error("plugin: audit flush failed", "err", err)
	}
	s.h.o.Logger.Error(logMsg, "plugin", s.name, "reason", reason)
}

func exitText(res sandbox.Result, err error) string {
	switch {
	case err != nil:
		return err.Error()
	case res.Killed != "":
		return "killed at its " + string(res.Killed) + " limit"
	case res.Signal != 0:
		return fmt.Sprintf("signal %d", res.Signal)
	}
	return fmt.Sprintf("exit status %d", res.ExitCode)
}

// runOnce starts the server's process in its sandbox, connects to it,
// checks and registers its tools, and returns when the process has
// ended (or ctx ends), with its sandbox result, or the error that kept
// it from running or being spoken to.
func (s *server) runOnce(ctx context.Context) (sandbox.Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	s.stopRun = cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.stopRun = nil
		s.mu.Unlock()
	}()
	rt := s.runtime
	if s.rec.Manifest.Run.Image != "" {
		if s.image == nil {
			return sandbox.Result{}, s.imageErr
		}
		rt = s.image
	}
	spec, err := s.spec()
	if err != nil {
		return sandbox.Result{}, err
	}
	// The credentials first: a proxy credential's swap is handed out
	// with them, and the egress proxy started next takes it.
	sec, err := s.secrets(ctx, &spec)
	if err != nil {
		return sandbox.Result{}, err
	}
	if sec.Close != nil {
		defer func() {
			s.mu.Lock()
			s.redact = nil
			s.mu.Unlock()
			sec.Close()
		}()
	}
	eg, err := s.egress(ctx, &spec)
	if err != nil {
		return sandbox.Result{}, err
	}
	if eg != nil {
		// Deferred after the credentials' Close: the proxy ends (and
		// zeroes its copies) before the values are zeroed.
		defer eg.Close()
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	spec.Stdin, spec.Stdout, spec.Live = inR, outW, true
	if s.log != nil {
		spec.Stderr = s.log
		if sec.Redact != nil {
			spec.Stderr = redactWriter{w: s.log, redact: sec.Redact}
		}
	}
	var tr mcp.Transport = &mcp.IOTransport{Reader: outR, Writer: inW, MaxLineLength: int(4*s.output() + 1<<20)}
	httpT := s.rec.Manifest.Run.Transport == "http"
	if httpT {
		sd, err := newSocketDir(s.h.o.SocketRoot)
		if err != nil {
			return sandbox.Result{}, fmt.Errorf("plugin %s: %w", s.name, err)
		}
		defer sd.Close()
		sd.httpSpec(&spec)
		tr = sd.httpTransport(4*s.output() + 1<<20)
	}
	type ran struct {
		res sandbox.Result
		err error
	}
	exited := make(chan ran, 1)
	go func() {
		// A runtime's copy of the standard input ends only when its
		// reader does: closing it lets the run end once ctx is done.
		<-ctx.Done()
		_ = inR.Close()
	}()
	go func() {
		res, err := rt.Run(ctx, spec)
		// The process is gone: its streams end, and with them the
		// session.
		_ = outW.Close()
		_ = inR.Close()
		if httpT {
			// Nothing else ends a connect that waits for its socket.
			cancel()
		}
		exited <- ran{res, err}
	}()
	cs, err := s.connect(ctx, tr)
	if err != nil {
		cancel()
		r := <-exited
		if r.err != nil {
			err = r.err
		}
		return r.res, err
	}
	s.mu.Lock()
	s.cs = cs
	up := s.up
	s.mu.Unlock()
	close(up)
	sessErr := make(chan error, 1)
	go func() {
		// A session that ended serves no further call, even before the
		// process's exit is known.
		sessErr <- cs.Wait()
		s.down(cs)
	}()
	s.setState(plugin.Running, "its server runs for session "+s.h.o.Session)
	s.ready()
	var r ran
	select {
	case r = <-exited:
	case why := <-s.watch(ctx, cs):
		// Dead or hung: kill it, and stop feeding its standard input
		// (a runtime waits for that copy to end).
		cancel()
		_ = inR.Close()
		r = <-exited
		if r.res.Killed == "" {
			// Killed by us: the run's own error is the cancellation.
			r.err = why
		}
	}
	s.down(cs)
	_ = cs.Close()
	if r.err == nil && r.res.Killed == "" {
		// Its session ended first (a malformed or too long message):
		// that, not the exit it caused, is why.
		select {
		case err := <-sessErr:
			if err != nil {
				r.err = fmt.Errorf("its MCP session ended: %w", err)
			}
		default:
		}
	}
	return r.res, r.err
}

// down forgets cs as the server's session, once.
func (s *server) down(cs *mcp.ClientSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cs == cs {
		s.cs = nil
		s.up = make(chan struct{})
	}
}

// watch pings the server every Ping and sends why it is to be killed:
// its MCP session ended (a malformed or too long message), or three
// pings in a row failed. A ping is also how a server's exit is noticed:
// the runtime's copy of its standard input waits in a read of ours, and
// the ping's write makes it meet the closed pipe and end.
func (s *server) watch(ctx context.Context, cs *mcp.ClientSession) <-chan error {
	dead := make(chan error, 1)
	go func() {
		failed := 0
		tick := time.NewTicker(s.h.o.Ping)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			pctx, cancel := context.WithTimeout(ctx, 10*s.h.o.Ping)
			err := cs.Ping(pctx, nil)
			cancel()
			switch {
			case err == nil:
				failed = 0
				continue
			case errors.Is(err, mcp.ErrConnectionClosed):
				dead <- errors.New("its MCP session ended (a malformed or too long message, or its output closed) and it was killed")
				return
			}
			if failed++; failed >= 3 {
				dead <- errors.New("it stopped answering pings and was killed")
				return
			}
		}
	}()
	return dead
}

// connect speaks MCP over tr (the process's streams, or its socket):
// initialize, then the tools' list, checked against the pins and
// registered.
func (s *server) connect(ctx context.Context, tr mcp.Transport) (*mcp.ClientSession, error) {
	start, cancel := context.WithTimeout(ctx, s.h.o.StartTimeout)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "fluffy", Version: plugin.APIVersion}, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}})
	// A line (or an HTTP answer) longer than a result may be is refused:
	// a server flooding its output ends its session rather than fluffy's
	// memory.
	cs, err := client.Connect(start, tr, nil)
	if err != nil {
		return nil, fmt.Errorf("plugin %s: connect: %w", s.name, err)
	}
	var tools []*mcp.Tool
	for t, err := range cs.Tools(start, nil) {
		if err != nil {
			_ = cs.Close()
			return nil, fmt.Errorf("plugin %s: list tools: %w", s.name, err)
		}
		tools = append(tools, t)
		if len(tools) > maxTools {
			_ = cs.Close()
			return nil, fmt.Errorf("plugin %s: more than %d tools", s.name, maxTools)
		}
	}
	if err := s.admit(ctx, tools); err != nil {
		_ = cs.Close()
		return nil, err
	}
	s.mu.Lock()
	restarts := s.restarts
	names := make([]string, 0, len(s.registered))
	for k := range s.registered {
		names = append(names, k)
	}
	s.mu.Unlock()
	s.h.record(ctx, audit.PluginServer{Plugin: s.name, Event: "start", Runtime: s.rtName, Restarts: restarts, Tools: sortedCopy(names)})
	return cs, nil
}

// maxTools bounds the tools one server may offer.
const maxTools = 256

// output is the cap of one result.
func (s *server) output() int64 {
	if o := int64(s.rec.Manifest.Sandbox.Output); o > 0 {
		return o
	}
	return s.h.o.Output
}

// spec is the server's sandbox: its folder read-only, the workspace
// read-only with read-workspace, an overlay writing into the change set
// with write-changeset, never the tree itself, no network (egress adds
// its proxy), the manifest's limits.
func (s *server) spec() (sandbox.Spec, error) {
	m := s.rec.Manifest
	o := s.h.o
	argv := append([]string(nil), m.Run.Command...)
	spec := sandbox.Spec{
		Env:     sandbox.SetEnv(append([]string(nil), o.Env...), m.Run.Env...),
		Dir:     s.rec.Dir,
		Mounts:  []sandbox.Mount{{Source: s.rec.Dir}},
		TmpSize: 64 << 20,
		Network: sandbox.NetworkNone,
		Limits:  o.Limits,
	}
	if m.Run.Image != "" {
		// The image is the server: its own command unless the manifest
		// names one (a path inside the image); the folder holds only the
		// manifest and is not shown.
		if len(argv) == 0 {
			argv = append(argv, s.imageArgv...)
		}
		spec.Dir, spec.Mounts = "/", nil
	} else if strings.Contains(argv[0], "/") && !filepath.IsAbs(argv[0]) {
		argv[0] = filepath.Join(s.rec.Dir, argv[0])
	}
	if len(argv) == 0 {
		return spec, fmt.Errorf("plugin %s: its image has no command and its manifest names none", m.Name)
	}
	spec.Argv = argv
	spec.Limits.Wall, spec.Limits.Output = 0, 0
	if m.Sandbox.Memory > 0 {
		spec.Limits.Memory = int64(m.Sandbox.Memory)
	}
	if m.Sandbox.PIDs > 0 {
		spec.Limits.Pids = m.Sandbox.PIDs
	}
	switch {
	case o.Workspace != "" && o.ChangeSet != "" && hasCap(m, plugin.CapWriteChangeSet):
		// The overlay the sandboxed commands get: its writes land in the
		// change set, for review and apply.
		spec.Workspace, spec.ChangeSet = o.Workspace, o.ChangeSet
		// Its turn on the change set ends when a command needs it: one
		// overlay on a change set at a time (docs/sandbox.md).
		spec.Yield = s.yield
		spec.Mounts = append(spec.Mounts, o.Masks...)
		spec.Env = sandbox.SetEnv(spec.Env, "FLUFFY_WORKSPACE="+o.Workspace)
	case o.Workspace != "" && (hasCap(m, plugin.CapReadWorkspace) || hasCap(m, plugin.CapWriteChangeSet)):
		spec.Mounts = append(spec.Mounts, sandbox.Mount{Source: o.Workspace})
		spec.Mounts = append(spec.Mounts, o.Masks...)
		spec.Env = sandbox.SetEnv(spec.Env, "FLUFFY_WORKSPACE="+o.Workspace)
	}
	return spec, nil
}

// EgressMounts is an Egress that gives the sandbox files besides its
// socket (the bundle of certificates that trusts the proxy's own CA,
// when a proxy credential opted in to TLS).
type EgressMounts interface {
	Mounts() []sandbox.Mount
}

// egress starts the server's egress proxy when its manifest declares
// hosts (Options.Egress) and points spec at it; nil without.
func (s *server) egress(ctx context.Context, spec *sandbox.Spec) (Egress, error) {
	m := s.rec.Manifest
	if len(m.Network) == 0 || s.h.o.Egress == nil {
		return nil, nil
	}
	eg, err := s.h.o.Egress(ctx, m.Name, m.Network)
	if err != nil {
		return nil, fmt.Errorf("plugin %s: egress proxy: %w", m.Name, err)
	}
	if eg == nil {
		return nil, nil
	}
	spec.Network, spec.ProxySocket = sandbox.NetworkProxy, eg.Socket()
	spec.Env = sandbox.SetEnv(spec.Env, eg.Env()...)
	spec.Seccomp = "standard-net"
	if em, ok := eg.(EgressMounts); ok {
		spec.Mounts = append(spec.Mounts, em.Mounts()...)
	}
	return eg, nil
}

// secrets adds the manifest's credentials to spec (Options.Secrets):
// none without credentials; refused (the server does not start) without
// the secrets capability or a broker to hand them out.
func (s *server) secrets(ctx context.Context, spec *sandbox.Spec) (Secrets, error) {
	m := s.rec.Manifest
	if len(m.Credentials) == 0 {
		return Secrets{}, nil
	}
	if !hasCap(m, plugin.CapSecrets) {
		return Secrets{}, &CredentialsError{Plugin: s.name, Err: errors.New("credentials without the capability secrets")}
	}
	if s.h.o.Secrets == nil {
		return Secrets{}, &CredentialsError{Plugin: s.name, Err: errors.New("no secret broker here (docs/secrets.md)")}
	}
	sec, err := s.h.o.Secrets(ctx, s.name, m.Credentials)
	if err != nil {
		return Secrets{}, &CredentialsError{Plugin: s.name, Err: err}
	}
	spec.Env = sandbox.SetEnv(spec.Env, sec.Env...)
	spec.Mounts = append(spec.Mounts, sec.Mounts...)
	if sec.Scratch != nil {
		spec.Scratch = sec.Scratch
	}
	s.mu.Lock()
	s.redact = sec.Redact
	s.mu.Unlock()
	return sec, nil
}

// CredentialsError is a start refused because the plugin's credentials
// were not handed out (Err says which and why); it matches ErrNoSecrets.
type CredentialsError struct {
	Plugin string
	Err    error
}

func (e *CredentialsError) Error() string {
	return fmt.Sprintf("%v: plugin %s: %v", ErrNoSecrets, e.Plugin, e.Err)
}

// Is makes every CredentialsError match ErrNoSecrets.
func (e *CredentialsError) Is(target error) bool { return target == ErrNoSecrets }

func (e *CredentialsError) Unwrap() error { return e.Err }

// redactWriter writes w what redact leaves of each write (the server's
// stderr into its log). A value split across two writes is not caught:
// the log is the person's to read, never the model's.
type redactWriter struct {
	w      io.Writer
	redact func([]byte) []byte
}

func (r redactWriter) Write(p []byte) (int, error) {
	if _, err := r.w.Write(r.redact(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func hasCap(m plugin.Manifest, c plugin.Capability) bool {
	for _, x := range m.Capabilities {
		if x == c {
			return true
		}
	}
	return false
}

// session waits until the server is up and returns its MCP session, or
// why there is none.
func (s *server) session(ctx context.Context, registryName string) (*mcp.ClientSession, string, error) {
	for {
		s.mu.Lock()
		cs, up, failed := s.cs, s.up, s.failed
		mcpName, ok := s.registered[registryName]
		why, held := s.held[registryName]
		s.mu.Unlock()
		switch {
		case failed != nil:
			return nil, "", failed
		case held:
			return nil, "", fmt.Errorf("%w: %s: %s", ErrHeld, registryName, why)
		case !ok:
			return nil, "", fmt.Errorf("%w: %s is no longer offered by its server", ErrHeld, registryName)
		case cs != nil:
			return cs, mcpName, nil
		}
		select {
		case <-up:
		case <-s.done:
			return nil, "", fmt.Errorf("plugin %s: stopped", s.name)
		case <-ctx.Done():
			return nil, "", fmt.Errorf("plugin %s: its server is restarting: %w", s.name, ctx.Err())
		}
	}
}
