package skill

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Root is a folder of skills (each skill a folder of its own) and the
// scope its skills have.
type Root struct {
	Dir   string
	Scope Scope
}

// Roots are the folders a session's skills come from, widest scope
// first: <assistant workspace>/skills/, <config dir>/skills/ (the
// person's, ~/.config/fluffy/skills/), and <repository>/.fluffy/skills/.
// An empty argument leaves its root out.
func Roots(assistantWS, configDir, repo string) []Root {
	var out []Root
	if assistantWS != "" {
		out = append(out, Root{Dir: filepath.Join(assistantWS, "skills"), Scope: ScopeAssistant})
	}
	if configDir != "" {
		out = append(out, Root{Dir: filepath.Join(configDir, "skills"), Scope: ScopeUser})
	}
	if repo != "" {
		out = append(out, Root{Dir: filepath.Join(repo, ".fluffy", "skills"), Scope: ScopeProject})
	}
	return out
}

// Set is what Discover found: the skills in force, by name, and what it
// left out and why.
type Set struct {
	// Skills are sorted by name; each name once.
	Skills []Skill
	// Problems are the skills left out (invalid, or refused by the
	// scope rules) and the names two scopes gave (the one left out is
	// named). A skill with a problem is never partly used.
	Problems []Problem
}

// Lookup returns the skill named name.
func (s Set) Lookup(name string) (Skill, bool) {
	i, ok := slices.BinarySearchFunc(s.Skills, name, func(k Skill, n string) int { return strings.Compare(k.Name, n) })
	if !ok {
		return Skill{}, false
	}
	return s.Skills[i], true
}

// maxSkills bounds the folders read per root.
const maxSkills = 256

// Discover reads every skill under roots (widest scope first, as Roots
// gives them). A folder without SKILL.md is not a skill and is passed
// over silently; one whose files do not parse is left out and reported.
//
// The scope rules, as with policy: a narrower scope can only tighten.
//   - A skill of a narrower scope with the name of one already found
//     replaces it only when it asks for no more (Narrows): its
//     credentials and network a subset of the wider one's, its
//     classification a superset. Otherwise it is refused and the wider
//     one stays. Either way the collision is reported.
//   - A project skill (a repository's .fluffy/skills/) with a name of
//     its own may declare no credentials and no network: a repository
//     cannot grant itself secrets or hosts, only a person's scope can.
func Discover(roots []Root) Set {
	byName := map[string]Skill{}
	var set Set
	for _, r := range roots {
		ents, err := os.ReadDir(r.Dir)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				set.Problems = append(set.Problems, Problem{File: r.Dir, Msg: err.Error()})
			}
			continue
		}
		if len(ents) > maxSkills {
			set.Problems = append(set.Problems, Problem{File: r.Dir, Msg: fmt.Sprintf("more than %d entries: only the first %d are read", maxSkills, maxSkills)})
			ents = ents[:maxSkills]
		}
		for _, e := range ents {
			dir := filepath.Join(r.Dir, e.Name())
			if strings.HasPrefix(e.Name(), ".") || !isDir(dir) {
				continue
			}
			if _, err := os.Lstat(filepath.Join(dir, SkillFile)); errors.Is(err, fs.ErrNotExist) {
				continue
			}
			s, err := Load(dir, r.Scope)
			if err != nil {
				var pe *ParseError
				if errors.As(err, &pe) {
					set.Problems = append(set.Problems, pe.Problems...)
				} else {
					set.Problems = append(set.Problems, Problem{File: dir, Msg: err.Error()})
				}
				continue
			}
			wider, seen := byName[s.Name]
			switch {
			case seen:
				if why := Narrows(wider.Manifest, s.Manifest); why != "" {
					set.Problems = append(set.Problems, Problem{File: filepath.Join(s.Dir, SkillFile), Field: "name",
						Msg: fmt.Sprintf("refused: %s skill %q would loosen the %s skill of that name (%s): %s", s.Scope, s.Name, wider.Scope, wider.Dir, why)})
					continue
				}
				set.Problems = append(set.Problems, Problem{File: filepath.Join(s.Dir, SkillFile), Field: "name",
					Msg: fmt.Sprintf("%s skill %q replaces the %s skill of that name (%s), which it tightens", s.Scope, s.Name, wider.Scope, wider.Dir)})
			case s.Scope == ScopeProject && (len(s.Manifest.Credentials) > 0 || len(s.Manifest.Network) > 0):
				set.Problems = append(set.Problems, Problem{File: filepath.Join(s.Dir, SkillFile),
					Msg: fmt.Sprintf("refused: project skill %q declares credentials or network; a repository's skill gets neither (put it in ~/.config/fluffy/skills to grant them)", s.Name)})
				continue
			}
			byName[s.Name] = s
		}
	}
	for _, s := range byName {
		set.Skills = append(set.Skills, s)
	}
	sort.Slice(set.Skills, func(i, j int) bool { return set.Skills[i].Name < set.Skills[j].Name })
	return set
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// Narrows says why narrower asks for more than wider, "" when it asks
// for no more: every credential and host of narrower is wider's, every
// classification of wider is narrower's, its sandbox runtime and
// template are wider's (or unset), and its limits are no larger.
func Narrows(wider, narrower Manifest) string {
	var why []string
	for _, c := range narrower.Credentials {
		if !slices.ContainsFunc(wider.Credentials, func(w Credential) bool { return sameCredential(w, c) }) {
			why = append(why, fmt.Sprintf("adds the credential %s", c.Ref))
		}
	}
	for _, h := range narrower.Network {
		if !slices.Contains(wider.Network, h) {
			why = append(why, fmt.Sprintf("adds the host %s", h))
		}
	}
	for _, c := range wider.Classification {
		if !slices.Contains(narrower.Classification, c) {
			why = append(why, fmt.Sprintf("drops the classification %s", c))
		}
	}
	ws, ns := wider.Sandbox, narrower.Sandbox
	if ns.Template != "" && ns.Template != ws.Template {
		why = append(why, fmt.Sprintf("changes the sandbox template to %s", ns.Template))
	}
	if ns.Runtime != "" && ns.Runtime != ws.Runtime {
		why = append(why, fmt.Sprintf("changes the sandbox runtime to %s", ns.Runtime))
	}
	if larger(int64(ws.Memory), int64(ns.Memory)) || larger(int64(ws.Timeout), int64(ns.Timeout)) || larger(int64(ws.PIDs), int64(ns.PIDs)) {
		why = append(why, "raises a sandbox limit")
	}
	return strings.Join(why, "; ")
}

// larger reports whether limit n may be looser than w. 0 is the
// router's default, which this package does not know: a narrower skill
// may lower a limit the wider one sets, not set one the wider leaves.
func larger(w, n int64) bool {
	return w > 0 && (n == 0 || n > w) || w == 0 && n != 0
}

func sameCredential(a, b Credential) bool {
	return a.Ref == b.Ref && a.As == b.As && a.Name == b.Name && slices.Equal(a.Bind, b.Bind)
}

// HostAllowed reports whether host:port is one a manifest's network
// names: an entry without a port allows every port of its host, *.suffix
// allows the suffix's subdomains (not the suffix itself). Host names
// compare without case.
func HostAllowed(network []string, host string, port int) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, e := range network {
		name, p, hasPort := strings.Cut(e, ":")
		if hasPort && p != fmt.Sprint(port) {
			continue
		}
		if suffix, ok := strings.CutPrefix(name, "*."); ok {
			if strings.HasSuffix(host, "."+suffix) {
				return true
			}
			continue
		}
		if host == name {
			return true
		}
	}
	return false
}
