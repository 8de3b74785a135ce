package userenv

import (
	"path/filepath"
	"testing"
)

// The installed skills' folder is protected from the agent, also when
// --config names a configuration file elsewhere; their records are in
// the data directory, which is.
func TestInstalledSkillsProtected(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{Cwd: root, Self: "/usr/bin/fluffy", UserConfig: filepath.Join(root, "elsewhere", "config.yaml"),
		Environ: []string{"HOME=" + root, "XDG_CONFIG_HOME=" + root + "/config", "FLUFFY_HOME=" + root + "/data"}}
	in, err := e.InstalledSkills()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "config", "fluffy", "skills"); in.SkillsDir != want {
		t.Errorf("skills dir %s, want %s", in.SkillsDir, want)
	}
	prot, err := e.Protected(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(in.SkillsDir, "weather", "skill.yaml"), filepath.Join(in.StateDir, "installed", "weather.json")} {
		if !prot.Covers(p) {
			t.Errorf("%s is not protected: %v", p, prot.Paths)
		}
	}
}
