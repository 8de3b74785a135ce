package web

import (
	"context"
	"net/http"
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
}

// Secrets list the configured backends and declared uses. An
// implementation never resolves a reference for this view.
type Secrets interface {
	Secrets(ctx context.Context) (SecretsView, error)
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
	s.render(w, r, http.StatusOK, "secrets", "Credentials", v)
}
