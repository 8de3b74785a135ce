package web

import (
	"context"
	"net/http"
)

// Skill states on the skills page.
const (
	// SkillInForce: a skill of the person's or a project's own, as its
	// manifest stands.
	SkillInForce = "in force"
	// SkillInstalled: installed from elsewhere, its folder matching its
	// pin; its runs get what the person granted.
	SkillInstalled = "installed"
	// SkillRefused: left out of every session (a folder that no longer
	// matches its pin, a skill that does not parse, a name taken); Reason
	// says why.
	SkillRefused = "refused"
)

// SkillInfo is one skill as the skills page shows it (`fluffy skill ls`
// and `show`). Description and every name come from the skill's files:
// hostile like model output, escaped like it.
type SkillInfo struct {
	Name, Description string
	// Scope is assistant, user or project; Dir the skill's folder.
	Scope, Dir string
	// Runtime is "native" or "docker" when the manifest says, "" when
	// the session decides; Image is its Dockerfile, "" the default image.
	Runtime, Image string
	State, Reason  string
	// Network and Credentials are what its runs get: the manifest's, or
	// for an installed skill what the person granted of it. A credential
	// is "REF as AS NAME": a reference, never a value.
	Network, Credentials []string
	Entrypoints          []string
	Classification       []string
	// Digest, Source and Signer: an installed skill's pin, where it came
	// from, whose signature verified.
	Digest, Source, Signer string
}

// SkillsView is the skills page: the skills discovered for the
// assistant's sessions, and what was left out with why (Problems, one
// line each: a file and what is wrong with it).
type SkillsView struct {
	Skills   []SkillInfo
	Problems []string
}

// Skills are the skills the daemon's sessions see (docs/skills.md).
type Skills interface {
	Skills(ctx context.Context) (SkillsView, error)
}

func (s *Server) skillsPage(w http.ResponseWriter, r *http.Request) {
	if s.o.Skills == nil {
		s.renderStatus(w, r, http.StatusOK, "Skills", "the skills are not available on this console")
		return
	}
	v, err := s.o.Skills.Skills(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "skills", "Skills", v)
}
