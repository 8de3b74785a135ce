package wiring

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/llm/catalog"
	"github.com/fluffy-agent/fluffy/internal/netproxy"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native"
	"github.com/fluffy-agent/fluffy/internal/sandboxrun"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// egress is a running egress proxy for one sandboxed command
// (sandboxrun.Egress).
type egress struct {
	proxy  *netproxy.Proxy
	dir    string
	socket string
	env    []string
	served chan struct{}
	// serving says Serve was started (served closes when it returns).
	serving bool
	log     *os.File
	mounts  []sandbox.Mount
	// caDir holds the bundle of trusted certificates, when there is one.
	caDir string
}

// listen serves e.proxy on a socket in a directory of its own that the
// sandbox binds, and sets the variables that point a sandbox's clients
// at it (al decides whether loopback goes through it: netproxy.ClientEnv).
func (e *egress) listen(u *userenv.Env, al netproxy.AllowList) error {
	var err error
	if e.dir, err = egressDir(u); err != nil {
		return err
	}
	e.socket = filepath.Join(e.dir, "egress.sock")
	ln, err := netproxy.ListenUnix(e.socket, sandboxHostUID())
	if err != nil {
		return err
	}
	e.serving = true
	go func() {
		defer close(e.served)
		_ = e.proxy.Serve(ln)
	}()
	e.env = netproxy.ClientEnv(sandbox.ProxyListen, sandbox.ProxySocketPath, al)
	return nil
}

// trustProxyCA gives the sandbox the proxy's certificate authority when
// the proxy has one (a swap opted in to TLS): the system's roots and the
// CA in one file, mounted read-only at sandbox.CABundlePath and named by
// the variables TLS clients read. The file holds certificates only; the
// CA's key stays in the proxy. It lies in a fresh directory under tmp
// that everyone may enter, unlike the socket's: root's sandboxes run as
// another uid, which binds the file by its path.
func (e *egress) trustProxyCA(tmp string) error {
	ca := e.proxy.CACert()
	if ca == nil {
		return nil
	}
	bundle, err := netproxy.TrustBundle(ca)
	if err != nil {
		return fmt.Errorf("egress proxy: the sandbox's trust in its CA: %w", err)
	}
	if e.caDir, err = os.MkdirTemp(tmp, "fluffy-ca-"); err != nil {
		return fmt.Errorf("egress proxy: %w", err)
	}
	path := filepath.Join(e.caDir, "ca-bundle.pem")
	err = os.Chmod(e.caDir, 0o755)
	if err == nil {
		err = os.WriteFile(path, bundle, 0o644)
	}
	if err == nil {
		err = os.Chmod(path, 0o644) // whatever the umask
	}
	if err != nil {
		return fmt.Errorf("egress proxy: %w", err)
	}
	e.mounts = append(e.mounts, sandbox.Mount{Source: path, Target: sandbox.CABundlePath})
	e.env = append(e.env, netproxy.CAEnv(sandbox.CABundlePath)...)
	return nil
}

// Mounts are the files the sandbox gets besides the socket.
func (e *egress) Mounts() []sandbox.Mount { return e.mounts }

// egressRules gathers a sandbox's allow-list: the user's net.allow, the
// template's net.templates entry, then the command line's --allow-host.
func egressRules(c config.Net, template string, flags []string) []string {
	var rules []string
	rules = append(rules, c.Allow...)
	rules = append(rules, c.Templates[template]...)
	return append(rules, flags...)
}

// aiProviderTemplate is the template for model-provider clients: its
// network reaches the configured model's endpoint and nothing else.
const aiProviderTemplate = "ai-provider"

// modelEndpointRule returns the allow-list rule (host:port) for the
// endpoint of model ("provider/name"), as the provider would be reached:
// configured base URL, then the provider's environment variable, then its
// default. Providers with no network address (replay) give "".
func modelEndpointRule(model string, baseURLs map[string]string, env func(string) (string, bool)) (string, error) {
	provider, _, err := catalog.Split(model)
	if err != nil {
		return "", err
	}
	info, ok := catalog.Lookup(provider)
	if !ok {
		return "", nil
	}
	addr := info.Address(catalog.Options{Env: env, BaseURLs: baseURLs})
	if addr == "" {
		return "", nil
	}
	u, err := url.Parse(addr)
	if err != nil || u.Hostname() == "" {
		return "", fmt.Errorf("model %s: base URL %q is not a URL with a host", model, addr)
	}
	port := u.Port()
	if port == "" {
		switch u.Scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		default:
			return "", fmt.Errorf("model %s: base URL %q: scheme must be http or https", model, addr)
		}
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

// startEgress starts a proxy on a fresh unix socket for one sandbox.
// Records go to the audit log through r.Audit when set, to r.Log as JSON
// lines when given, and every refusal is reported on r.Stderr.
func startEgress(_ context.Context, r sandboxrun.EgressRequest) (sandboxrun.Egress, error) {
	u, c, template := r.User, r.Net, r.Template
	rules := egressRules(c, template, r.AllowHosts)
	if template == aiProviderTemplate {
		l, err := u.Config()
		if err != nil {
			return nil, err
		}
		rule, err := modelEndpointRule(l.Config.Model, l.Config.LLM.BaseURLs, u.Getenv)
		if err != nil {
			return nil, fmt.Errorf("%w: template %s: %w", userenv.ErrUsage, template, err)
		}
		if rule != "" {
			rules = append(rules, rule)
		}
	}
	al, err := netproxy.ParseAllowList(rules)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", userenv.ErrUsage, err)
	}
	if r.Audit != nil {
		// exec.start names what the run may reach.
		r.Audit.SetEgress(egressAudit(al, c.AllowAddrs))
	}
	addrs, err := allowAddrs(c)
	if err != nil {
		return nil, err
	}
	e := &egress{served: make(chan struct{})}
	rec := &cliRecorder{stderr: r.Stderr}
	if r.Audit != nil {
		rec.next = auditEgress{r.Audit}
	}
	if r.Log != "" {
		f, err := os.OpenFile(u.Abs(r.Log), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("%w: --egress-log: %w", userenv.ErrUsage, err)
		}
		e.log = f
		rec.json = netproxy.NewJSONRecorder(f)
	}
	e.proxy, err = netproxy.New(netproxy.Options{
		Sandbox:    "cli",
		Allow:      al,
		AllowAddrs: addrs,
		Recorder:   rec,
		Logger:     u.Logger().With("component", "netproxy"),
		Limits:     proxyLimits(c),
	})
	if err != nil {
		e.Close()
		return nil, err
	}
	if err := e.listen(u, al); err != nil {
		e.Close()
		return nil, err
	}
	if err := e.trustProxyCA(u.TempDir()); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// egressAudit is the allow-list as exec.start records it.
func egressAudit(al netproxy.AllowList, addrs []string) map[string]any {
	allow := []string{}
	for _, r := range al.Rules() {
		allow = append(allow, r.String())
	}
	return map[string]any{"mode": "proxy", "allow": allow, "allow_addrs": append([]string{}, addrs...)}
}

// egressDir makes the private directory of one run's proxy socket: a
// fresh directory (random name, created exclusively, mode 0700) under
// $XDG_RUNTIME_DIR when that is an absolute directory of this user's with
// mode 0700 (per-user, often a tmpfs, cleaned at logout), else under the
// temporary directory, where its mode keeps every other user out of it
// and the sticky bit keeps them from renaming it. Creating it fresh for
// each run (rather than one shared directory) leaves nothing to reuse or
// race on. It is checked after creation to be a directory of ours that
// no one else can enter.
func egressDir(u *userenv.Env) (string, error) {
	parent := u.TempDir()
	if d, ok := u.Getenv("XDG_RUNTIME_DIR"); ok && filepath.IsAbs(d) && len(d)+len("/fluffy-egress-0123456789/egress.sock") < maxSocketPath {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() && fi.Mode().Perm() == 0o700 && ownedByMe(fi) {
			parent = d
		}
	}
	dir, err := os.MkdirTemp(parent, "fluffy-egress-")
	if err != nil {
		return "", fmt.Errorf("egress proxy: socket directory: %w (set XDG_RUNTIME_DIR or TMPDIR to a directory of yours)", err)
	}
	fi, err := os.Lstat(dir)
	if err == nil && (!fi.IsDir() || fi.Mode().Perm() != 0o700 || !ownedByMe(fi)) {
		err = fmt.Errorf("is not a private directory of this user's (mode %v)", fi.Mode())
	}
	if err == nil && len(filepath.Join(dir, "egress.sock")) >= maxSocketPath {
		err = fmt.Errorf("is too long a path for a socket (%d bytes at most): set TMPDIR to a shorter directory", maxSocketPath)
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("egress proxy: socket directory %s: %w", dir, err)
	}
	return dir, nil
}

// maxSocketPath is the longest path a unix socket address holds (its
// 108 bytes less the terminating NUL).
const maxSocketPath = 107

func ownedByMe(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

// sandboxHostUID is the host uid a native sandbox's processes run as,
// which must be able to connect to the proxy's socket (it reaches the
// socket through a mount, not the path): the caller's own, or
// native.SandboxUID for root. -1 keeps the socket's owner.
func sandboxHostUID() int {
	if os.Geteuid() == 0 {
		return native.SandboxUID
	}
	return -1
}

// Socket is the proxy's unix socket.
func (e *egress) Socket() string { return e.socket }

// Env is the proxy's variables for the command.
func (e *egress) Env() []string { return e.env }

// Close stops the proxy, waits for it, and removes its socket.
func (e *egress) Close() {
	if e.proxy != nil {
		e.proxy.Close()
		if e.serving {
			<-e.served
		}
	}
	if e.log != nil {
		e.log.Close()
	}
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
	if e.caDir != "" {
		os.RemoveAll(e.caDir)
	}
}

// cliRecorder reports refusals on the terminal and passes every record
// on to the JSON log and the app's recorder. It fails when either fails.
type cliRecorder struct {
	mu     sync.Mutex // guards stderr
	stderr io.Writer
	json   *netproxy.JSONRecorder
	next   netproxy.Recorder
}

var _ netproxy.PeerRecorder = (*cliRecorder)(nil)

// RecordPeerRefused reports on the terminal a connection to the proxy
// from a process that may not use it, and passes it on.
func (r *cliRecorder) RecordPeerRefused(ctx context.Context, pr netproxy.PeerRefusal) error {
	r.mu.Lock()
	fmt.Fprintf(r.stderr, "fluffy: egress: refused a connection to this run's proxy from another process: %s\n", termsafe.Line(pr.Reason))
	r.mu.Unlock()
	if n, ok := r.next.(netproxy.PeerRecorder); ok {
		return n.RecordPeerRefused(ctx, pr)
	}
	return nil
}

func (r *cliRecorder) RecordEgress(ctx context.Context, rec netproxy.Record) error {
	if rec.Decision == netproxy.Denied {
		r.mu.Lock()
		fmt.Fprintln(r.stderr, "fluffy: egress:", termsafe.Line(rec.Summary()))
		r.mu.Unlock()
	}
	var errs []error
	if r.json != nil {
		errs = append(errs, r.json.RecordEgress(ctx, rec))
	}
	if r.next != nil {
		errs = append(errs, r.next.RecordEgress(ctx, rec))
	}
	return errors.Join(errs...)
}

// auditEgress records the proxy's requests in the run's audit log.
type auditEgress struct{ r *sandboxrun.Recorder }

var (
	_ netproxy.Recorder     = auditEgress{}
	_ netproxy.PeerRecorder = auditEgress{}
)

// RecordEgress writes a request's decision as a net.request entry, durable
// before it returns (the proxy relays nothing before), and an allowed
// request's outcome as a net.end entry that names the net.request by its
// sequence number and both by the request's id.
func (a auditEgress) RecordEgress(ctx context.Context, rec netproxy.Record) error {
	if rec.Phase == netproxy.PhaseEnd {
		return a.r.NetEnd(ctx, rec.Session, audit.NetEnd{
			ID: rec.ID, Sandbox: rec.Sandbox, Method: rec.Method, Host: rec.Host, Port: rec.Port, Addr: rec.Addr,
			Decision: string(rec.Decision), Rule: rec.Rule, Reason: rec.Reason, Status: rec.Status,
			BytesUp: rec.BytesUp, BytesDown: rec.BytesDown, DurationUS: rec.Duration.Microseconds(), Error: rec.Err,
		})
	}
	p := audit.NetRequest{
		ID: rec.ID, Sandbox: rec.Sandbox, Method: rec.Method, Host: rec.Host, Port: rec.Port,
		Decision: string(rec.Decision), Rule: rec.Rule, Secrets: rec.Secrets, TLS: rec.TLS,
	}
	if rec.Decision == netproxy.Denied {
		// A refusal is the request's only entry: its answer too.
		p.Reason, p.Status = rec.Reason, rec.Status
	}
	return a.r.NetRequest(ctx, rec.Session, rec.Decision == netproxy.Allowed, p)
}

// RecordPeerRefused writes a net.refused entry: who tried to use this
// run's proxy.
func (a auditEgress) RecordPeerRefused(ctx context.Context, pr netproxy.PeerRefusal) error {
	return a.r.NetRefused(ctx, pr.Session, audit.NetRefused{
		Sandbox: pr.Sandbox, PeerUID: pr.Peer.UID, PeerGID: pr.Peer.GID, PeerPID: pr.Peer.PID, Reason: pr.Reason,
	})
}
