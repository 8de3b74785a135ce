package config

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/fluffy-agent/fluffy/internal/units"
)

// Serve configures the assistant daemon, `fluffy serve` (docs/serve.md).
// Every key decides who may reach the agent or what it does unasked, so
// none may be set by a project file.
type Serve struct {
	// Listen is the daemon's HTTP address for webhooks (host:port);
	// empty: no HTTP listener, no webhooks.
	Listen string `yaml:"listen" scope:"user"`
	// Health serves /healthz and /readyz: host:port (loopback) or
	// "unix:/path"; empty: not served.
	Health string `yaml:"health" scope:"user"`
	// HealthExposed lets Health name any address, not only loopback: in
	// a container, whose loopback the host cannot reach, the health port
	// is published from the container's own address.
	HealthExposed bool `yaml:"health_exposed" scope:"user"`
	// Workspace is the assistant's workspace directory (SOUL.md, USER.md,
	// AGENTS.md, TOOLS.md, HEARTBEAT.md, MEMORY.md, memory/); default
	// ~/.fluffy/workspace.
	Workspace string `yaml:"workspace" scope:"user"`
	// Heartbeat is how often HEARTBEAT.md is worked through; 0 turns the
	// heartbeat off.
	Heartbeat units.Duration `yaml:"heartbeat" scope:"user"`
	// ContextTokens bounds the assistant workspace's files in an
	// assistant session's system prompt (MEMORY.md and the recent daily
	// logs first out when they do not fit).
	ContextTokens int `yaml:"context_tokens" scope:"user"`
	// HeartbeatReport is where a heartbeat that needs the person reports.
	HeartbeatReport Route `yaml:"heartbeat_report" scope:"user"`
	// Webhooks are the signed HTTP endpoints POST /hooks/NAME.
	Webhooks []Webhook `yaml:"webhooks" scope:"user"`
	// Email is the inbound mail channel.
	Email Email `yaml:"email"`
	// Web is the web console (docs/web.md).
	Web Web `yaml:"web"`
	// Matrix are the Matrix accounts the daemon chats through
	// (docs/channels.md).
	Matrix []Matrix `yaml:"matrix" scope:"user"`
	// Cron holds the scheduled jobs.
	Cron []CronJob `yaml:"cron" scope:"user"`
	// Grace is how long a stopping daemon lets the turns in progress end
	// before it cancels them (their sessions stay resumable); default 30s.
	Grace units.Duration `yaml:"grace" scope:"user"`
}

// Web configures the web console.
type Web struct {
	// Listen is the console's address (host:port, loopback unless
	// Hosts names the reverse proxy in front); empty: no console.
	Listen string `yaml:"listen" scope:"user"`
	// Hosts are further host:port names the console is reached at (a
	// reverse proxy's name): its Host and Origin checks accept them.
	Hosts []string `yaml:"hosts" scope:"user"`
	// TLSCert and TLSKey are PEM files: with both, the console serves
	// HTTPS with this certificate (and may listen beyond loopback).
	TLSCert string `yaml:"tls_cert" scope:"user"`
	TLSKey  string `yaml:"tls_key" scope:"user"`
}

// Route names a conversation a daemon message goes to: a channel instance
// and, where it has several, the room (a chat room, a mail address).
type Route struct {
	Channel string `yaml:"channel"`
	Room    string `yaml:"room,omitempty"`
}

// UnmarshalYAML decodes a route strictly (unknown keys are errors).
func (r *Route) UnmarshalYAML(n *yaml.Node) error {
	type plain Route
	return strictDecode(n, (*plain)(r), "route")
}

// Webhook is one signed endpoint, POST /hooks/NAME on serve.listen.
type Webhook struct {
	Name string `yaml:"name"`
	// Secret is where the HMAC key comes from: "env:VAR" or "file:PATH"
	// (never the key itself in a file that may be shared).
	Secret string `yaml:"secret"`
	// Signature is the scheme: "github" (X-Hub-Signature-256) or
	// "fluffy" (X-Fluffy-Signature with a timestamp).
	Signature string `yaml:"signature"`
	// MaxBody bounds a request's body; default 1 MiB.
	MaxBody units.Size `yaml:"max_body"`
	// Window is how old a signed timestamp may be; default 5m.
	Window units.Duration `yaml:"window"`
	// Prompt is what the agent is asked to do with a payload (the payload
	// itself reaches it as untrusted data).
	Prompt string `yaml:"prompt"`
	// Report is where the session reports and asks for approval.
	Report Route `yaml:"report"`
	// Line and Column locate the entry in its file (0 when it came from
	// elsewhere), so a check of its values (a secret that does not
	// resolve) can name the line.
	Line   int `yaml:"-" json:"-"`
	Column int `yaml:"-" json:"-"`
}

// UnmarshalYAML decodes a webhook strictly (unknown keys are errors).
func (w *Webhook) UnmarshalYAML(n *yaml.Node) error {
	type plain Webhook
	if err := strictDecode(n, (*plain)(w), "webhook"); err != nil {
		return err
	}
	w.Line, w.Column = n.Line, n.Column
	return nil
}

// Email is the inbound mail channel: an SMTP listener for one address.
type Email struct {
	// Listen is the SMTP address (host:port); empty: no mail channel.
	Listen string `yaml:"listen" scope:"user"`
	// Address is the recipient the daemon accepts mail for.
	Address string `yaml:"address" scope:"user"`
	// AllowedSenders are the envelope or header senders whose mail starts
	// a session; mail from anyone else is dropped and recorded.
	AllowedSenders []string `yaml:"allowed_senders" scope:"user"`
	// MaxSize bounds one message; default 10 MiB.
	MaxSize units.Size `yaml:"max_size" scope:"user"`
	// Prompt is what the agent is asked to do with a mail.
	Prompt string `yaml:"prompt" scope:"user"`
	// Report is where the session reports and asks for approval.
	Report Route `yaml:"report" scope:"user"`
	// AuthServID is the authserv-id of the mail server in front of
	// fluffy: the SPF, DKIM and DMARC results of its
	// Authentication-Results header are recorded with a message. Empty:
	// none are, since a sender can write that header itself
	// (docs/email.md).
	AuthServID string `yaml:"authserv_id" scope:"user"`
}

// Matrix is one Matrix account the daemon logs in as (docs/channels.md).
type Matrix struct {
	// Name is the channel's instance name; default "matrix".
	Name string `yaml:"name"`
	// Homeserver is the client-server API's base URL.
	Homeserver string `yaml:"homeserver"`
	// UserID is the bot's own Matrix user id (@bot:example.org).
	UserID string `yaml:"user_id"`
	// DeviceID is the bot's device; its keys live in the crypto store
	// under the data directory. Empty: the first login picks one and
	// the store keeps it.
	DeviceID string `yaml:"device_id"`
	// Token (a secret reference: secret://age/NAME,
	// secret://bitwarden/ITEM/FIELD, env:VAR, file:PATH), TokenEnv or
	// TokenFile (mode 0600) holds the access token, or with Password set
	// the password to log in with; exactly one is set. The secret itself
	// never appears in a configuration file.
	Token     string `yaml:"token"`
	TokenEnv  string `yaml:"token_env"`
	TokenFile string `yaml:"token_file"`
	// Password says the secret is a password to log in with, not an
	// access token.
	Password bool `yaml:"password"`
	// Principals are the Matrix user ids whose messages start or
	// continue a session; anyone else's are dropped and recorded.
	Principals []string `yaml:"principals"`
	// Rooms are room ids or aliases joined at start; invitations are
	// accepted only from principals.
	Rooms []string `yaml:"rooms"`
	// VerifyTimeout is how long a principal's emoji verification of the
	// bot's device waits for the operator's answer; 0 is the default.
	VerifyTimeout units.Duration `yaml:"verify_timeout"`
	// Line and Column locate the entry in its file (0 when not from a
	// file), for errors found after loading.
	Line   int `yaml:"-" json:"-"`
	Column int `yaml:"-" json:"-"`
}

// UnmarshalYAML decodes an account strictly (unknown keys are errors).
func (m *Matrix) UnmarshalYAML(n *yaml.Node) error {
	type plain Matrix
	if err := strictDecode(n, (*plain)(m), "matrix account"); err != nil {
		return err
	}
	m.Line, m.Column = n.Line, n.Column
	return nil
}

// CronJob is one scheduled job.
type CronJob struct {
	Name string `yaml:"name"`
	// Schedule is a cron expression (five fields); Every an interval.
	// Exactly one is set.
	Schedule string         `yaml:"schedule"`
	Every    units.Duration `yaml:"every"`
	// TimeZone is the IANA zone the schedule is read in; default the
	// daemon's local zone.
	TimeZone string `yaml:"timezone"`
	// Prompt or Skill is what the job runs; exactly one is set.
	Prompt string `yaml:"prompt"`
	Skill  string `yaml:"skill"`
	// Report is where the job reports and asks for approval.
	Report Route `yaml:"report"`
	// MaxCost (US dollars) and MaxTurns bound one run.
	MaxCost  float64 `yaml:"max_cost"`
	MaxTurns int     `yaml:"max_turns"`
	// Missed says what a run missed while the daemon was down does:
	// "skip" (default) or "run_once".
	Missed string `yaml:"missed"`
	// Line and Column locate the entry in its file (0 when not from a
	// file), for errors found after loading (a bad cron expression).
	Line   int `yaml:"-"`
	Column int `yaml:"-"`
}

// UnmarshalYAML decodes a job strictly (unknown keys are errors).
func (j *CronJob) UnmarshalYAML(n *yaml.Node) error {
	type plain CronJob
	if err := strictDecode(n, (*plain)(j), "cron job"); err != nil {
		return err
	}
	j.Line, j.Column = n.Line, n.Column
	return nil
}

// NodeError is a problem inside a value a key holds (an entry of a list
// of mappings), located at its own line and column.
type NodeError struct {
	Line, Column int
	Msg          string
}

func (e *NodeError) Error() string { return e.Msg }

// strictDecode decodes mapping n into v (a pointer to a struct with yaml
// tags), refusing keys the struct does not have, so a typo in a list
// entry is an error at its line rather than a silently ignored field.
func strictDecode(n *yaml.Node, v any, what string) error {
	if n.Kind != yaml.MappingNode {
		return &NodeError{Line: n.Line, Column: n.Column, Msg: fmt.Sprintf("a %s must be a mapping of keys to values, got %s", what, describe(n))}
	}
	t := reflect.TypeOf(v).Elem()
	known := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name != "" && name != "-" {
			known[name] = true
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if !known[k.Value] {
			names := make([]string, 0, len(known))
			for name := range known {
				names = append(names, name)
			}
			sort.Strings(names)
			return &NodeError{Line: k.Line, Column: k.Column, Msg: fmt.Sprintf("unknown key %q in a %s (known: %s)", k.Value, what, strings.Join(names, ", "))}
		}
	}
	// v is of a plain type without UnmarshalYAML, so this does not
	// come back here.
	if err := n.Decode(v); err != nil {
		var ne *NodeError
		if errors.As(err, &ne) {
			return ne // a nested entry's own error, at its own line
		}
		return &NodeError{Line: n.Line, Column: n.Column, Msg: fmt.Sprintf("a %s: %v", what, err)}
	}
	return nil
}
