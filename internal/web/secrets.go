package web

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// SecretBackend is a secret backend and its state as the daemon sees it
// (unlocked, locked, unreachable), with a detail that is never a value.
type SecretBackend struct {
	Name, State, Detail string
}

// SecretUse is a secret the configuration names and what uses it: a
// declared use (how it enters a sandbox, its bound hosts, the commands
// that get it) or a channel's key. It carries names only, never a value.
type SecretUse struct {
	// Ref is the reference (secret://BACKEND/PATH, env:VAR, file:PATH).
	Ref, Backend string
	// As is how it enters: env, file, stdin, proxy; "" for a channel's
	// key (By says which).
	As, Name  string
	Bind      []string
	Commands  []string
	Templates []string
	By        string
}

// SecretsView is the credentials page: the backends and the uses.
// Error is a declaration that does not check, "" when none.
type SecretsView struct {
	Backends []SecretBackend
	Uses     []SecretUse
	Error    string
	// Checked is when the backends' states were asked; the page shows
	// their age.
	Checked time.Time
}

// Secrets list the configured backends with their states, and the
// declared uses. Backends asks each backend (a `bw status` for
// Bitwarden): the console keeps its answer for SecretStateTTL. Secrets
// fills Uses and Error only. An implementation never resolves a
// reference for this view.
type Secrets interface {
	Backends(ctx context.Context) ([]SecretBackend, error)
	Secrets(ctx context.Context) (SecretsView, error)
}

// SecretStateTTL is how long the credentials page shows the backends'
// states it asked for before it asks again: asking may run a program per
// backend, and a page is viewed often. The page's Refresh asks at once.
const SecretStateTTL = 30 * time.Second

// secretStates keep the backends' newest states and when they were
// asked.
type secretStates struct {
	mu       sync.Mutex // guards the fields below; held while asking, so one view asks at a time
	backends []SecretBackend
	at       time.Time
}

// get returns the kept states while younger than SecretStateTTL, else
// asks the backends.
func (c *secretStates) get(ctx context.Context, s Secrets, now time.Time) ([]SecretBackend, time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && now.Sub(c.at) < SecretStateTTL && now.Sub(c.at) >= 0 {
		return c.backends, c.at, nil
	}
	bs, err := s.Backends(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	c.backends, c.at = bs, now
	return bs, now, nil
}

func (c *secretStates) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.backends, c.at = nil, time.Time{}
}

// secretsView is what the template gets: the view and the states' age.
type secretsView struct {
	SecretsView
	Age string
}

func (s *Server) secretsPage(w http.ResponseWriter, r *http.Request) {
	if s.o.Secrets == nil {
		s.renderStatus(w, r, http.StatusOK, "Credentials", "the credentials are not available on this console")
		return
	}
	v, err := s.o.Secrets.Secrets(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	now := s.o.Now()
	if v.Backends, v.Checked, err = s.secrets.get(r.Context(), s.o.Secrets, now); err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "secrets", "Credentials", secretsView{SecretsView: v, Age: now.Sub(v.Checked).Truncate(time.Second).String()})
}

// refreshSecrets forgets the kept states: the next view asks the
// backends.
func (s *Server) refreshSecrets(w http.ResponseWriter, r *http.Request) {
	s.secrets.forget()
	http.Redirect(w, r, "/secrets", http.StatusSeeOther)
}
