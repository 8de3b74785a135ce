package email

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/emersion/go-message"
	"github.com/emersion/go-message/mail"
	"github.com/emersion/go-msgauth/authres"
	"github.com/emersion/go-smtp"

	"github.com/fluffy-agent/fluffy/internal/channel"
)

// maxHeaderBytes bounds a message's header block (go-message's default is
// 1 MiB, more than any real header needs).
const maxHeaderBytes = 256 << 10

// SMTP replies beyond go-smtp's own.
var (
	errShuttingDown = &smtp.SMTPError{Code: 421, EnhancedCode: smtp.EnhancedCode{4, 3, 2}, Message: "Shutting down, try again later"}
	errTryLater     = &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "Temporary failure, try again later"}
	errMalformed    = &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 6, 0}, Message: "The message's MIME structure could not be read"}
)

// envelope is what the SMTP conversation said about a message.
type envelope struct {
	from   string // MAIL FROM as given; "" is the null sender
	remote string // the client's address
	helo   string
}

// sizeReader bounds a message to max bytes whatever the SMTP server
// enforces, and remembers whether a read failed because the message was
// too large (a MIME reader may wrap that error beyond recognition).
type sizeReader struct {
	r        io.Reader
	left     int64
	exceeded bool
}

var errTooLarge = errors.New("email: message exceeds serve.email.max_size")

func (s *sizeReader) Read(p []byte) (int, error) {
	if s.left <= 0 {
		// One byte past the limit tells a message of exactly max
		// bytes from a longer one.
		var one [1]byte
		n, err := s.r.Read(one[:])
		if n > 0 || errors.Is(err, smtp.ErrDataTooLarge) {
			s.exceeded = true
			return 0, errTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > s.left {
		p = p[:s.left]
	}
	n, err := s.r.Read(p)
	s.left -= int64(n)
	if errors.Is(err, smtp.ErrDataTooLarge) {
		s.exceeded = true
		err = errTooLarge
	}
	return n, err
}

// drain reads the rest of a message so the SMTP reply reflects its size.
func (s *sizeReader) drain() {
	_, _ = io.Copy(io.Discard, s)
}

// receive handles one message's DATA. It returns nil when the message is
// accepted or dropped (a dropped message is answered as accepted, so
// nobody learns which senders are allowed), or the SMTP error to answer.
func (c *Channel) receive(ctx context.Context, sink channel.Sink, env envelope, r io.Reader) error {
	now := c.clock()
	sr := &sizeReader{r: r, left: c.maxSize}
	refuse := func(reason, principal, detail string) {
		err := sink.Record(ctx, channel.Refusal{Channel: Name, Principal: principal, Reason: reason, Detail: detail, Remote: env.remote})
		if err != nil {
			c.log.Error("email: recording a refusal", "reason", reason, "err", err)
		}
		c.log.Info("email: message refused", "reason", reason, "sender", principal, "remote", env.remote, "detail", detail)
	}
	tooLarge := func() error {
		refuse(ReasonTooLarge, clean(env.from, 320), fmt.Sprintf("larger than serve.email.max_size (%d bytes)", c.maxSize))
		return smtp.ErrDataTooLarge
	}

	// The envelope sender first: a message from anyone else is never
	// parsed.
	from, err := parseMailbox(env.from)
	if err != nil || !c.allowed[from] {
		sr.drain()
		refuse(ReasonSenderNotAllowed, clean(env.from, 320), "the envelope sender (MAIL FROM) is not on serve.email.allowed_senders")
		return nil
	}
	e, err := message.ReadWithOptions(sr, &message.ReadOptions{MaxHeaderBytes: maxHeaderBytes})
	if err != nil && !message.IsUnknownCharset(err) && !message.IsUnknownEncoding(err) {
		sr.drain()
		if sr.exceeded {
			return tooLarge()
		}
		refuse(ReasonMalformed, from.String(), clean("header: "+err.Error(), 300))
		return errMalformed
	}
	// The header From too: the envelope is what the last hop said (and
	// SPF checks), the header is the author a person sees (and DMARC
	// checks). Ordinary spoofing forges one under the other (an allowed
	// header From on a stranger's envelope, or the reverse); requiring
	// both stops that, and behind a server enforcing SPF and DMARC a
	// forger has to beat both checks.
	h := mail.Header{Header: e.Header}
	author, err := headerFrom(h)
	if err != nil || !c.allowed[author] {
		sr.drain()
		refuse(ReasonSenderNotAllowed, from.String(), clean(fmt.Sprintf("the header From %q is not on serve.email.allowed_senders", h.Get("From")), 400))
		return nil
	}

	st, err := newStore(c.attachDir, now)
	if err != nil {
		sr.drain()
		c.log.Error("email: storing attachments", "err", err)
		return errTryLater
	}
	b, err := readBody(e, st)
	st.close()
	if err != nil {
		st.discard()
		sr.drain()
		if sr.exceeded {
			return tooLarge()
		}
		refuse(ReasonMalformed, from.String(), clean(err.Error(), 300))
		return errMalformed
	}
	sr.drain()
	if sr.exceeded {
		st.discard()
		return tooLarge()
	}
	if len(b.attachments) == 0 {
		st.discard() // no empty directory per message
	} else if err := st.sync(); err != nil {
		st.discard()
		c.log.Error("email: storing attachments", "err", err)
		return errTryLater
	}

	in := c.inbound(h, env, from, author, b, filepath.Base(st.dir), now)
	dctx, cancel := context.WithTimeout(ctx, deliverWait)
	session, err := sink.Deliver(dctx, in)
	cancel()
	if err != nil {
		st.discard()
		if errors.Is(err, channel.ErrNotAllowed) {
			// The daemon's allow-list refused and recorded it.
			c.log.Info("email: message not allowed by the daemon", "sender", author.String())
			return nil
		}
		c.log.Error("email: delivering a message", "sender", author.String(), "err", err)
		return errTryLater
	}
	c.log.Info("email: message delivered", "sender", author.String(), "session", session, "attachments", len(b.attachments))
	return nil
}

// headerFrom is the one author of a message; a header From naming
// several (RFC 5322 allows a list) names nobody the channel can check.
func headerFrom(h mail.Header) (mailbox, error) {
	list, err := h.AddressList("From")
	if err != nil {
		return mailbox{}, err
	}
	if len(list) != 1 {
		return mailbox{}, fmt.Errorf("%d addresses in From", len(list))
	}
	return splitAddress(list[0].Address)
}

// inbound builds the message the daemon gets.
func (c *Channel) inbound(h mail.Header, env envelope, from, author mailbox, b body, dir string, now time.Time) channel.Inbound {
	subject, err := h.Subject()
	if err != nil {
		subject = h.Get("Subject")
	}
	subject = clean(subject, 200)
	meta := map[string]string{"envelope_from": from.String(), "remote": env.remote}
	if env.helo != "" {
		meta["helo"] = clean(env.helo, 255)
	}
	if id, err := h.MessageID(); err == nil && id != "" {
		meta["message_id"] = clean(id, 255)
	}
	if b.skipped > 0 {
		meta["attachments_skipped"] = strconv.Itoa(b.skipped)
	}
	c.authResults(h, meta)

	var text strings.Builder
	fromText, err := h.Text("From") // encoded words decoded
	if err != nil {
		fromText = h.Get("From")
	}
	fmt.Fprintf(&text, "From: %s\n", clean(fromText, 400))
	if d := h.Get("Date"); d != "" {
		fmt.Fprintf(&text, "Date: %s\n", clean(d, 100))
	}
	fmt.Fprintf(&text, "Subject: %s\n\n%s", subject, b.text)

	source := subject
	if source == "" {
		source = "(no subject)"
	}
	return channel.Inbound{
		Conversation: channel.Conversation{Channel: Name, Room: room(h, dir), Principal: author.String()},
		Text:         text.String(),
		Untrusted:    true,
		Source:       fmt.Sprintf("email from %s: %s", author, source),
		Attachments:  b.attachments,
		Meta:         meta,
		Received:     now,
	}
}

// room is the thread a message belongs to: the root of its References,
// else what it replies to, else the message itself. A message without
// any id is a thread of its own, named after its attachment directory.
func room(h mail.Header, dir string) string {
	for _, key := range []string{"References", "In-Reply-To"} {
		if ids, err := h.MsgIDList(key); err == nil && len(ids) > 0 && ids[0] != "" {
			return clean(ids[0], 255)
		}
	}
	if id, err := h.MessageID(); err == nil && id != "" {
		return clean(id, 255)
	}
	return "fluffy-" + dir
}

// authResults records the SPF, DKIM and DMARC results of the first
// Authentication-Results header written by the configured server. Header
// fields are prepended hop by hop, so the first one with the server's
// authserv-id is its own; one a sender wrote carries another id or comes
// after it.
func (c *Channel) authResults(h mail.Header, meta map[string]string) {
	if c.authServ == "" {
		return
	}
	fields := h.FieldsByKey("Authentication-Results")
	for fields.Next() {
		id, results, err := authres.Parse(fields.Value())
		if !strings.EqualFold(id, c.authServ) {
			continue
		}
		meta["authserv_id"] = c.authServ
		if err != nil {
			meta["auth_results"] = "unparsable"
		}
		var dkim []string
		for _, r := range results {
			switch r := r.(type) {
			case *authres.SPFResult:
				meta["spf"] = clean(string(r.Value), 40)
				if r.From != "" {
					meta["spf_from"] = clean(r.From, 320)
				}
			case *authres.DKIMResult:
				d := clean(string(r.Value), 40)
				if r.Domain != "" {
					d += " (" + clean(r.Domain, 255) + ")"
				}
				dkim = append(dkim, d)
			case *authres.DMARCResult:
				meta["dmarc"] = clean(string(r.Value), 40)
				if r.From != "" {
					meta["dmarc_from"] = clean(r.From, 255)
				}
			}
		}
		if len(dkim) > 0 {
			meta["dkim"] = strings.Join(dkim, ", ")
		}
		return
	}
}

// clean makes a header value one line of at most max bytes: control
// characters become spaces, invalid UTF-8 is replaced, the ends are
// trimmed.
func clean(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
