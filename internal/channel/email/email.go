// Package email owns the inbound mail channel of the assistant daemon
// (serve.email): an SMTP listener that accepts mail for one configured
// address from allowed senders only, reads its MIME structure into a text
// and attachment files, and hands it to the daemon as untrusted data.
//
// It listens for SMTP rather than polling a mailbox over IMAP or reading
// a maildir: fluffy then holds no mailbox credentials, mail arrives when
// it is sent instead of at the next poll, and the whole path is tested
// with real SMTP clients on loopback. A mail server in front of it (the
// one that receives the domain's mail, checks SPF and DKIM and writes an
// Authentication-Results header) forwards the address to it; it is not a
// relay, offers no AUTH and accepts no other recipient. Replies are not
// sent by mail: Send and SendApproval return channel.ErrCannotSend, and
// the daemon reports through the configured report route (docs/email.md).
package email

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/emersion/go-smtp"
	"golang.org/x/net/netutil"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/config"
)

// Name is the channel's instance name: conversations and refusals carry
// it. The daemon has at most one mail channel.
const Name = "email"

// Limits on one connection and one message beyond the configured size:
// they bound what a client can make the channel hold or do.
const (
	maxConns      = 32 // simultaneous SMTP connections
	maxRecipients = 8  // RCPT commands per message (only one can succeed)
	// ioTimeout bounds the wait for each command and for a message's
	// whole DATA (go-smtp sets the deadline per command line).
	ioTimeout   = 5 * time.Minute
	deliverWait = time.Minute // a Sink.Deliver that takes longer fails the message (451)
)

// Refusal reasons this channel records (channel.Refusal.Reason).
const (
	ReasonSenderNotAllowed = "sender_not_allowed"
	ReasonTooLarge         = "too_large"
	ReasonMalformed        = "malformed"
)

// Options are the channel's dependencies. StateDir is required.
type Options struct {
	// Logger receives the channel's log; nil discards it.
	Logger *slog.Logger
	// StateDir is the directory the channel owns: attachments are
	// stored under StateDir/attachments/<message>/. Created 0700 when
	// missing.
	StateDir string
	// Clock stamps Inbound.Received and names message directories; nil
	// is time.Now.
	Clock func() time.Time
}

// Channel is the inbound mail channel. It implements channel.Channel.
type Channel struct {
	listen    string // host:port, the host defaulted to loopback
	recipient mailbox
	allowed   map[mailbox]bool
	maxSize   int64
	authServ  string
	attachDir string
	log       *slog.Logger
	clock     func() time.Time

	// mu guards addr and closing.
	mu      sync.Mutex
	addr    net.Addr
	closing bool // Run is returning: no new message starts
	// inflight counts messages being received, so Run returns only
	// after their attachments are stored or removed.
	inflight sync.WaitGroup
}

var _ channel.Channel = (*Channel)(nil)

// New builds the channel from its configuration (which must pass Check)
// without listening yet: Run listens.
func New(cfg config.Email, opts Options) (*Channel, error) {
	if cfg.Listen == "" {
		return nil, errors.New("email: serve.email.listen is empty: the mail channel is off")
	}
	if errs := Check(cfg, nil); len(errs) > 0 {
		return nil, fmt.Errorf("email: %w", errors.Join(errs...))
	}
	if opts.StateDir == "" {
		return nil, errors.New("email: Options.StateDir is required")
	}
	state, err := filepath.Abs(opts.StateDir)
	if err != nil {
		return nil, fmt.Errorf("email: state directory: %w", err)
	}
	c := &Channel{
		listen:    loopbackDefault(cfg.Listen),
		maxSize:   int64(cfg.MaxSize),
		authServ:  cfg.AuthServID,
		allowed:   map[mailbox]bool{},
		attachDir: filepath.Join(state, "attachments"),
		log:       opts.Logger,
		clock:     opts.Clock,
	}
	c.recipient, _ = parseMailbox(cfg.Address)
	for _, s := range cfg.AllowedSenders {
		m, _ := parseMailbox(s)
		c.allowed[m] = true
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.clock == nil {
		c.clock = time.Now
	}
	if err := os.MkdirAll(c.attachDir, 0o700); err != nil {
		return nil, fmt.Errorf("email: state directory: %w", err)
	}
	if !isLoopback(c.listen) {
		// Not an error: a host may put fluffy behind its own firewall.
		// But anyone who can reach the port can try senders.
		c.log.Warn("email: listening beyond loopback", "listen", c.listen)
	}
	return c, nil
}

// Name is the channel's instance name, "email".
func (c *Channel) Name() string { return Name }

// Addr is the address the listener is bound to, nil before Run has
// called Sink.Ready (a listen port of 0 picks a free port).
func (c *Channel) Addr() net.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addr
}

// Run listens for SMTP and delivers accepted mail to sink until ctx ends
// (it returns nil) or the listener fails. Messages being received when
// ctx ends are abandoned (the client sees the connection close, so a
// sending server retries) and their attachments removed before Run
// returns.
func (c *Channel) Run(ctx context.Context, sink channel.Sink) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", c.listen)
	if ctx.Err() != nil {
		if ln != nil {
			ln.Close()
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("email: listen on %s: %w", c.listen, err)
	}
	srv := smtp.NewServer(&backend{c: c, ctx: ctx, sink: sink})
	srv.Domain = c.recipient.domain
	srv.MaxMessageBytes = c.maxSize
	srv.MaxRecipients = maxRecipients
	srv.ReadTimeout = ioTimeout
	srv.WriteTimeout = ioTimeout
	srv.ErrorLog = smtpLog{c.log}

	c.mu.Lock()
	c.addr = ln.Addr()
	c.closing = false
	c.mu.Unlock()
	c.log.Info("email: listening", "addr", ln.Addr().String(), "address", c.recipient.String())
	sink.Ready(Name, true, nil)

	tr := track(ln)
	lim := netutil.LimitListener(tr, maxConns)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lim) }()
	stop := func() {
		srv.Close()
		lim.Close() // an Accept waiting for a free slot returns
		tr.closeAll()
		c.drain()
	}
	select {
	case <-ctx.Done():
		stop()
		<-served
		return nil
	case err := <-served:
		stop()
		err = fmt.Errorf("email: serve: %w", err)
		sink.Ready(Name, false, err)
		return err
	}
}

// begin admits one message unless Run is returning; end marks it done.
func (c *Channel) begin() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return false
	}
	c.inflight.Add(1)
	return true
}

func (c *Channel) end() { c.inflight.Done() }

// drain stops admitting messages and waits for those being received.
func (c *Channel) drain() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	c.inflight.Wait()
}

// Send returns channel.ErrCannotSend: the channel has no outbound mail
// server, so the daemon reports through serve.email.report.
func (c *Channel) Send(context.Context, channel.Conversation, channel.Outbound) error {
	return channel.ErrCannotSend
}

// SendApproval returns channel.ErrCannotSend: approvals route to the
// person's approval channels (approval.route).
func (c *Channel) SendApproval(context.Context, channel.Conversation, approval.Request) error {
	return channel.ErrCannotSend
}

// loopbackDefault binds a listen address without a host to loopback,
// never to every interface: "0.0.0.0:25" must be written out.
func loopbackDefault(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err == nil && host == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return listen
}

func isLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// smtpLog hands go-smtp's internal errors (a connection that broke) to
// the channel's logger.
type smtpLog struct{ l *slog.Logger }

func (s smtpLog) Printf(format string, v ...any) {
	s.l.Debug("email: smtp: " + strings.TrimSpace(fmt.Sprintf(format, v...)))
}

func (s smtpLog) Println(v ...any) {
	s.l.Debug("email: smtp: " + strings.TrimSpace(fmt.Sprintln(v...)))
}

// backend makes one session per SMTP connection.
type backend struct {
	c    *Channel
	ctx  context.Context
	sink channel.Sink
}

func (b *backend) NewSession(conn *smtp.Conn) (smtp.Session, error) {
	remote := ""
	if a := conn.Conn().RemoteAddr(); a != nil {
		remote = a.String()
	}
	return &session{b: b, remote: remote, helo: conn.Hostname()}, nil
}

// session is one SMTP connection's state. It implements no AUTH: the
// channel is not a relay and has no accounts.
type session struct {
	b            *backend
	remote, helo string
	from         string // MAIL FROM as given; "" is the null sender
}

func (s *session) Reset()        { s.from = "" }
func (s *session) Logout() error { return nil }

func (s *session) Mail(from string, _ *smtp.MailOptions) error {
	// Whether the sender is allowed is decided after DATA, with the
	// header From: answering now would tell anyone which senders are.
	s.from = from
	return nil
}

var errNoSuchRecipient = &smtp.SMTPError{
	Code:         550,
	EnhancedCode: smtp.EnhancedCode{5, 1, 1},
	Message:      "No such recipient here; this server is not a relay",
}

func (s *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	m, err := parseMailbox(to)
	if err != nil || m != s.b.c.recipient {
		return errNoSuchRecipient
	}
	return nil
}

func (s *session) Data(r io.Reader) error {
	c := s.b.c
	if !c.begin() {
		return errShuttingDown
	}
	defer c.end()
	return c.receive(s.b.ctx, s.b.sink, envelope{from: s.from, remote: s.remote, helo: s.helo}, r)
}
