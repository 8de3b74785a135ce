package skillimage_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/sandbox/docker/skillimage"
	"github.com/fluffy-agent/fluffy/internal/skill"
)

// BenchmarkEnsureUnchanged is what the skill runner pays per run of a
// skill whose image is current: reading and hashing the build context
// (the example weather skill) and looking the tag up on the engine.
func BenchmarkEnsureUnchanged(b *testing.B) {
	cli := engine(b)
	dir, err := filepath.Abs("../../../../examples/skills/weather")
	if err != nil {
		b.Fatal(err)
	}
	s := skill.Skill{Name: "weather", Dir: b.TempDir(), Manifest: skill.Manifest{Image: skill.Image{Dockerfile: "Dockerfile"}}}
	if err := os.CopyFS(s.Dir, os.DirFS(dir)); err != nil {
		b.Fatal(err)
	}
	removeSkillImages(b, cli, s)
	bl := skillimage.New(skillimage.Options{Client: cli, Base: testBase, LockDir: b.TempDir()})
	if _, _, err := bl.Ensure(b.Context(), s); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, built, err := bl.Ensure(b.Context(), s); err != nil || built {
			b.Fatalf("built=%v err=%v", built, err)
		}
	}
}
