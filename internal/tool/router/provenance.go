package router

import (
	"context"
	"fmt"

	"github.com/fluffy-agent/fluffy/internal/operation"
)

// session is the session as the gates see it at this call: Options.Session
// with the taint as it stands now.
func (r *Router) session() operation.Session {
	s := r.o.Session
	if source, ok := r.untrusted(); ok {
		s.Untrusted, s.UntrustedSource = true, source
	}
	return s
}

// untrusted reports whether the session has read untrusted data, and what
// first made it so.
func (r *Router) untrusted() (string, bool) {
	if r.o.Session.Untrusted {
		return r.o.Session.UntrustedSource, true
	}
	if r.o.Provenance != nil {
		return r.o.Provenance.Untrusted()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.taint, r.taint != ""
}

// markUntrusted records that the session read the result of cl, a call of
// a tool whose output is untrusted (once: a session already untrusted
// stays as it is).
func (r *Router) markUntrusted(ctx context.Context, cl *call) error {
	if _, ok := r.untrusted(); ok {
		return nil
	}
	if r.o.Provenance != nil {
		if err := r.o.Provenance.MarkUntrusted(ctx, cl.name, cl.id); err != nil {
			return fmt.Errorf("%w: %w", ErrAudit, err)
		}
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.taint == "" {
		r.taint = "tool " + cl.name
	}
	return nil
}

// untrustedSuffix is what an approval request adds in an untrusted
// session: that the session read untrusted data, and from where.
func untrustedSuffix(source string) string {
	if source == "" {
		return " (this session has read untrusted data)"
	}
	return fmt.Sprintf(" (this session has read untrusted data: %s)", source)
}
