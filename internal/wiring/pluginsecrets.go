package wiring

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/fluffy-agent/fluffy/internal/plugin"
	"github.com/fluffy-agent/fluffy/internal/plugin/host"
	"github.com/fluffy-agent/fluffy/internal/secret"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// pluginSecretsWanted reports whether a plugin kept in fluffy.db
// declares credentials: the kernel then builds the broker even when the
// person declared no uses of their own.
func pluginSecretsWanted(ctx context.Context, db *sql.DB) bool {
	recs, err := (&plugin.DB{SQL: db}).List(ctx)
	if err != nil {
		return false
	}
	for _, r := range recs {
		if len(r.Manifest.Credentials) > 0 && host.Startable(r.State) {
			return true
		}
	}
	return false
}

// newPluginKernelSecrets is the broker for plugins' credentials alone
// (no declared uses of commands).
func newPluginKernelSecrets(u *userenv.Env, log *slog.Logger) (*kernelSecrets, error) {
	b, err := u.SecretBroker(nil)
	if err != nil {
		return nil, err
	}
	return &kernelSecrets{broker: b, log: log, tmp: secretsTmpfs()}, nil
}

// pluginUse is a manifest's credential as the broker's declared use: the
// program is the plugin's server, named plugin:NAME. A proxy use's swap
// goes to the server's egress proxy (pluginEgress), as a command's goes
// to its own.
func pluginUse(name string, c plugin.Credential) (secret.Use, error) {
	if c.As == string(secret.AsStdin) {
		// A server's standard input is its MCP stream.
		return secret.Use{}, fmt.Errorf("%w: %s: as stdin is not offered to a plugin: its standard input is the MCP stream (env, file or proxy)", ErrSecretRefused, c.Ref)
	}
	u, err := secret.NewUse(c.Ref, c.As, c.Name, c.Bind, []string{"plugin:" + name}, nil)
	u.TLS = c.TLS
	return u, err
}

// credentialError names the credential c in err, and the rule that
// refused it when the policy did: the plugin's state shows it.
func credentialError(c plugin.Credential, err error) error {
	what := fmt.Sprintf("credential %s (as %s %s)", c.Ref, c.As, c.Name)
	if r, ok := errors.AsType[*RefusedUse](err); ok && r.Rule != "" {
		return fmt.Errorf("%s refused by rule %s: %w", what, r.Rule, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// plugin hands plugin name's server its credentials for one start: each
// put to the policy's secret operation (approve asks the person),
// recorded as secret.use with the call plugin:NAME, then fetched; one
// refused refuses them all (the server does not start). A proxy
// credential's swap waits for the server's egress proxy, which takes it
// (proxySwaps, call plugin:NAME). Close zeroes them once the server and
// its proxy have ended.
func (s *sessionSecrets) plugin(ctx context.Context, name string, creds []plugin.Credential) (host.Secrets, error) {
	call := "plugin:" + name
	uses := make([]secret.Use, 0, len(creds))
	for _, c := range creds {
		u, err := pluginUse(name, c)
		if err != nil {
			return host.Secrets{}, credentialError(c, err)
		}
		uses = append(uses, u)
	}
	rules := make([]string, len(uses))
	for i, u := range uses {
		rule, err := s.decide(ctx, call, u)
		if err != nil {
			return host.Secrets{}, credentialError(creds[i], err)
		}
		rules[i] = rule
	}
	out, err := s.handOut(ctx, call, uses, rules, time.Now())
	if err != nil {
		refs := make([]string, len(creds))
		for i, c := range creds {
			refs[i] = c.Ref
		}
		return host.Secrets{}, fmt.Errorf("credentials %s: %w", strings.Join(refs, ", "), err)
	}
	if len(out.Stdin) > 0 {
		out.Close()
		return host.Secrets{}, errors.New("a stdin use for a plugin")
	}
	return host.Secrets{Env: out.Env, Mounts: out.Mounts, Scratch: out.Scratch, Redact: s.redact, Close: out.Close}, nil
}
