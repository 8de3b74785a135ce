package userenv

import (
	"path/filepath"

	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/skill"
)

// UserSkillsDir is where the person's own and installed skills live:
// $XDG_CONFIG_HOME/fluffy/skills (default ~/.config/fluffy/skills).
func (e *Env) UserSkillsDir() string {
	return filepath.Join(filepath.Dir(config.UserFile(e.Getenv)), "skills")
}

// InstalledSkills is the record of the skills installed from elsewhere:
// folders under UserSkillsDir, pins and grants under <data dir>/skills,
// signatures verified against $XDG_CONFIG_HOME/fluffy/allowed_signers
// (docs/skills.md).
func (e *Env) InstalledSkills() (*skill.Installed, error) {
	d, err := e.DataDir()
	if err != nil {
		return nil, err
	}
	return &skill.Installed{
		SkillsDir:      e.UserSkillsDir(),
		StateDir:       d.Path("skills"),
		AllowedSigners: filepath.Join(filepath.Dir(config.UserFile(e.Getenv)), "allowed_signers"),
	}, nil
}
