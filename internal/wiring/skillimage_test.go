package wiring

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/sandbox/docker/skillimage"
	"github.com/fluffy-agent/fluffy/internal/sandboxrun"
)

// writeSkill writes a skill folder under root.
func writeSkill(t *testing.T, root, folder string, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(root, folder)
	for n, data := range files {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// The user's, the assistant's and the project's skills are found as a
// session discovers them; a folder without SKILL.md is none, a broken
// manifest is reported.
func TestImageSkills(t *testing.T) {
	dir := t.TempDir()
	proj := filepath.Join(dir, "proj")
	os.MkdirAll(filepath.Join(proj, ".git"), 0o755)
	u := testUser(t, dir, proj)
	writeSkill(t, filepath.Join(dir, "config", "fluffy", "skills"), "bee", map[string]string{
		"SKILL.md":   "---\nname: bee\ndescription: x\n---\nbody",
		"skill.yaml": "image:\n  dockerfile: Dockerfile\n", "Dockerfile": "FROM fluffy-base\n"})
	writeSkill(t, filepath.Join(dir, "config", "fluffy", "skills"), "ant", map[string]string{
		"SKILL.md": "---\nname: ant\ndescription: x\n---\n", "carapace.yaml": "image: {dockerfile: build/Dockerfile}\n", "build/Dockerfile": "FROM fluffy-base\n"})
	writeSkill(t, filepath.Join(dir, "config", "fluffy", "skills"), "notes", map[string]string{"README": "not a skill"})
	writeSkill(t, filepath.Join(proj, ".fluffy", "skills"), "proj", map[string]string{
		"SKILL.md": "---\nname: proj\ndescription: x\n---\n", "skill.yaml": "image: [\n"})
	got, errs := imageSkills(u)
	var names []string
	for _, s := range got {
		names = append(names, string(s.Scope)+":"+s.Name+":"+s.Manifest.Image.Dockerfile)
	}
	if strings.Join(names, " ") != "user:ant:build/Dockerfile user:bee:Dockerfile" {
		t.Errorf("skills = %v", names)
	}
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), filepath.Join("proj", "skill.yaml")) {
		t.Errorf("errors = %v, want the project skill's manifest", errs)
	}
	if _, err := loadSkillImage(filepath.Join(dir, "nowhere")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a folder that is gone: %v", err)
	}
	if _, err := loadSkillImage(filepath.Join(dir, "config", "fluffy", "skills", "notes")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a folder without SKILL.md: %v", err)
	}
	if s, err := loadSkillImage(filepath.Join(dir, "config", "fluffy", "skills", "bee")); err != nil || s.Manifest.Image.Dockerfile != "Dockerfile" {
		t.Errorf("bee: %+v %v", s, err)
	}
}

// 'fluffy skill build' through the core builds a user skill's image, and
// the daemon start's collection removes the one a change superseded.
func TestSkillImagesBuildAndCollect(t *testing.T) {
	dockerEngine(t)
	dir := t.TempDir()
	u := testUser(t, dir, dir)
	cfg := filepath.Join(dir, "config", "fluffy")
	os.MkdirAll(cfg, 0o755)
	os.WriteFile(filepath.Join(cfg, "config.yaml"), []byte("sandbox:\n  image: "+wiringTestImage+"\n"), 0o644)
	sd := writeSkill(t, filepath.Join(cfg, "skills"), "wiring-skill-test", map[string]string{
		"SKILL.md":         "---\nname: wiring-skill-test\ndescription: x\n---\n",
		"skill.yaml":       "image:\n  dockerfile: Dockerfile\n",
		"Dockerfile":       "FROM fluffy-base\nCOPY requirements.txt /req\n",
		"requirements.txt": "a\n"})
	t.Cleanup(func() {
		exec.Command("sh", "-c", "docker images -q --filter label="+skillimage.LabelDir+"="+sd+" | xargs -r docker rmi -f").Run()
	})
	build := func() sandboxrun.SkillImage {
		t.Helper()
		rep, err := (&Core{}).BuildSkillImages(t.Context(), u, sandboxrun.SkillBuild{Runtime: "docker", Progress: io.Discard})
		if err != nil || len(rep.Images) != 1 {
			t.Fatalf("build: %+v %v", rep, err)
		}
		return rep.Images[0]
	}
	first := build()
	if !first.Built || !strings.HasPrefix(first.Ref, "fluffy-skill/wiring-skill-test:") {
		t.Fatalf("first build: %+v", first)
	}
	if again := build(); again.Built || again.Ref != first.Ref {
		t.Fatalf("unchanged: %+v", again)
	}
	os.WriteFile(filepath.Join(sd, "requirements.txt"), []byte("b\n"), 0o644)
	second := build()
	if !second.Built || second.Ref == first.Ref {
		t.Fatalf("after a change: %+v", second)
	}
	var log strings.Builder
	startSkillImageGC(t.Context(), u, slog.New(slog.NewTextHandler(&log, nil)))()
	if !strings.Contains(log.String(), "stale skill image removed") || !strings.Contains(log.String(), first.Ref) {
		t.Errorf("the daemon's collection logged:\n%s", log.String())
	}
	if exec.Command("docker", "image", "inspect", first.Ref).Run() == nil {
		t.Errorf("%s is still there", first.Ref)
	}
	if exec.Command("docker", "image", "inspect", second.Ref).Run() != nil {
		t.Errorf("the current image %s went", second.Ref)
	}
}
