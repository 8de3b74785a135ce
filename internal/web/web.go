// Package web owns the web console: the pages a person uses, in a
// browser, to watch the kernel's sessions live, answer approval requests,
// review and apply change sets and read the audit log, and the console's
// security: one-time login links and passkeys (WebAuthn) exchanged for
// an in-memory session cookie, CSRF tokens, Host and Origin checks, a strict
// Content-Security-Policy. Pages are rendered on the server with
// html/template (model output is hostile and always escaped); the small
// script and stylesheet are embedded. The console is also the daemon's
// "web" channel (sessions started from the page are its conversations).
// It declares the small interfaces it consumes; internal/wiring
// implements them on the kernel and the daemon (docs/web.md).
package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alecthomas/chroma/v2"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/channel"
)

// Name is the console's channel name, in audit entries and
// conversations.
const Name = "web"

// MethodLogin is the kernel socket's method for "fluffy web open": it
// mints a one-time login link (no parameters → LoginResult).
const MethodLogin = "web.login"

// LoginResult is MethodLogin's answer.
type LoginResult struct {
	URL string `json:"url"`
}

// Session is a kernel session as the console lists it.
type Session struct {
	ID        string
	Kind      string
	Status    string
	Task      string
	Model     string
	Workspace string
	Created   time.Time
	Updated   time.Time
	Turns     int
	Cost      float64
	// Reason is why it stopped; Error its fault.
	Reason string
	Error  string
	// Untrusted says what made the session untrusted, "" when nothing.
	Untrusted string
}

// ErrNotFound: no session (or entry) has that id.
var ErrNotFound = errors.New("web: not found")

// Sessions are the kernel's sessions. Get returns ErrNotFound for an
// unknown id.
type Sessions interface {
	List(ctx context.Context) ([]Session, error)
	Get(ctx context.Context, id string) (Session, error)
}

// Approvals are the kernel's approval broker. Answer takes an answer in
// the approval language (docs/approvals.md) and records the decision with
// who; it returns approval.ErrUnknownRequest for a request no longer
// open, a *approval.SyntaxError (or another error) for an answer it
// refuses.
type Approvals interface {
	Pending(session string) []approval.Request
	Answer(ctx context.Context, id, text string, who approval.Who) error
}

// ChangeSet is a session's change set as the console shows it.
type ChangeSet struct {
	Changes []changeset.Change
	// Diff is the unified diff of the selected paths.
	Diff string
	// Conflicts are set when an apply refused: nothing was written.
	Conflicts []Conflict
}

// Conflict is a path an apply refused, with its three versions
// rendered.
type Conflict struct {
	Path    string
	Explain string
}

// Changes work on a session's change set. paths select files (none: all);
// actor is who asked, recorded in the audit log. Apply and Discard return
// an error when the session is running.
type Changes interface {
	Diff(ctx context.Context, session string, paths []string) (ChangeSet, error)
	Apply(ctx context.Context, session string, paths []string, actor string) (ChangeSet, error)
	Discard(ctx context.Context, session string, paths []string, actor string) (ChangeSet, error)
}

// AuditLog is the audit log, read: its entries, an entry's inclusion
// proof against the newest checkpoint, that checkpoint.
type AuditLog interface {
	Entries(ctx context.Context, f audit.Filter, fn func(audit.Entry) error) error
	Prove(ctx context.Context, seq uint64) (audit.InclusionProof, error)
	Checkpoint(ctx context.Context) (audit.Checkpoint, error)
}

// Recorder appends to the audit log (refusals, logins).
type Recorder interface {
	Append(ctx context.Context, e audit.Entry) (uint64, error)
}

// Options configure a Server. Sessions, Approvals, Hub and Audit are
// required; Changes, Log and Policy may be nil (their pages say so).
type Options struct {
	Sessions  Sessions
	Approvals Approvals
	Changes   Changes
	Log       AuditLog
	Policy    Policy
	// Secrets, Schedules and Memory may be nil (their pages say so).
	Secrets   Secrets
	Schedules Schedules
	Memory    Memory
	// Transcript is the sessions' stored conversations, shown before
	// the hub's events; nil: a page shows the hub's events only.
	Transcript Transcript
	// Skills and Plugins may be nil (their pages say so).
	Skills  Skills
	Plugins Plugins
	Audit   Recorder
	// Passkeys keep the principals' passkeys; nil: no passkeys.
	Passkeys Passkeys
	Hub      *Hub
	// Hosts are further host:port names the console is reached at (a
	// reverse proxy's name), lower-case; the bound address and, on
	// loopback, localhost, 127.0.0.1 and [::1] at its port are always
	// accepted.
	Hosts []string
	// TLS marks the cookie Secure and expects https origins; a request
	// through a Hosts name (a TLS reverse proxy) is treated alike.
	TLS    bool
	Logger *slog.Logger
	Now    func() time.Time
}

// Server is the console: an http.Handler, and the "web" channel.
type Server struct {
	o    Options
	log  *slog.Logger
	auth *auth
	cer  *ceremonies
	// lexers highlight the change sets' diffs.
	lexers *lexerCache
	mux    *http.ServeMux
	// pages are the parsed templates (templates/).
	pages pages
	addr  atomic.Value // string: the bound address

	// secrets keep the secret backends' states for SecretStateTTL.
	secrets secretStates

	mu   sync.Mutex // guards sink
	sink channel.Sink
}

// New returns the console. Its Host checks need the bound address
// (SetAddr) before it answers anything.
func New(o Options) (*Server, error) {
	if o.Sessions == nil || o.Approvals == nil || o.Hub == nil || o.Audit == nil {
		return nil, errors.New("web: Options.Sessions, Approvals, Hub and Audit are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	p, err := parsePages()
	if err != nil {
		return nil, fmt.Errorf("web: templates: %w", err)
	}
	s := &Server{o: o, log: o.Logger, auth: newAuth(o.Now), pages: p,
		cer: &ceremonies{now: o.Now, m: map[string]ceremony{}}, lexers: &lexerCache{m: map[string]chroma.Lexer{}}}
	s.addr.Store("")
	s.routes()
	return s, nil
}

// SetAddr tells the console the host:port it is bound to.
func (s *Server) SetAddr(addr string) { s.addr.Store(addr) }

// Addr is the bound address, "" before SetAddr.
func (s *Server) Addr() string { return s.addr.Load().(string) }

// LoginURL mints a one-time login link for principal: valid for
// LoginTTL, good for one exchange. The link is the only place the token
// appears; the console never logs it.
func (s *Server) LoginURL(principal string) (string, error) {
	addr := s.Addr()
	if addr == "" {
		return "", errors.New("web: the console is not listening yet")
	}
	scheme := s.scheme(nil)
	if host, _, err := net.SplitHostPort(addr); err == nil && len(s.o.Hosts) > 0 {
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			// Bound to every address: the link names the host the
			// console is reached at, over TLS (its own or the proxy's).
			addr, scheme = s.o.Hosts[0], "https"
		}
	}
	return scheme + "://" + addr + "/login?t=" + s.auth.mint(principal), nil
}

// Name implements channel.Channel.
func (s *Server) Name() string { return Name }

// Run implements channel.Channel: the console is served on its own
// listener (internal/wiring); Run keeps the daemon's sink for the
// sessions started from the page until ctx ends.
func (s *Server) Run(ctx context.Context, sink channel.Sink) error {
	s.mu.Lock()
	s.sink = sink
	s.mu.Unlock()
	sink.Ready(Name, true, nil)
	<-ctx.Done()
	s.mu.Lock()
	s.sink = nil
	s.mu.Unlock()
	return nil
}

// Send implements channel.Channel: a reply reaches the page through the
// session's live stream, so there is nothing to send.
func (s *Server) Send(context.Context, channel.Conversation, channel.Outbound) error { return nil }

// SendApproval implements channel.Channel: the approvals page lists the
// broker's open requests, and the session's stream shows each as it is
// asked.
func (s *Server) SendApproval(context.Context, channel.Conversation, approval.Request) error {
	return nil
}

func (s *Server) currentSink() channel.Sink {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sink
}

var _ channel.Channel = (*Server)(nil)
