package web

import (
	"context"
	"net/http"
	"slices"
	"strings"
)

// PolicyView is a workspace's effective policy: its files, the effect
// when no rule matches, and every rule in evaluation order with where it
// comes from.
type PolicyView struct {
	Workspace string
	Default   string
	Files     []PolicyFile
	Rules     []PolicyRule
	// Rejected is an edit of the files that does not load (the older
	// rules still decide), "" when none.
	Rejected string
}

// PolicyFile is a policy file and whether it exists.
type PolicyFile struct {
	Name, Path string
	Present    bool
}

// PolicyRule is one effective rule.
type PolicyRule struct {
	ID, Effect, Layer, Source, Description string
}

// PolicyQuery is an operation typed on the page for explain.
type PolicyQuery struct {
	Tool   string
	Action string
	Shell  string
	Paths  []string
	Hosts  []string
}

// PolicyDecision is what the policy decides for a query, with every rule
// that matched.
type PolicyDecision struct {
	Effect, Rule, Layer, Source, Reason, Subject string
	Matched                                      []PolicyMatch
}

// PolicyMatch is a rule that matched.
type PolicyMatch struct {
	Rule, Effect, Layer, Subject, Error string
	Shadowed                            bool
}

// Policy is the live policy. A workspace of "" is the assistant's.
// Explain returns a usage error (shown to the person) for a query it
// cannot build an operation from.
type Policy interface {
	Effective(ctx context.Context, workspace string) (PolicyView, error)
	Explain(ctx context.Context, workspace string, q PolicyQuery) (PolicyDecision, error)
}

// policyView is the policy page.
type policyView struct {
	View       PolicyView
	Workspaces []string
	Query      PolicyQuery
	Asked      bool
	Decision   *PolicyDecision
	Error      string
}

// policyPage shows a workspace's effective policy and, with a tool,
// explains one operation (a read: GET).
func (s *Server) policyPage(w http.ResponseWriter, r *http.Request) {
	if s.o.Policy == nil {
		s.renderStatus(w, r, http.StatusOK, "Policy", "the policy is not available on this console")
		return
	}
	q := r.URL.Query()
	ws := q.Get("workspace")
	if id := q.Get("session"); id != "" && ws == "" {
		info, err := s.o.Sessions.Get(r.Context(), id)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		ws = info.Workspace
	}
	v := policyView{Query: PolicyQuery{Tool: q.Get("tool"), Action: q.Get("action"), Shell: q.Get("shell"),
		Paths: nonEmpty(q["path"]), Hosts: nonEmpty(q["host"])}}
	if all, err := s.o.Sessions.List(r.Context()); err == nil {
		for _, x := range all {
			if !slices.Contains(v.Workspaces, x.Workspace) {
				v.Workspaces = append(v.Workspaces, x.Workspace)
			}
		}
	}
	// Only the workspaces sessions work on: a path typed here would
	// otherwise have the daemon read and watch any directory's policy.
	if ws != "" && !slices.Contains(v.Workspaces, ws) {
		s.renderStatus(w, r, http.StatusNotFound, "Policy", "no session works on "+ws)
		return
	}
	view, err := s.o.Policy.Effective(r.Context(), ws)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v.View = view
	if v.Query.Tool != "" {
		v.Asked = true
		d, err := s.o.Policy.Explain(r.Context(), ws, v.Query)
		if err != nil {
			v.Error = err.Error()
		} else {
			v.Decision = &d
		}
	}
	s.render(w, r, http.StatusOK, "policy", "Policy", v)
}

func nonEmpty(v []string) []string {
	var out []string
	for _, s := range v {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
