// Package host runs plugins: each enabled plugin's MCP server as a
// long-lived process in its own L2 sandbox (read-only plugin folder,
// read-only workspace only with read-workspace, network only through an
// egress proxy for the manifest's hosts, the manifest's limits; with
// write-changeset the workspace is an overlay whose writes land in the
// session's change set), spoken
// to over its standard input and output, or streamable HTTP on a unix
// socket, with the official MCP Go SDK's client; an image plugin's
// server runs in a container of its pinned image. Its tools become mcp.<plugin>.<tool> in the session's
// tool.Registry, the same registry the built-in tools are in, so every
// call takes the router's full road; a tool whose description, schema or
// annotations differ from its pin is held back; a server that exits is
// restarted with backoff and given up (state failed) after too many
// crashes. docs/plugins.md describes the runtime.
//
// A Host serves one session: one server per plugin per session, so that
// a server never holds one session's data (its workspace, its calls'
// arguments) while serving another, and ends with the session.
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/plugin"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// Recorder is the audit log (*audit.Log implements it).
type Recorder interface {
	Append(ctx context.Context, e audit.Entry) (uint64, error)
	Flush(ctx context.Context) error
}

// Egress is a plugin server's way out: an egress proxy on a unix socket
// mounted into its sandbox, the variables that point the server at it,
// and Close, called once the server has ended.
type Egress interface {
	Socket() string
	Env() []string
	Close()
}

// Restart bounds the restarts of a server that exits.
type Restart struct {
	// Max crashes within Window give the plugin up (state failed);
	// default 5.
	Max int
	// Window is how far back crashes count; default 10 minutes.
	Window time.Duration
	// Backoff is the wait before the first restart, doubled for each
	// crash in the window up to MaxBackoff; defaults 500ms and 30s.
	Backoff, MaxBackoff time.Duration
}

// Options configure a Host. Store, Runtimes and Audit are required.
type Options struct {
	Store plugin.Store
	// Runtimes run the servers, by manifest sandbox.runtime
	// (DefaultRuntime when the manifest names none, "native" when that
	// is empty): a plugin whose runtime is missing does not start.
	Runtimes       map[string]sandbox.Runtime
	DefaultRuntime string
	// Images, when set, runs the plugins whose manifest names an image
	// (run.image) on a container engine, whatever the session's runtime;
	// nil: such a plugin runs only where its runtime in Runtimes is a
	// container one (a sandbox.ImageRuntime).
	Images sandbox.ImageRuntime
	Audit  Recorder
	// Session is the session the servers serve (audit entries carry it).
	Session string
	// Workspace is the session's workspace, mounted read-only for a
	// plugin that asks for read-workspace; Masks hide fluffy's own files
	// inside it.
	Workspace string
	Masks     []sandbox.Mount
	// ChangeSet is the session's change set's upper directory: a plugin
	// with write-changeset sees the workspace as an overlay whose writes
	// land there (reviewed and applied like any other), never in the
	// tree. Empty: such a plugin gets the workspace read-only.
	ChangeSet string
	// LogDir holds each plugin's log, <LogDir>/<name>/log (the server's
	// standard error, at most LogSize bytes plus one older generation);
	// empty: stderr is dropped.
	LogDir  string
	LogSize int64
	// Env is the servers' base environment; nil: sandbox.BaseEnv("").
	Env []string
	// Egress, when set, is asked for the proxy of a plugin that declares
	// hosts (manifest network); nil, or a nil Egress: no network.
	Egress func(ctx context.Context, plugin string, hosts []string) (Egress, error)
	// Secrets, when set, hands a plugin with the secrets capability its
	// manifest's credentials for one start of its server (the broker's
	// declared-use path: decided, recorded); nil, or an error: a plugin
	// that declares credentials does not start.
	Secrets func(ctx context.Context, plugin string, creds []plugin.Credential) (Secrets, error)
	// SocketRoot is the tmpfs the socket directory of a server with
	// run.transport http is made on (DefaultSocketRoot when empty): its
	// writes there are charged to its memory limit, never a disk. A root
	// that is not a tmpfs fails the start (ErrNoTmpfs).
	SocketRoot string
	// Limits are the defaults of what a manifest does not set: memory
	// 512 MiB, 64 pids.
	Limits sandbox.Limits
	// Output caps a result when the manifest's sandbox.output is unset;
	// default 256 KiB.
	Output int64
	// StartTimeout bounds a server's start up to its tools' list;
	// default 30s.
	StartTimeout time.Duration
	// CallTimeout bounds one tool call; default 2 minutes.
	CallTimeout time.Duration
	// Ping is how often a running server is pinged; default 2s. Three
	// failed pings in a row count as a crash.
	Ping    time.Duration
	Restart Restart
	// Offer, optional, is told a plugin's tools as its server offers
	// them whenever one is held back, so that a person can review and
	// approve the change (the store's ToolOfferer); an error is logged.
	Offer  func(ctx context.Context, plugin string, tools []plugin.ToolPin) error
	Logger *slog.Logger
}

// Secrets are a server's credentials for one start.
type Secrets struct {
	// Env are NAME=value entries; Mounts the secret files' folder.
	Env    []string
	Mounts []sandbox.Mount
	// Scratch, when set, is the memory outside the heap Env lives in
	// (sandbox.Spec.Scratch).
	Scratch sandbox.Scratch
	// Redact returns its argument without the values: the server's
	// results and its log never hold one.
	Redact func([]byte) []byte
	// Close zeroes the values, once the server has ended.
	Close func()
}

// ErrNoSecrets: a plugin declares credentials this host cannot hand out
// (no broker, or no secrets capability).
var ErrNoSecrets = errors.New("plugin credentials not handed out")

// Host runs the plugins of one session. Safe for concurrent use.
type Host struct {
	o Options

	mu      sync.Mutex // guards the fields below
	servers map[string]*server
	closed  bool
}

// ErrClosed: the host was closed.
var ErrClosed = errors.New("plugin host: closed")

// New checks o and returns a Host; it starts nothing.
func New(o Options) (*Host, error) {
	if o.Store == nil || len(o.Runtimes) == 0 || o.Audit == nil {
		return nil, errors.New("plugin host: Store, Runtimes and Audit are required")
	}
	if o.DefaultRuntime == "" {
		o.DefaultRuntime = "native"
	}
	if o.Env == nil {
		o.Env = sandbox.BaseEnv("")
	}
	if o.Limits.Memory <= 0 {
		o.Limits.Memory = 512 << 20
	}
	if o.Limits.Pids <= 0 {
		o.Limits.Pids = 64
	}
	if o.Output <= 0 {
		o.Output = 256 << 10
	}
	if o.LogSize <= 0 {
		o.LogSize = 1 << 20
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 30 * time.Second
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 2 * time.Minute
	}
	if o.Ping <= 0 {
		o.Ping = 2 * time.Second
	}
	if o.Restart.Max <= 0 {
		o.Restart.Max = 5
	}
	if o.Restart.Window <= 0 {
		o.Restart.Window = 10 * time.Minute
	}
	if o.Restart.Backoff <= 0 {
		o.Restart.Backoff = 500 * time.Millisecond
	}
	if o.Restart.MaxBackoff <= 0 {
		o.Restart.MaxBackoff = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Host{o: o, servers: map[string]*server{}}, nil
}

// Report says what Start did for one plugin.
type Report struct {
	Plugin string
	// Tools are the registry names registered (mcp.<plugin>.<tool>).
	Tools []string
	// Held are the tools not registered, each with why (new since the
	// pin, changed since the pin, a name or schema fluffy cannot take).
	Held []Held
	// Err is why the plugin did not start (its runtime is missing, its
	// server did not answer); the plugin keeps being restarted unless it
	// failed.
	Err error
}

// Held is a tool held back from the registry.
type Held struct {
	Tool   string
	Reason string
}

// Start starts the server of every Startable plugin in the store and registers its tools in reg once it answered, waiting up to
// StartTimeout for each. A plugin that does not start is reported, never
// an error of Start: the session runs without it. The error is for the
// store failing.
func (h *Host) Start(ctx context.Context, reg *tool.Registry) ([]Report, error) {
	recs, err := h.o.Store.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("plugin host: list plugins: %w", err)
	}
	var out []Report
	for _, rec := range recs {
		if !Startable(rec.State) {
			continue
		}
		out = append(out, h.StartOne(ctx, rec, reg))
	}
	return out, nil
}

// Startable reports whether a plugin in state st is started for a
// session: enabled, or running, stopped or failed (restarting) for
// another; never installed or disabled.
func Startable(st plugin.State) bool {
	switch st {
	case plugin.Enabled, plugin.Running, plugin.Stopped, plugin.Failed:
		return true
	}
	return false
}

// StartOne starts rec's server and registers its tools in reg (Start
// for one plugin).
func (h *Host) StartOne(ctx context.Context, rec plugin.Record, reg *tool.Registry) Report {
	rep := Report{Plugin: rec.Manifest.Name}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		rep.Err = ErrClosed
		return rep
	}
	if _, ok := h.servers[rec.Manifest.Name]; ok {
		h.mu.Unlock()
		rep.Err = fmt.Errorf("plugin %s: already started", rec.Manifest.Name)
		return rep
	}
	s, err := newServer(h, rec, reg)
	if err != nil {
		h.mu.Unlock()
		rep.Err = err
		return rep
	}
	h.servers[rec.Manifest.Name] = s
	h.mu.Unlock()
	s.start()
	wait, cancel := context.WithTimeout(ctx, h.o.StartTimeout)
	defer cancel()
	select {
	case <-s.firstReady:
	case <-wait.Done():
		rep.Err = fmt.Errorf("plugin %s: no answer within %s", rec.Manifest.Name, h.o.StartTimeout)
	}
	s.mu.Lock()
	rep.Tools = slices.Sorted(maps.Keys(s.registered))
	for _, k := range slices.Sorted(maps.Keys(s.held)) {
		rep.Held = append(rep.Held, Held{Tool: k, Reason: s.held[k]})
	}
	if rep.Err == nil && s.lastErr != nil && len(s.registered) == 0 {
		rep.Err = s.lastErr
	}
	if rep.Err == nil && s.failed != nil && len(s.registered) == 0 {
		// Given up before its first start (its files or its image are
		// not the ones approved).
		rep.Err = s.failed
	}
	s.mu.Unlock()
	return rep
}

// Register adds the tools of every plugin started to reg, and those
// admitted later (a restart's) too: for a session whose router, and
// registry, are built anew for a later run.
func (h *Host) Register(reg *tool.Registry) error {
	h.mu.Lock()
	ss := make([]*server, 0, len(h.servers))
	for _, s := range h.servers {
		ss = append(ss, s)
	}
	h.mu.Unlock()
	for _, s := range ss {
		if err := s.addRegistry(reg); err != nil {
			return err
		}
	}
	return nil
}

// Close stops every server and waits for them to end.
func (h *Host) Close() error {
	h.mu.Lock()
	h.closed = true
	ss := make([]*server, 0, len(h.servers))
	for _, s := range h.servers {
		ss = append(ss, s)
	}
	h.mu.Unlock()
	for _, s := range ss {
		s.stop()
	}
	return nil
}

// record appends payload to the audit log as the kernel.
func (h *Host) record(ctx context.Context, p audit.Payload) {
	if _, err := h.o.Audit.Append(context.WithoutCancel(ctx), audit.Entry{Session: h.o.Session, Kind: p.Kind(), Actor: "kernel", Payload: p}); err != nil {
		h.o.Logger.Error("plugin: audit append failed", "kind", p.Kind(), "err", err)
	}
}
