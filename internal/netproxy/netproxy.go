// Package netproxy owns sandbox egress: an HTTP proxy (absolute-form
// requests, and CONNECT tunnels for HTTPS) that lets one sandbox reach
// exactly the hosts on its allow-list, and audits every request.
//
// A Proxy serves one sandbox. It reads each request itself, matches the
// destination against the AllowList (exact names, *.domain wildcards, IP
// literals, ports), resolves names with its own Resolver, and refuses
// loopback, private, link-local (cloud metadata), and other non-public
// addresses unless an IP-literal rule names that exact address. The check
// is made again in the dialer's Control hook on the address actually being
// connected, so neither DNS rebinding nor a redirect inside the proxy can
// reach an address the check did not see. Byte and time limits bound every
// request and tunnel; a denied request gets a 403 whose body names the rule.
//
// Every request is audited ahead: its decision (allowed or refused, host,
// port, method, rule) is a Record in PhaseOpen that the Recorder makes
// durable before the proxy connects upstream or answers a refusal; an
// allowed request adds a PhaseEnd record with its totals (status, bytes
// each way, duration), linked by the same ID. A proxy killed mid-request
// leaves the decision on disk. Auditing fails closed: once the Recorder
// returns an error the proxy refuses every later request (503) until it
// is rebuilt.
//
// Only processes of the proxy's owner and processes descending from the
// proxy's own (the sandboxes it serves) may use it: every connection on a
// unix socket is checked against its peer's credentials (SO_PEERCRED, see
// OwnerOrDescendant) before a byte is read. A refused peer is logged and
// reported to a PeerRecorder, never recorded as a request.
//
// Secrets can be swapped in on the way out (Options.Swaps): the sandbox
// holds a placeholder, and the proxy replaces it with the value only in
// requests to the hosts the secret is bound to, refusing any other
// request that carries it. For a secret that opts in, the proxy also
// terminates HTTPS to its hosts with a certificate authority of its own
// (in memory, name-constrained to those hosts) to swap inside; every
// other CONNECT stays an opaque tunnel.
//
// Forward (the sandbox side) accepts TCP connections on loopback inside the
// sandbox's network namespace and splices each to the proxy's unix socket;
// the fluffy binary runs it under the hidden ForwardCommand.
package netproxy

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fluffy-agent/fluffy/internal/telemetry"
)

// Resolver looks host names up. *net.Resolver satisfies it. It must
// return every address it knows of (the proxy checks each one) and an
// error when there is none.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Recorder receives a request's records: its decision (PhaseOpen) before
// anything is relayed, and for an allowed request its totals (PhaseEnd)
// when it ends. A PhaseOpen record must be durable when RecordEgress
// returns nil: the proxy connects upstream only afterwards. PhaseEnd
// records may be buffered. An error means the record was not stored: the
// request is refused (when it has not started) and so is every later
// one, since egress it cannot audit is egress it must not allow.
// RecordEgress must be safe for concurrent use.
type Recorder interface {
	RecordEgress(ctx context.Context, r Record) error
}

// Decision is the proxy's verdict on one request.
type Decision string

// Decisions.
const (
	Allowed Decision = "allow"
	Denied  Decision = "deny"
)

// Phase says which of a request's records a Record is.
type Phase string

// Phases.
const (
	// PhaseOpen is the decision, recorded (durably) before the proxy
	// connects upstream or sends a refusal. A request refused before
	// anything was relayed has this record only.
	PhaseOpen Phase = "open"
	// PhaseEnd is an allowed request's outcome and totals, recorded when
	// it ends; its ID is its PhaseOpen record's.
	PhaseEnd Phase = "end"
)

// Record is the audit view of one request or tunnel.
type Record struct {
	// ID links a request's records (random, unique per request).
	ID      string
	Phase   Phase
	Time    time.Time // when the request arrived
	Sandbox string
	Session string
	// Method is the HTTP method, or "CONNECT" for a tunnel.
	Method string
	Host   string // as requested (canonical name or IP literal)
	Port   int
	// Addr is the address actually connected to, "" when none was.
	Addr     string
	Decision Decision
	// Rule is the allow-list rule that let the request through, or for a
	// denial the name of the check that refused it (see DeniedError).
	Rule string
	// Reason explains a denial in words; empty when allowed.
	Reason string
	// Status is the HTTP status sent to the client (200 for an
	// established tunnel).
	Status int
	// BytesUp and BytesDown count body (or tunnel) bytes from the sandbox
	// to the upstream and back.
	BytesUp, BytesDown int64
	Duration           time.Duration
	// Err describes how an allowed request failed or was cut short (a
	// limit, a timeout, an upstream error); empty when it completed.
	Err string
	// Secrets names the secrets swapped into the request (Swap.Name).
	Secrets []string
	// TLS says the proxy terminated the request's TLS: a CONNECT it
	// opened rather than tunnelled, or a request read inside one.
	TLS bool
}

// DeniedError is a refusal by a proxy check. Rule names the check:
// "not-allowed" (no allow-list rule matches), "address:<class>" (the
// destination resolves only to refused addresses), "bad-request",
// "origin-form", "host-mismatch", "scheme", "limit:upload",
// "limit:download", "audit".
type DeniedError struct {
	Rule   string
	Reason string
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("netproxy: refused by %s: %s", e.Rule, e.Reason)
}

// Verdict is Options.Decide's answer about one destination.
type Verdict struct {
	Allow bool
	// Rule names what decided (a policy rule's id); it is the request's
	// Record.Rule, and a refusal's 403 names it.
	Rule string
	// Reason explains a refusal to the client (how to ask for the host,
	// say); empty when allowed.
	Reason string
}

// Limits bound what one sandbox can do through the proxy. Zero fields take
// the DefaultLimits value.
type Limits struct {
	// MaxUpload caps the bytes sent upstream per request or tunnel.
	MaxUpload int64
	// MaxDownload caps the bytes received per request or tunnel.
	MaxDownload int64
	// MaxHeaderBytes caps a request's line and headers.
	MaxHeaderBytes int
	// HeaderTimeout is how long a client has to send a request's headers
	// (slow clients are cut off).
	HeaderTimeout time.Duration
	// DialTimeout bounds connecting upstream.
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds waiting for an upstream's response
	// headers (slow upstreams are cut off with 504).
	ResponseHeaderTimeout time.Duration
	// IdleTimeout ends a tunnel or a kept-alive client connection that
	// moved no bytes for this long.
	IdleTimeout time.Duration
	// MaxDuration bounds one request or tunnel from start to end.
	MaxDuration time.Duration
	// MaxConns bounds concurrent client connections; more wait in the
	// listener's backlog.
	MaxConns int
	// SwapBody caps the request body the proxy reads into memory to swap
	// secrets in (see Options.Swaps); a longer body goes upstream as the
	// sandbox sent it.
	SwapBody int64
}

// DefaultLimits are the limits used for zero Limits fields.
var DefaultLimits = Limits{
	MaxUpload:             64 << 20,
	MaxDownload:           1 << 30,
	MaxHeaderBytes:        32 << 10,
	HeaderTimeout:         10 * time.Second,
	DialTimeout:           10 * time.Second,
	ResponseHeaderTimeout: 60 * time.Second,
	IdleTimeout:           60 * time.Second,
	MaxDuration:           10 * time.Minute,
	MaxConns:              256,
	SwapBody:              1 << 20,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxUpload > 0 {
		d.MaxUpload = l.MaxUpload
	}
	if l.MaxDownload > 0 {
		d.MaxDownload = l.MaxDownload
	}
	if l.MaxHeaderBytes > 0 {
		d.MaxHeaderBytes = l.MaxHeaderBytes
	}
	if l.HeaderTimeout > 0 {
		d.HeaderTimeout = l.HeaderTimeout
	}
	if l.DialTimeout > 0 {
		d.DialTimeout = l.DialTimeout
	}
	if l.ResponseHeaderTimeout > 0 {
		d.ResponseHeaderTimeout = l.ResponseHeaderTimeout
	}
	if l.IdleTimeout > 0 {
		d.IdleTimeout = l.IdleTimeout
	}
	if l.MaxDuration > 0 {
		d.MaxDuration = l.MaxDuration
	}
	if l.MaxConns > 0 {
		d.MaxConns = l.MaxConns
	}
	if l.SwapBody > 0 {
		d.SwapBody = l.SwapBody
	}
	return d
}

// Options configure a Proxy.
type Options struct {
	// Sandbox and Session identify whose traffic this is, for the audit.
	Sandbox string
	Session string
	// Allow is the allow-list; the zero value allows nothing.
	Allow AllowList
	// Decide, when set, is asked about a request that no Allow rule
	// matches: a policy decided per request (a session's live policy)
	// rather than a list fixed when the proxy starts. Its verdict is
	// final for that request. An allowed IP literal counts as a rule
	// naming that exact address (so it may be a loopback or private one,
	// as with an IP-literal Allow rule); an allowed name must still
	// resolve to permitted addresses.
	Decide func(ctx context.Context, host string, port int) Verdict
	// Recorder receives the audit records; required.
	Recorder Recorder
	// AllowAddrs are non-public address ranges an allowed name may
	// resolve to (a company network, say). Empty by default: names never
	// reach loopback, private or link-local addresses.
	AllowAddrs []netip.Prefix
	// Resolver looks names up; nil uses net.DefaultResolver.
	Resolver Resolver
	Limits   Limits
	// Logger receives operational logs; nil discards them.
	Logger *slog.Logger
	// Tracer, when set, makes a span of each request, a child of
	// TraceParent (the tool call's execution), carrying the request's
	// audit entries.
	Tracer      *telemetry.Tracer
	TraceParent trace.SpanContext
	// AllowPeer decides, from its credentials (SO_PEERCRED), whether the
	// process at the other end of a unix-socket connection may use the
	// proxy; nil means OwnerOrDescendant(os.Geteuid(), os.Getpid()).
	AllowPeer func(Peer) error
	// AllowUncredentialed accepts connections that carry no peer
	// credentials (TCP listeners: tests and benchmarks). Without it they
	// are refused.
	AllowUncredentialed bool
	// Swaps are the secrets swapped in on the way out (see Swap).
	Swaps []Swap
	// UpstreamRoots verify the servers the proxy reaches over TLS itself
	// (hosts of a Swap with TLS); nil means the system's roots.
	UpstreamRoots *x509.CertPool
}

// Proxy is one sandbox's egress proxy. Serve it on one or more listeners;
// Close ends everything it started.
type Proxy struct {
	opts      Options
	lim       Limits
	resolver  Resolver
	log       *slog.Logger
	transport *http.Transport
	sem       chan struct{} // one token per served client connection

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // Serve loops and connection handlers

	// mu guards the fields below.
	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	auditErr  error       // first Recorder failure; latches refusal
	refused   map[int]int // refused connections by peer uid

	allowPeer func(Peer) error
	ownerUID  int

	swaps swapSet
	ca    *authority // nil unless a swap opts in to TLS

	spans map[string]openSpan // an allowed request's span, by Record.ID, until its end; guarded by mu
}

// openSpan is a request's span and the context its records are written
// with.
type openSpan struct {
	ctx  context.Context
	span telemetry.Span
}

// New builds a proxy. It starts nothing until Serve.
func New(opts Options) (*Proxy, error) {
	if opts.Recorder == nil {
		return nil, errors.New("netproxy: Options.Recorder is required")
	}
	p := &Proxy{
		opts:      opts,
		lim:       opts.Limits.withDefaults(),
		resolver:  opts.Resolver,
		log:       opts.Logger,
		listeners: map[net.Listener]struct{}{},
		conns:     map[net.Conn]struct{}{},
		refused:   map[int]int{},
		allowPeer: opts.AllowPeer,
		ownerUID:  os.Geteuid(),
	}
	if p.allowPeer == nil {
		p.allowPeer = OwnerOrDescendant(p.ownerUID, os.Getpid())
	}
	var err error
	if p.swaps, err = newSwapSet(opts.Swaps); err != nil {
		return nil, err
	}
	if rules := p.swaps.tlsRules(); len(rules) > 0 {
		if p.ca, err = newAuthority(rules); err != nil {
			return nil, err
		}
	}
	if p.resolver == nil {
		p.resolver = net.DefaultResolver
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.log = p.log.With("sandbox", opts.Sandbox)
	p.sem = make(chan struct{}, p.lim.MaxConns)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	if opts.TraceParent.IsValid() {
		p.ctx = trace.ContextWithSpanContext(p.ctx, opts.TraceParent)
	}
	p.transport = &http.Transport{
		// Never honour the host's own proxy settings.
		Proxy:                  nil,
		DialContext:            p.transportDial,
		ResponseHeaderTimeout:  p.lim.ResponseHeaderTimeout,
		DisableCompression:     true,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        p.lim.IdleTimeout,
		MaxResponseHeaderBytes: int64(p.lim.MaxHeaderBytes),
		ForceAttemptHTTP2:      false,
		// Only requests the proxy terminated go upstream over TLS; the
		// server is verified as any client would.
		TLSClientConfig: &tls.Config{RootCAs: opts.UpstreamRoots, MinVersion: tls.VersionTLS12},
	}
	return p, nil
}

// CACert returns the PEM certificate of the proxy's own certificate
// authority, which a sandbox must trust for the proxy to swap secrets
// into its HTTPS requests (see TrustBundle, CAEnv); nil when no swap opts
// in to TLS. The CA's key exists only in this process's memory.
func (p *Proxy) CACert() []byte {
	if p.ca == nil {
		return nil
	}
	return append([]byte(nil), p.ca.certPEM...)
}

// ErrClosed is returned by Serve once Close has been called.
var ErrClosed = errors.New("netproxy: proxy closed")

// Serve accepts client connections on ln until ln fails or Close is
// called, then returns (ErrClosed after Close). It closes ln.
func (p *Proxy) Serve(ln net.Listener) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ln.Close()
		return ErrClosed
	}
	p.listeners[ln] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.listeners, ln)
		p.mu.Unlock()
		ln.Close()
	}()
	var backoff time.Duration
	for {
		select {
		case p.sem <- struct{}{}:
		case <-p.ctx.Done():
			return ErrClosed
		}
		c, err := ln.Accept()
		if err != nil {
			<-p.sem
			if p.ctx.Err() != nil {
				return ErrClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("netproxy: accept: %w", err)
			}
			// Anything else (EMFILE, ECONNABORTED...) passes: wait a
			// little, longer each time, and go on serving.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			p.log.Warn("egress proxy accept failed; retrying", "err", err, "in", backoff)
			select {
			case <-time.After(backoff):
			case <-p.ctx.Done():
				return ErrClosed
			}
			continue
		}
		backoff = 0
		if !p.track(c) {
			<-p.sem
			c.Close()
			return ErrClosed
		}
		go func() {
			defer p.wg.Done()
			defer func() { <-p.sem }()
			defer p.untrack(c)
			if !p.admitPeer(c) {
				return
			}
			p.serveConn(c)
		}()
	}
}

// track registers an accepted connection (and its handler in wg); false
// when the proxy is closing.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	p.wg.Add(1)
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// Close stops every listener, cuts every connection and waits for their
// handlers to return.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.cancel()
	for ln := range p.listeners {
		ln.Close()
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	p.transport.CloseIdleConnections()
	// No request is left that could need a value.
	p.swaps.wipe()
	return nil
}

// ListenUnix creates a unix socket at path for Serve, replacing a stale
// socket there, with mode 0600 and owned by uid (the user a sandbox's
// processes run as on the host, which may differ from the proxy's; -1
// keeps the creator). Put it in a directory only its owner can enter:
// the mode guards the path, Serve's peer check guards the socket.
func ListenUnix(path string, uid int) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		os.Remove(path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("netproxy: listen: %w", err)
	}
	err = os.Chmod(path, 0o600)
	if err == nil && uid >= 0 && uid != os.Geteuid() {
		err = os.Lchown(path, uid, -1)
	}
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("netproxy: listen: %w", err)
	}
	return ln, nil
}

// admitPeer applies the peer policy to a new connection; a refused one is
// logged (every time) and reported to a PeerRecorder (the first time for
// its uid), and the caller closes it unread.
func (p *Proxy) admitPeer(c net.Conn) bool {
	peer, err := p.checkPeer(c)
	if err == nil {
		return true
	}
	if errors.Is(err, errNotUnix) && p.opts.AllowUncredentialed {
		return true
	}
	p.mu.Lock()
	p.refused[peer.UID]++
	n := p.refused[peer.UID]
	p.mu.Unlock()
	p.log.Warn("egress proxy: connection refused", "peer_uid", peer.UID, "peer_pid", peer.PID, "refusals", n, "err", err)
	if pr, ok := p.opts.Recorder.(PeerRecorder); ok && n == 1 {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), 10*time.Second)
		defer cancel()
		if err := pr.RecordPeerRefused(ctx, PeerRefusal{Sandbox: p.opts.Sandbox, Session: p.opts.Session,
			Peer: peer, Reason: err.Error(), Count: n}); err != nil {
			p.log.Error("egress proxy: recording a refused connection failed", "err", err)
		}
	}
	return false
}

// auditFailure returns the latched Recorder failure, if any.
func (p *Proxy) auditFailure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.auditErr
}

// open records r's decision (PhaseOpen) durably and gives r its ID. An
// error means nothing may be relayed: the audit failure is latched.
func (p *Proxy) open(r *Record) error {
	r.ID = newID()
	r.Phase = PhaseOpen
	r.Sandbox = p.opts.Sandbox
	r.Session = p.opts.Session
	return p.write(*r)
}

// record writes r: a refusal made before anything was opened becomes the
// request's only (PhaseOpen) record; otherwise r is the end (PhaseEnd) of
// the request opened under r.ID.
func (p *Proxy) record(r Record) {
	r.Sandbox = p.opts.Sandbox
	r.Session = p.opts.Session
	if r.ID == "" {
		r.ID, r.Phase = newID(), PhaseOpen
	} else {
		r.Phase = PhaseEnd
		r.Duration = time.Since(r.Time)
	}
	_ = p.write(r)
}

func (p *Proxy) write(r Record) error {
	// The record is written even while closing: a request that ran must
	// be audited.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), 10*time.Second)
	defer cancel()
	ctx, end := p.traceRecord(ctx, r)
	defer end()
	if err := p.opts.Recorder.RecordEgress(ctx, r); err != nil {
		p.mu.Lock()
		if p.auditErr == nil {
			p.auditErr = err
		}
		p.mu.Unlock()
		p.log.Error("egress audit failed: refusing all further requests", "err", err)
		return err
	}
	p.log.Debug("egress", "id", r.ID, "phase", r.Phase, "method", r.Method, "host", r.Host, "port", r.Port,
		"decision", r.Decision, "rule", r.Rule, "status", r.Status,
		"up", r.BytesUp, "down", r.BytesDown)
	return nil
}

// newID is a request's random ID (96 bits, hex).
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b[:])
}
