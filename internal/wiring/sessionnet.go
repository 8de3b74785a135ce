package wiring

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/netproxy"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/telemetry"
	"github.com/fluffy-agent/fluffy/internal/tool/router"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// NetConnectTool is the tool name of the operation a session's egress
// proxy puts to the policy for each destination (action net, one host).
const NetConnectTool = "net.connect"

// sessionNet gives a session's sandboxed commands the network its policy
// allows: when a rule with a host matcher may let a destination through,
// each command gets an egress proxy of its own (so every request names
// the tool call that sent it) whose every destination is decided by the
// live policy of the session's workspace, and by the person when the
// policy says approve. Without such a rule a command gets no proxy and no
// network, as before.
type sessionNet struct {
	u       *userenv.Env
	live    *livePolicy
	ws      string
	session string
	audit   router.Recorder
	log     *slog.Logger
	// approver asks the person about a destination the policy sends to
	// approval (the kernel's broker); nil refuses such destinations.
	approver router.Approver
	// swaps, when set, gives the secrets call's proxy swaps in (the
	// credential broker's declarations in proxy mode).
	swaps func(ctx context.Context, call string) ([]netproxy.Swap, error)
	// tracer makes a span of each request, under the call's (nil: none).
	tracer *telemetry.Tracer
}

// newSessionNet is a session's network (its egress is the router's
// Egress, its confinedEgress a skill run's), or nil when its runtime
// cannot take a proxy socket. The native runtime binds the socket into
// the sandbox; a container (docker, podman) gets a forwarder on its
// loopback opened by this process in its network namespace for the one
// command (docker.Instance.Run), which reaches the same socket.
func newSessionNet(u *userenv.Env, live *livePolicy, ws, session, runtime string, rec router.Recorder, log *slog.Logger, approver router.Approver, swaps func(context.Context, string) ([]netproxy.Swap, error), tr *telemetry.Tracer) *sessionNet {
	switch runtime {
	case "native", "docker", "podman":
	default:
		return nil
	}
	return &sessionNet{u: u, live: live, ws: ws, session: session, audit: rec, log: log, approver: approver, swaps: swaps, tracer: tr}
}

// egress starts call's proxy, or returns nil when no rule could let any
// destination through (or the policy does not load: no network then).
func (n *sessionNet) egress(ctx context.Context, call string) (router.Egress, error) {
	e, err := n.live.engine(ctx, n.ws)
	if err != nil {
		return nil, nil
	}
	pats := e.HostPatterns()
	if len(pats) == 0 {
		return nil, nil
	}
	return n.startProxy(ctx, call, n.forCall(ctx, call).decide, namesLoopback(pats))
}

// startProxy starts call's proxy deciding each destination with decide;
// loopback routes the command's requests to loopback through it too.
func (n *sessionNet) startProxy(ctx context.Context, call string, decide func(context.Context, string, int) netproxy.Verdict, loopback bool) (router.Egress, error) {
	l, err := n.u.Config()
	if err != nil {
		return nil, err
	}
	c := l.Config.Net
	addrs, err := allowAddrs(c)
	if err != nil {
		return nil, err
	}
	var swaps []netproxy.Swap
	if n.swaps != nil {
		if swaps, err = n.swaps(ctx, call); err != nil {
			return nil, err
		}
	}
	eg := &egress{served: make(chan struct{})}
	eg.proxy, err = netproxy.New(netproxy.Options{
		Sandbox: "session", Session: n.session,
		Decide:     decide,
		Recorder:   &sessionNetAudit{log: n.audit, session: n.session, call: call, open: map[string]uint64{}},
		AllowAddrs: addrs,
		Logger:     n.log.With("component", "netproxy", "call", call),
		Limits:     proxyLimits(c),
		Swaps:      swaps,
		Tracer:     n.tracer, TraceParent: trace.SpanContextFromContext(ctx),
	})
	if err != nil {
		return nil, err
	}
	if err := eg.listen(n.u, netproxy.AllowList{}); err != nil {
		eg.Close()
		return nil, err
	}
	if err := eg.trustProxyCA(n.u.TempDir()); err != nil {
		eg.Close()
		return nil, err
	}
	if loopback {
		// A rule names a service on the host's loopback: the command's
		// requests to loopback go through the proxy (the sandbox's own
		// loopback has nothing of the host's on it).
		for i, v := range eg.env {
			if k, _, _ := strings.Cut(v, "="); strings.EqualFold(k, "NO_PROXY") {
				eg.env[i] = k + "="
			}
		}
	}
	return eg, nil
}

// sessionWantsNet reports whether the session's commands get a proxy as
// the policy in force for ws stands: a rule names a host.
func sessionWantsNet(ctx context.Context, live *livePolicy, ws string) bool {
	e, err := live.engine(ctx, ws)
	return err == nil && len(e.HostPatterns()) > 0
}

// callNet decides the destinations of one tool call's command.
// Concurrent requests for one destination while the person is asked wait
// for that one question rather than ask again, and a destination the
// person did not approve stays refused for the rest of the command (a
// client retrying, or fetching file after file, does not ask again).
type callNet struct {
	n    *sessionNet
	call string
	// ctx is the tool call's: when it ends, a question still open is
	// withdrawn (denied).
	ctx context.Context

	mu     sync.Mutex
	asking map[string]*question        // by host:port
	denied map[string]netproxy.Verdict // by host:port
}

func (n *sessionNet) forCall(ctx context.Context, call string) *callNet {
	return &callNet{n: n, call: call, ctx: ctx, asking: map[string]*question{}, denied: map[string]netproxy.Verdict{}}
}

// question is one open approval of a destination; v is set before done
// closes.
type question struct {
	done    chan struct{}
	v       netproxy.Verdict
	waiters int // requests that joined it, guarded by callNet.mu
}

// decide is the proxy's verdict on one destination: the live policy's
// decision on a net.connect operation for it. An allow by a rule lets it
// through (never the fallback: network needs a rule naming it); approve
// asks the person and waits for the answer; block refuses.
func (c *callNet) decide(pctx context.Context, host string, port int) netproxy.Verdict {
	// The proxy's context ends when the command's proxy closes, the
	// call's when the session stops waiting for the call: either
	// withdraws a question.
	ctx, cancel := context.WithCancel(pctx)
	defer cancel()
	defer context.AfterFunc(c.ctx, cancel)()
	n := c.n
	e, err := n.live.engine(ctx, n.ws)
	if err != nil {
		return netproxy.Verdict{Rule: "policy", Reason: "the policy does not load: " + err.Error()}
	}
	op := n.connectOp(host, port)
	d := e.Decide(ctx, op)
	hp := net.JoinHostPort(host, fmt.Sprint(port))
	switch {
	case d.Effect == policy.Allow && d.Rule != "fallback":
		return netproxy.Verdict{Allow: true, Rule: d.Rule}
	case d.Effect == policy.Approve:
		return c.ask(ctx, op, hp, d)
	}
	reason := d.Reason
	if reason == "" {
		reason = hp + " is not allowed by the policy"
	}
	return netproxy.Verdict{Rule: d.Rule, Reason: reason}
}

// connectOp is the operation a request to host:port puts to the policy.
func (n *sessionNet) connectOp(host string, port int) operation.Operation {
	return operation.Operation{Tool: NetConnectTool, Action: operation.Net,
		Hosts:   []operation.Host{{Name: host, Port: port}},
		Session: operation.Session{ID: n.session, Workspace: n.ws}, Tags: []string{"net"}}
}

// ask asks the person about hp, or waits for the question already open
// about it in this call.
func (c *callNet) ask(ctx context.Context, op operation.Operation, hp string, d policy.Decision) netproxy.Verdict {
	c.mu.Lock()
	if v, ok := c.denied[hp]; ok {
		c.mu.Unlock()
		return v
	}
	if q, ok := c.asking[hp]; ok {
		q.waiters++
		c.mu.Unlock()
		select {
		case <-q.done:
			return q.v
		case <-ctx.Done():
			return netproxy.Verdict{Rule: d.Rule, Reason: fmt.Sprintf("%s needs a person's approval; the command ended before an answer", hp)}
		}
	}
	q := &question{done: make(chan struct{})}
	c.asking[hp] = q
	c.mu.Unlock()
	q.v = c.n.askPerson(ctx, c.call, op, hp, d)
	c.mu.Lock()
	delete(c.asking, hp)
	if !q.v.Allow && ctx.Err() == nil {
		c.denied[hp] = q.v
	}
	joined := q.waiters
	c.mu.Unlock()
	close(q.done)
	if joined > 0 {
		c.n.log.Debug("one question answered concurrent requests", "call", c.call, "host", hp, "requests", joined+1, "allowed", q.v.Allow)
	}
	return q.v
}

// askPerson puts op to the person through the approval broker and waits
// for the answer (the broker's timeout, or ctx, denies). An approval "for
// session" given earlier under the same policy answers without asking:
// the broker keys it by session, rule and the operation's signature
// (tool, action, host and port), so it covers that destination of that
// session only.
func (n *sessionNet) askPerson(ctx context.Context, call string, op operation.Operation, hp string, d policy.Decision) netproxy.Verdict {
	if n.approver == nil {
		return netproxy.Verdict{Rule: d.Rule, Reason: fmt.Sprintf(
			"%s needs a person's approval (%s) and this session has no one to ask: the person can allow it with a policy rule {effect: allow, match: {action: net, host: %q}}",
			hp, d.Reason, hp)}
	}
	summary := fmt.Sprintf("call %s of session %s wants to reach %s (rule %s)", call, n.session, hp, d.Rule)
	req, err := n.approver.Ask(ctx, n.session, summary, []approval.Step{{Op: op}})
	if err != nil || len(req.Items) != 1 {
		n.log.Warn("a destination's approval could not be asked", "host", hp, "err", err)
		return netproxy.Verdict{Rule: d.Rule, Reason: fmt.Sprintf("%s needs a person's approval, which could not be asked: %v", hp, err)}
	}
	it := req.Items[0]
	rule := it.Eval.Rule
	if rule == "" {
		rule = d.Rule
	}
	// The broker decides with the policy in force when it asks: an allow
	// by the fallback still lets nothing through.
	if it.Decision.Verdict == approval.Approved && (it.Eval.Effect != approval.EffectAllow || rule != "fallback") {
		return netproxy.Verdict{Allow: true, Rule: rule}
	}
	if it.Eval.Effect == approval.EffectBlock {
		return netproxy.Verdict{Rule: rule, Reason: it.Decision.Reason}
	}
	why := it.Decision.Reason
	if why == "" {
		why = "denied"
	}
	return netproxy.Verdict{Rule: rule, Reason: fmt.Sprintf("the person did not approve %s (request %s): %s", hp, req.ID, why)}
}

// namesLoopback reports whether a host pattern names a loopback address
// or localhost. A pattern's name is what precedes its first ':' (as the
// policy reads it: an IPv6 address cannot be named).
func namesLoopback(pats []string) bool {
	for _, p := range pats {
		name, _, _ := strings.Cut(p, ":")
		if a, err := netip.ParseAddr(name); (err == nil && a.IsLoopback()) || strings.EqualFold(name, "localhost") || strings.HasPrefix(name, "127.") {
			return true
		}
	}
	return false
}

// allowAddrs parses net.allow_addrs.
func allowAddrs(c config.Net) ([]netip.Prefix, error) {
	var addrs []netip.Prefix
	for _, s := range c.AllowAddrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%w: net.allow_addrs: %w", userenv.ErrUsage, err)
		}
		addrs = append(addrs, p)
	}
	return addrs, nil
}

// proxyLimits are the proxy's limits from configuration net.
func proxyLimits(c config.Net) netproxy.Limits {
	return netproxy.Limits{
		MaxUpload:             int64(c.MaxUpload),
		MaxDownload:           int64(c.MaxDownload),
		MaxDuration:           time.Duration(c.MaxDuration),
		IdleTimeout:           time.Duration(c.IdleTimeout),
		MaxConns:              c.MaxConns,
		HeaderTimeout:         time.Duration(c.HeaderTimeout),
		DialTimeout:           time.Duration(c.ConnectTimeout),
		ResponseHeaderTimeout: time.Duration(c.ResponseTimeout),
	}
}

// sessionNetAudit records a session proxy's requests in the session's
// audit log, each with the tool call whose command sent it.
type sessionNetAudit struct {
	log           router.Recorder
	session, call string
	mu            sync.Mutex
	open          map[string]uint64 // net.request sequence by request id
}

var (
	_ netproxy.Recorder     = (*sessionNetAudit)(nil)
	_ netproxy.PeerRecorder = (*sessionNetAudit)(nil)
)

// RecordEgress writes a decision as a net.request entry, durable before
// it returns (nothing is relayed before), and an allowed request's
// outcome as a net.end entry naming it.
func (a *sessionNetAudit) RecordEgress(ctx context.Context, rec netproxy.Record) error {
	if rec.Phase == netproxy.PhaseEnd {
		p := audit.NetEnd{
			ID: rec.ID, Sandbox: rec.Sandbox, Method: rec.Method, Host: rec.Host, Port: rec.Port, Addr: rec.Addr,
			Decision: string(rec.Decision), Rule: rec.Rule, Reason: rec.Reason, Status: rec.Status,
			BytesUp: rec.BytesUp, BytesDown: rec.BytesDown, DurationUS: rec.Duration.Microseconds(), Error: rec.Err, Call: a.call,
		}
		a.mu.Lock()
		p.Request = a.open[rec.ID]
		delete(a.open, rec.ID)
		a.mu.Unlock()
		_, err := a.log.Append(ctx, audit.Entry{Session: a.session, Kind: audit.KindNetEnd, Actor: "sandbox", Payload: p})
		return err
	}
	p := audit.NetRequest{
		ID: rec.ID, Sandbox: rec.Sandbox, Method: rec.Method, Host: rec.Host, Port: rec.Port,
		Decision: string(rec.Decision), Rule: rec.Rule, Call: a.call, Secrets: rec.Secrets, TLS: rec.TLS,
	}
	if rec.Decision == netproxy.Denied {
		p.Reason, p.Status = rec.Reason, rec.Status
	}
	seq, err := a.log.Append(ctx, audit.Entry{Session: a.session, Kind: audit.KindNetRequest, Actor: "sandbox", Payload: p})
	if err != nil {
		return err
	}
	if err := a.log.Flush(ctx); err != nil {
		return err
	}
	if rec.Decision == netproxy.Allowed {
		a.mu.Lock()
		a.open[rec.ID] = seq
		a.mu.Unlock()
	}
	return nil
}

// RecordPeerRefused writes a net.refused entry: who tried to use the
// call's proxy.
func (a *sessionNetAudit) RecordPeerRefused(ctx context.Context, pr netproxy.PeerRefusal) error {
	_, err := a.log.Append(ctx, audit.Entry{Session: a.session, Kind: audit.KindNetRefused, Actor: "sandbox", Payload: audit.NetRefused{
		Sandbox: pr.Sandbox, PeerUID: pr.Peer.UID, PeerGID: pr.Peer.GID, PeerPID: pr.Peer.PID, Reason: pr.Reason,
	}})
	return err
}
