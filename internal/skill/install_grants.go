package skill

import (
	"errors"
	"path/filepath"
)

// ApplyGrants is what the runner hands a session of the skills it found:
// each installed skill (user scope, in its installed folder, with a
// record) has its manifest's network and credentials cut to what the
// person granted (Granted); an installed skill that fails its pin check
// is left out, its error in refused (errors.Is ErrTampered). Skills of
// the person's own (no record) pass unchanged. skills is not modified.
func (i *Installed) ApplyGrants(skills []Skill) (out []Skill, refused []error) {
	for _, s := range skills {
		if s.Scope != ScopeUser || !i.isInstalledDir(s) {
			out = append(out, s)
			continue
		}
		hosts, creds, err := i.Granted(s.Name)
		switch {
		case errors.Is(err, ErrNotInstalled):
			out = append(out, s)
		case err != nil:
			refused = append(refused, err)
		default:
			s.Manifest.Network, s.Manifest.Credentials = hosts, creds
			out = append(out, s)
		}
	}
	return out, refused
}

// isInstalledDir: s lives in the folder an install of its name makes.
func (i *Installed) isInstalledDir(s Skill) bool {
	if !installNameRE.MatchString(s.Name) {
		return false
	}
	want, err := filepath.EvalSymlinks(i.Dir(s.Name))
	if err != nil {
		return false
	}
	got, err := filepath.EvalSymlinks(s.Dir)
	return err == nil && got == want
}
