package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/llm/catalog"
	"github.com/fluffy-agent/fluffy/internal/netproxy"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// egress is a running egress proxy for one sandboxed command.
type egress struct {
	proxy  *netproxy.Proxy
	dir    string
	socket string
	env    []string
	served chan struct{}
	// serving says Serve was started (served closes when it returns).
	serving bool
	log     *os.File
}

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
// Records go to the audit log through auditRec when set, to logPath as JSON
// lines when given, and every refusal is reported on stderr.
func startEgress(a *App, auditRec *auditRecorder, c config.Net, template string, allowHosts []string, logPath string) (*egress, error) {
	rules := egressRules(c, template, allowHosts)
	if template == aiProviderTemplate {
		l, err := a.Config()
		if err != nil {
			return nil, err
		}
		rule, err := modelEndpointRule(l.Config.Model, l.Config.LLM.BaseURLs, a.Getenv)
		if err != nil {
			return nil, fmt.Errorf("%w: template %s: %w", errUsage, template, err)
		}
		if rule != "" {
			rules = append(rules, rule)
		}
	}
	al, err := netproxy.ParseAllowList(rules)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	var addrs []netip.Prefix
	for _, s := range c.AllowAddrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%w: net.allow_addrs: %w", errUsage, err)
		}
		addrs = append(addrs, p)
	}
	e := &egress{served: make(chan struct{})}
	rec := &cliRecorder{stderr: a.Stderr}
	if auditRec != nil {
		rec.next = auditRec
	}
	if logPath != "" {
		f, err := os.OpenFile(a.abs(logPath), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("%w: --egress-log: %w", errUsage, err)
		}
		e.log = f
		rec.json = netproxy.NewJSONRecorder(f)
	}
	e.proxy, err = netproxy.New(netproxy.Options{
		Sandbox:    "cli",
		Allow:      al,
		AllowAddrs: addrs,
		Recorder:   rec,
		Logger:     a.Logger().With("component", "netproxy"),
		Limits: netproxy.Limits{
			MaxUpload:             int64(c.MaxUpload),
			MaxDownload:           int64(c.MaxDownload),
			MaxDuration:           time.Duration(c.MaxDuration),
			IdleTimeout:           time.Duration(c.IdleTimeout),
			MaxConns:              c.MaxConns,
			HeaderTimeout:         time.Duration(c.HeaderTimeout),
			DialTimeout:           time.Duration(c.ConnectTimeout),
			ResponseHeaderTimeout: time.Duration(c.ResponseTimeout),
		},
	})
	if err != nil {
		e.close()
		return nil, err
	}
	// The sandbox's user (host nobody for root callers) must reach the
	// socket: the directory is traversable, not listable.
	e.dir, err = os.MkdirTemp(a.tempDir(), "fluffy-egress-")
	if err == nil {
		err = os.Chmod(e.dir, 0o711)
	}
	if err != nil {
		e.close()
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	e.socket = filepath.Join(e.dir, "egress.sock")
	ln, err := netproxy.ListenUnix(e.socket)
	if err != nil {
		e.close()
		return nil, err
	}
	e.serving = true
	go func() {
		defer close(e.served)
		_ = e.proxy.Serve(ln)
	}()
	e.env = netproxy.ClientEnv(sandbox.ProxyListen, sandbox.ProxySocketPath, al)
	return e, nil
}

func (e *egress) close() {
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
}

// cliRecorder reports refusals on the terminal and passes every record
// on to the JSON log and the app's recorder. It fails when either fails.
type cliRecorder struct {
	mu     sync.Mutex // guards stderr
	stderr io.Writer
	json   *netproxy.JSONRecorder
	next   netproxy.Recorder
}

func (r *cliRecorder) RecordEgress(ctx context.Context, rec netproxy.Record) error {
	if rec.Decision == netproxy.Denied {
		r.mu.Lock()
		fmt.Fprintln(r.stderr, "fluffy: egress:", rec.Summary())
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

var _ netproxy.Recorder = (*auditRecorder)(nil)

// RecordEgress writes one net.request entry.
func (r *auditRecorder) RecordEgress(ctx context.Context, rec netproxy.Record) error {
	log, err := r.get()
	if err != nil {
		return err
	}
	_, err = log.Append(ctx, audit.Entry{Session: rec.Session, Kind: audit.KindNetRequest, Actor: "sandbox", Payload: map[string]any{
		"sandbox": rec.Sandbox, "method": rec.Method, "host": rec.Host, "port": rec.Port, "addr": rec.Addr,
		"decision": string(rec.Decision), "rule": rec.Rule, "reason": rec.Reason, "status": rec.Status,
		"bytes_up": rec.BytesUp, "bytes_down": rec.BytesDown, "duration_ms": rec.Duration.Milliseconds(), "error": rec.Err,
	}})
	return err
}
