package wiring

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
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
// program is the plugin's server, named plugin:NAME.
func pluginUse(name string, c plugin.Credential) (secret.Use, error) {
	if c.As == string(secret.AsStdin) || c.As == string(secret.AsProxy) {
		// A server's stdin is its MCP stream, and its egress proxy
		// swaps nothing.
		return secret.Use{}, fmt.Errorf("%w: %s: as %s is not offered to a plugin (env or file)", ErrSecretRefused, c.Ref, c.As)
	}
	return secret.NewUse(c.Ref, c.As, c.Name, c.Bind, []string{"plugin:" + name}, nil)
}

// plugin hands plugin name's server its credentials for one start: each
// put to the policy's secret operation (approve asks the person),
// recorded as secret.use with the call plugin:NAME, then fetched; one
// refused refuses them all (the server does not start). Close zeroes
// them once the server has ended.
func (s *sessionSecrets) plugin(ctx context.Context, name string, creds []plugin.Credential) (host.Secrets, error) {
	call := "plugin:" + name
	uses := make([]secret.Use, 0, len(creds))
	for _, c := range creds {
		u, err := pluginUse(name, c)
		if err != nil {
			return host.Secrets{}, err
		}
		uses = append(uses, u)
	}
	rules := make([]string, len(uses))
	for i, u := range uses {
		rule, err := s.decide(ctx, call, u)
		if err != nil {
			return host.Secrets{}, err
		}
		rules[i] = rule
	}
	out, err := s.handOut(ctx, call, uses, rules, time.Now())
	if err != nil {
		return host.Secrets{}, err
	}
	if len(out.Stdin) > 0 {
		out.Close()
		return host.Secrets{}, errors.New("a stdin use for a plugin")
	}
	return host.Secrets{Env: out.Env, Mounts: out.Mounts, Scratch: out.Scratch, Redact: s.redact, Close: out.Close}, nil
}
