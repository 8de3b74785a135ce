package email

import (
	"errors"
	"fmt"
	"net"
	"net/mail"
	"strconv"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/config"
)

// mailbox is an address as the channel compares it: the local part as
// written, the domain lower-cased. Domains are case-insensitive
// everywhere; a local part may not be (RFC 5321 leaves it to the
// receiving server), so "Me@x.org" is not "me@x.org" here.
type mailbox struct {
	local, domain string
}

func (m mailbox) String() string {
	if m.local == "" && m.domain == "" {
		return ""
	}
	return m.local + "@" + m.domain
}

var errBadAddress = errors.New("not a mail address (local@domain)")

// parseMailbox reads a bare address (an envelope path, a configured
// sender), never a display name or a list.
func parseMailbox(s string) (mailbox, error) {
	if s == "" || strings.ContainsAny(s, "<>\r\n\x00") {
		return mailbox{}, errBadAddress
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Name != "" {
		return mailbox{}, errBadAddress
	}
	return splitAddress(a.Address)
}

// splitAddress splits an address net/mail has already parsed.
func splitAddress(addr string) (mailbox, error) {
	at := strings.LastIndexByte(addr, '@')
	if at <= 0 || at == len(addr)-1 {
		return mailbox{}, errBadAddress
	}
	return mailbox{local: addr[:at], domain: strings.ToLower(addr[at+1:])}, nil
}

// Check validates a mail channel's configuration, for New and for
// `fluffy serve --check`. A channel without serve.email.listen is off and
// has nothing to check. Each error is a *config.Error naming its key, and
// where origins (config.Loaded.Origins, or nil) say so, its file:line.
func Check(cfg config.Email, origins map[string]config.Origin) []error {
	if cfg.Listen == "" {
		return nil
	}
	var errs []error
	bad := func(key, format string, a ...any) {
		key = "serve.email." + key
		o := origins[key]
		errs = append(errs, &config.Error{File: o.File, Line: o.Line, Column: o.Column, Env: o.Env, Key: key, Msg: fmt.Sprintf(format, a...)})
	}
	if _, port, err := net.SplitHostPort(cfg.Listen); err != nil {
		bad("listen", "%q is not host:port", cfg.Listen)
	} else if n, err := strconv.ParseUint(port, 10, 16); err != nil || (n == 0 && port != "0") {
		bad("listen", "%q: the port must be a number up to 65535", cfg.Listen)
	}
	if cfg.Address == "" {
		bad("address", "required when serve.email.listen is set: the one address mail is accepted for")
	} else if _, err := parseMailbox(cfg.Address); err != nil {
		bad("address", "%q is %v", cfg.Address, err)
	}
	if len(cfg.AllowedSenders) == 0 {
		bad("allowed_senders", "required when serve.email.listen is set: without it every mail would be dropped")
	}
	for i, s := range cfg.AllowedSenders {
		m, err := parseMailbox(s)
		if err == nil && m.local == "*" {
			// A valid address, but surely meant as a wildcard.
			err = errors.New("a wildcard, which allowed_senders does not take")
		}
		if err != nil {
			bad("allowed_senders", "entry %d, %q, is %v; write the bare address, no display name or wildcard", i+1, s, err)
		}
	}
	if cfg.MaxSize <= 0 {
		bad("max_size", "must be positive")
	}
	if cfg.AuthServID != "" && strings.ContainsFunc(cfg.AuthServID, func(r rune) bool { return r <= ' ' || r == ';' || r >= 0x7f }) {
		bad("authserv_id", "%q is not an authserv-id (a host name, no spaces or ';')", cfg.AuthServID)
	}
	return errs
}
