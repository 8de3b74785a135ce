package wiring

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/netproxy"
	"github.com/fluffy-agent/fluffy/internal/plugin"
	"github.com/fluffy-agent/fluffy/internal/plugin/host"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/uppers"
	"github.com/fluffy-agent/fluffy/internal/tool"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// sessionPlugins runs each session's plugins (internal/plugin/host):
// one host per session, started at the session's first run, its
// servers' tools added to the registry of every run, ended with the
// session (kernel.Revoker) or the kernel. A server serves one session
// only, so it never holds one session's workspace or arguments while
// serving another.
type sessionPlugins struct {
	u   *userenv.Env
	log *slog.Logger
	// store keeps the plugins; nil: sessions run without plugins.
	store plugin.Store
	// offer, optional, records tools a server offers that differ from
	// their pins, for a person's approval (the store's ToolOfferer).
	offer func(ctx context.Context, name string, tools []plugin.ToolPin) error
	// late, set when the kernel started without a secret broker, builds
	// one for plugins enabled since that declare credentials.
	late *lateSecrets

	// uppers, when set, is the registry of mounted change sets of the
	// sessions' runtimes, which the image plugins' containers join.
	uppers func() *uppers.Registry

	mu    sync.Mutex // guards the fields below
	hosts map[string]*host.Host
	// images are the sessions' engines for image plugins.
	images map[string]*pluginImages
	closed bool
}

var _ kernel.Revoker = (*sessionPlugins)(nil)

// kernelPlugins runs the plugins kept in fluffy.db (plugin.DB), offering
// held tools there for `fluffy plugin approve-tools`.
func kernelPlugins(u *userenv.Env, log *slog.Logger, db *sql.DB) *sessionPlugins {
	pdb := &plugin.DB{SQL: db}
	p := newSessionPlugins(u, log, pdb)
	p.offer = func(ctx context.Context, name string, tools []plugin.ToolPin) error {
		_, err := pdb.OfferTools(ctx, name, tools)
		return err
	}
	return p
}

func newSessionPlugins(u *userenv.Env, log *slog.Logger, store plugin.Store) *sessionPlugins {
	return &sessionPlugins{u: u, log: log.With("component", "plugins"), store: store, hosts: map[string]*host.Host{}, images: map[string]*pluginImages{}}
}

// register starts the session's plugins on its first run (on rt, the
// session's sandbox runtime, named rtName) and adds their tools to reg.
// A plugin that does not start is logged, and the session runs without
// it. sec, when set, hands out the plugins' credentials (none without).
func (p *sessionPlugins) register(ctx context.Context, env kernel.Env, reg *tool.Registry, rt sandbox.Runtime, rtName string, masks []sandbox.Mount, sec *sessionSecrets) error {
	if p == nil || p.store == nil || rt == nil || env.Narrowing != nil {
		// A sub-agent gets no tool outside the set it was given.
		return nil
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	h, started := p.hosts[env.Session]
	if !started {
		d, err := p.u.DataDir()
		if err != nil {
			p.mu.Unlock()
			return err
		}
		var upper string
		if env.ChangeSet != nil {
			upper = env.ChangeSet.UpperDir()
		}
		var secrets func(context.Context, string, []plugin.Credential) (host.Secrets, error)
		var swaps func(context.Context, string) ([]netproxy.Swap, error)
		if sec != nil {
			secrets, swaps = sec.plugin, sec.proxySwaps
		}
		images := newPluginImages(p.u, rtName, env.Session)
		if p.uppers != nil {
			images.uppers = p.uppers()
		}
		h, err = host.New(host.Options{
			Store: p.store, Runtimes: map[string]sandbox.Runtime{rtName: rt}, DefaultRuntime: rtName, Images: images,
			Audit: env.Audit, Session: env.Session, Workspace: env.Workspace, Masks: masks, ChangeSet: upper,
			LogDir: d.Path("plugins"), Env: p.u.SandboxEnv(), SocketRoot: secretsTmpfs(),
			Egress: pluginEgress(p.u, env.Session, env.Audit, p.log, swaps), Offer: p.offer, Secrets: secrets,
			Logger: p.log.With("session", env.Session),
		})
		if err != nil {
			p.mu.Unlock()
			return err
		}
		p.hosts[env.Session] = h
		p.images[env.Session] = images
	}
	p.mu.Unlock()
	if started {
		return h.Register(reg)
	}
	reps, err := h.Start(ctx, reg)
	if err != nil {
		return err
	}
	for _, r := range reps {
		if r.Err != nil {
			p.log.Warn("plugin not started", "session", env.Session, "plugin", r.Plugin, "err", r.Err)
		}
		for _, held := range r.Held {
			p.log.Warn("plugin tool held back until a person approves it", "session", env.Session, "plugin", r.Plugin, "tool", held.Tool, "reason", held.Reason)
		}
	}
	return nil
}

// EndSession stops the session's plugin servers; when no session runs
// plugins any more, a plugin left running is stopped.
func (p *sessionPlugins) EndSession(session string) {
	p.mu.Lock()
	h, img := p.hosts[session], p.images[session]
	delete(p.hosts, session)
	delete(p.images, session)
	last := h != nil && len(p.hosts) == 0
	p.mu.Unlock()
	if h != nil {
		h.Close()
	}
	if img != nil {
		img.Close()
	}
	if k := p.late.built(); k != nil {
		// The session's values are zeroed, as a broker built at the
		// start does as a revoker.
		k.EndSession(session)
	}
	if last {
		p.stopRunning("its sessions ended")
	}
}

// Close stops every session's plugin servers (the kernel's exit).
func (p *sessionPlugins) Close() {
	p.mu.Lock()
	p.closed = true
	hs, imgs := p.hosts, p.images
	p.hosts, p.images = map[string]*host.Host{}, map[string]*pluginImages{}
	p.mu.Unlock()
	for _, h := range hs {
		h.Close()
	}
	for _, img := range imgs {
		img.Close()
	}
	if k := p.late.built(); k != nil {
		// Every value zeroed, the backends locked.
		k.Close()
	}
	if len(hs) > 0 {
		p.stopRunning("the kernel stopped")
	}
}

// stopRunning records every plugin still running as stopped, for reason.
func (p *sessionPlugins) stopRunning(reason string) {
	if p.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	recs, err := p.store.List(ctx)
	if err != nil {
		p.log.Warn("plugins: their states after their servers' stop", "err", err)
		return
	}
	for _, r := range recs {
		if r.State != plugin.Running {
			continue
		}
		if err := p.store.SetState(ctx, r.Manifest.Name, plugin.Stopped, reason); err != nil {
			p.log.Warn("plugins: their states after their servers' stop", "plugin", r.Manifest.Name, "err", err)
		}
	}
}

// pluginEgress starts, for one plugin's server, an egress proxy that
// lets through only the hosts its manifest declares (net.allow_addrs
// still bounding the addresses they may resolve to), each request
// recorded in the session's audit log as the sandbox "plugin:NAME".
// swaps, when set, gives it the swaps of the plugin's proxy credentials,
// handed out just before under the call plugin:NAME (the session's
// proxySwaps, as for a command's proxy); with one that opted in to TLS
// the server trusts the proxy's CA.
func pluginEgress(u *userenv.Env, session string, rec kernel.AuditLog, log *slog.Logger, swaps func(context.Context, string) ([]netproxy.Swap, error)) func(context.Context, string, []string) (host.Egress, error) {
	return func(ctx context.Context, name string, hosts []string) (host.Egress, error) {
		l, err := u.Config()
		if err != nil {
			return nil, err
		}
		c := l.Config.Net
		al, err := netproxy.ParseAllowList(hosts)
		if err != nil {
			return nil, fmt.Errorf("plugin %s: network: %w", name, err)
		}
		addrs, err := allowAddrs(c)
		if err != nil {
			return nil, err
		}
		who := "plugin:" + name
		var sw []netproxy.Swap
		if swaps != nil {
			if sw, err = swaps(ctx, who); err != nil {
				return nil, err
			}
		}
		e := &egress{served: make(chan struct{})}
		e.proxy, err = netproxy.New(netproxy.Options{
			Sandbox: who, Session: session, Allow: al, AllowAddrs: addrs,
			Recorder: &sessionNetAudit{log: rec, session: session, call: who, open: map[string]uint64{}},
			Logger:   log.With("component", "netproxy", "plugin", name),
			Limits:   proxyLimits(c),
			Swaps:    sw,
		})
		if err != nil {
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
}
