// Package matrix owns the Matrix channel of the assistant daemon
// (serve.matrix): one bot account per entry, logged in with mautrix,
// end-to-end encrypted with its pure-Go olm (built with -tags goolm). A
// room, or a thread in it, is a conversation; messages from the
// configured principals start or continue a session, and a principal's
// encrypted message counts only from a device that principal has
// cross-signed. Replies are Markdown rendered as Matrix HTML, long ones
// go into a thread under a one-line summary, very long ones as a file.
// Approval requests are one message with numbered steps, answered by
// reactions or by a reply in the approval language, and are not shown
// while the principal has devices they have not verified. The channel's
// state (crypto store, sync token, handled events, events waiting for
// their key, the requests it posted) lives in SQLite files under
// <data dir>/matrix/<account>/ (docs/channels.md).
//
// The mautrix code needs the goolm build tag (the Makefile sets it for
// every build); without it only the configuration check is compiled and
// the daemon refuses a serve.matrix entry.
package matrix

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/secret"
)

// DefaultName is an account's channel name when serve.matrix[].name is
// empty.
const DefaultName = "matrix"

// How long a verification waits for the operator's answer before the bot
// cancels it (serve.matrix[].verify_timeout). Below the minimum no one
// compares seven emoji and types the command in time; above the maximum
// the person's client has given up (the Matrix spec lets either side
// cancel a verification after 10 minutes), so a longer wait only keeps a
// dead one.
const (
	DefaultVerifyTimeout = 5 * time.Minute
	MinVerifyTimeout     = 30 * time.Second
	MaxVerifyTimeout     = 10 * time.Minute
)

// ErrSecret is matched by every error reading an account's token or
// password.
var ErrSecret = errors.New("matrix: secret")

// validName is a channel instance name: it appears in audit entries,
// routes and the state directory's path.
var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// userIDPattern is a Matrix user id as the spec's grammar has it,
// loosely: @localpart:server.
var userIDPattern = regexp.MustCompile(`^@[a-z0-9._=/+-]+:[A-Za-z0-9.:\[\]-]+$`)

// ChannelName is an account's channel instance name.
func ChannelName(m config.Matrix) string {
	if m.Name == "" {
		return DefaultName
	}
	return m.Name
}

// Check validates serve.matrix for `fluffy serve --check` and before the
// accounts start: names (valid, unique), the homeserver URL, user ids,
// exactly one secret source that resolves, principals, rooms and the
// verification timeout. where
// is the origin of serve.matrix, so errors name its file and each
// entry's line. lookupEnv nil is os.LookupEnv.
func Check(accounts []config.Matrix, where config.Origin, lookupEnv func(string) (string, bool)) []error {
	var errs []error
	seen := map[string]int{}
	for i, m := range accounts {
		bad := func(key, msg string) {
			errs = append(errs, &config.Error{File: where.File, Line: m.Line, Column: m.Column, Env: where.Env,
				Key: fmt.Sprintf("serve.matrix[%d].%s", i, key), Msg: msg})
		}
		name := ChannelName(m)
		if !validName.MatchString(name) {
			bad("name", fmt.Sprintf("%q: want 1 to 63 of a-z 0-9 _ - starting with a letter or digit", name))
		}
		if j, ok := seen[name]; ok {
			bad("name", fmt.Sprintf("%q is also the name of serve.matrix[%d]", name, j))
		}
		seen[name] = i
		if u, err := url.Parse(m.Homeserver); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			bad("homeserver", fmt.Sprintf("%q: want the client-server API's base URL, https://host[:port]", m.Homeserver))
		}
		if !userIDPattern.MatchString(m.UserID) {
			bad("user_id", fmt.Sprintf("%q: want a Matrix user id, @name:server", m.UserID))
		}
		set := 0
		for _, v := range []string{m.Token, m.TokenEnv, m.TokenFile} {
			if v != "" {
				set++
			}
		}
		switch {
		case set == 0:
			bad("token", "one of token (a secret reference), token_env or token_file is required (the secret itself never goes into the configuration)")
		case set > 1:
			bad("token", "more than one of token, token_env and token_file is set: choose one")
		case m.Token != "":
			// A reference to a backend only the daemon reaches is
			// checked for its form; the daemon resolves it at start.
			if ref, err := secret.ParseRef(m.Token); err != nil {
				bad("token", err.Error())
			} else if ref.Backend == "env" || ref.Backend == "file" {
				if _, err := resolveToken(context.Background(), m, lookupEnv, nil); err != nil {
					bad("token", strings.TrimPrefix(err.Error(), ErrSecret.Error()+": token: "))
				}
			}
		default:
			if _, err := ReadSecret(m, lookupEnv); err != nil {
				key := "token_env"
				if m.TokenFile != "" {
					key = "token_file"
				}
				bad(key, strings.TrimPrefix(err.Error(), ErrSecret.Error()+": "))
			}
		}
		if len(m.Principals) == 0 {
			bad("principals", "required: the Matrix user ids whose messages the agent acts on")
		}
		for j, p := range m.Principals {
			if !userIDPattern.MatchString(p) {
				bad(fmt.Sprintf("principals[%d]", j), fmt.Sprintf("%q: want a Matrix user id, @name:server", p))
			}
			if p == m.UserID {
				bad(fmt.Sprintf("principals[%d]", j), fmt.Sprintf("%q is the bot's own account", p))
			}
		}
		if d := m.VerifyTimeout.Std(); d != 0 && (d < MinVerifyTimeout || d > MaxVerifyTimeout) {
			bad("verify_timeout", fmt.Sprintf("%s: want %s to %s (0: the default, %s)", short(d),
				short(MinVerifyTimeout), short(MaxVerifyTimeout), short(DefaultVerifyTimeout)))
		}
		for j, r := range m.Rooms {
			if !strings.HasPrefix(r, "!") && !strings.HasPrefix(r, "#") || !strings.Contains(r, ":") {
				bad(fmt.Sprintf("rooms[%d]", j), fmt.Sprintf("%q: want a room id (!id:server) or alias (#name:server)", r))
			}
		}
	}
	return errs
}

// short is a duration as a person writes it: 10m, not 10m0s.
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
