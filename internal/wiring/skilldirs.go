package wiring

import (
	"errors"

	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/skill"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// userSkillRoots are the folders u's skills are found in, widest scope
// first: the assistant workspace's skills/, the person's
// ~/.config/fluffy/skills/, the skills/ of the repository u works in
// (.fluffy/skills/).
func userSkillRoots(u *userenv.Env) []skill.Root {
	return SkillRoots(u, config.ProjectRoot(u.Cwd))
}

// imageSkills are u's skills as a session discovers them (skill.Discover:
// the same scope rules, a skill with a problem left out whole), sorted by
// name, and the problems discovery reported.
func imageSkills(u *userenv.Env) ([]skill.Skill, []error) {
	set := skill.Discover(userSkillRoots(u))
	var errs []error
	for _, p := range set.Problems {
		errs = append(errs, errors.New(p.String()))
	}
	return set.Skills, errs
}

// loadSkillImage reads the skill in dir as it is now (skill.Load), for
// the collection of images: a folder that is gone or holds no SKILL.md
// is an error wrapping fs.ErrNotExist, no skill any more.
func loadSkillImage(dir string) (skill.Skill, error) {
	return skill.Load(dir, "")
}
