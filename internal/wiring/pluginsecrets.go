package wiring

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
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
	return pluginsWantSecrets(ctx, &plugin.DB{SQL: db})
}

// pluginsWantSecrets reports whether a plugin the runtime would start
// declares credentials.
func pluginsWantSecrets(ctx context.Context, store plugin.Store) bool {
	recs, err := store.List(ctx)
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

// lateSecrets is the broker of a kernel that started without one (no
// declared use, no startable plugin with credentials then), built the
// first time a session's tools find a plugin enabled since that
// declares credentials: so such a plugin needs no restart of the
// kernel. Once built it serves every later session as one built at the
// start would; a build that fails is logged and tried again at the next
// session (the plugin fails meanwhile: no secret broker).
type lateSecrets struct {
	build func() (*kernelSecrets, error)

	mu sync.Mutex // guards k
	k  *kernelSecrets
}

// lateSecrets returns the kernel's late broker, building it when a
// startable plugin declares credentials; nil when none does (or there
// is no late broker: the kernel built its own at its start).
func (p *sessionPlugins) lateSecrets(ctx context.Context) *kernelSecrets {
	if p == nil || p.late == nil || p.store == nil {
		return nil
	}
	l := p.late
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.k != nil || !pluginsWantSecrets(ctx, p.store) {
		return l.k
	}
	k, err := l.build()
	if err != nil {
		p.log.Error("the secret broker for plugins' credentials could not be built", "err", err)
		return nil
	}
	p.log.Info("the secret broker was built for a plugin enabled since the kernel's start")
	l.k = k
	return k
}

// built is the late broker when it was built, else nil.
func (l *lateSecrets) built() *kernelSecrets {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.k
}

// pluginKernelSecrets is the broker of a kernel whose person declared
// no uses: built now when a startable plugin declares credentials; else
// none, and p builds one later when a plugin enabled since does
// (lateSecrets).
func pluginKernelSecrets(ctx context.Context, u *userenv.Env, log *slog.Logger, db *sql.DB, p *sessionPlugins) (*kernelSecrets, error) {
	if pluginSecretsWanted(ctx, db) {
		return newPluginKernelSecrets(u, log)
	}
	p.late = &lateSecrets{build: func() (*kernelSecrets, error) { return newPluginKernelSecrets(u, log) }}
	return nil, nil
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
