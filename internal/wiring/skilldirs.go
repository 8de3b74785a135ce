package wiring

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"go.yaml.in/yaml/v3"

	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/skill"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// skillRoots are the folders u's skills are found in, widest scope
// first: the assistant workspace's skills/, the user's
// ~/.config/fluffy/skills/, the project's .fluffy/skills/.
func skillRoots(u *userenv.Env) map[skill.Scope]string {
	roots := map[skill.Scope]string{
		skill.ScopeUser: filepath.Join(filepath.Dir(config.UserFile(u.Getenv)), "skills"),
	}
	if ws, err := AssistantWorkspace(u); err == nil && ws != "" {
		roots[skill.ScopeAssistant] = filepath.Join(ws, "skills")
	}
	if root := config.ProjectRoot(u.Cwd); root != "" {
		roots[skill.ScopeProject] = filepath.Join(root, ".fluffy", "skills")
	}
	return roots
}

// imageSkills returns the skills of u's roots as far as their images
// need them (name, folder, manifest), sorted by scope then name, and the
// folders that could not be read.
func imageSkills(u *userenv.Env) ([]skill.Skill, []error) {
	var out []skill.Skill
	var errs []error
	roots := skillRoots(u)
	for _, sc := range []skill.Scope{skill.ScopeAssistant, skill.ScopeUser, skill.ScopeProject} {
		root, ok := roots[sc]
		if !ok {
			continue
		}
		ents, err := os.ReadDir(root)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		var found []skill.Skill
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			s, err := loadSkillImage(filepath.Join(root, e.Name()))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			s.Scope = sc
			found = append(found, s)
		}
		sort.Slice(found, func(i, j int) bool { return found[i].Name < found[j].Name })
		out = append(out, found...)
	}
	return out, errs
}

// loadSkillImage reads what a skill's image depends on from its folder:
// SKILL.md's front-matter name and the manifest (skill.yaml, else
// carapace.yaml). A folder without SKILL.md is an error wrapping
// fs.ErrNotExist: no skill (any more).
func loadSkillImage(dir string) (skill.Skill, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return skill.Skill{}, err
	}
	md, err := os.ReadFile(filepath.Join(real, "SKILL.md"))
	if err != nil {
		return skill.Skill{}, err
	}
	var front struct {
		Name        string `yaml:"name"`
		Description string `yaml:"description"`
	}
	if rest, ok := bytes.CutPrefix(bytes.ReplaceAll(md, []byte("\r\n"), []byte("\n")), []byte("---\n")); ok {
		if fm, _, ok := bytes.Cut(rest, []byte("\n---")); ok {
			if err := yaml.Unmarshal(fm, &front); err != nil {
				return skill.Skill{}, fmt.Errorf("%s: front matter: %w", filepath.Join(dir, "SKILL.md"), err)
			}
		}
	}
	if front.Name == "" {
		return skill.Skill{}, fmt.Errorf("%s: the front matter names no skill", filepath.Join(dir, "SKILL.md"))
	}
	s := skill.Skill{Name: front.Name, Description: front.Description, Dir: real}
	for _, f := range []string{"skill.yaml", "carapace.yaml"} {
		b, err := os.ReadFile(filepath.Join(real, f))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return skill.Skill{}, err
		}
		if err := yaml.Unmarshal(b, &s.Manifest); err != nil {
			return skill.Skill{}, fmt.Errorf("%s: %w", filepath.Join(dir, f), err)
		}
		break
	}
	return s, nil
}
