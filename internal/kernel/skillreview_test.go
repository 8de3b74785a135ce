package kernel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/changeset"
)

func TestSkillReview(t *testing.T) {
	ws := t.TempDir()
	dir := filepath.Join(ws, "skills", "weather")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: weather\n---\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "skill.yaml"), []byte("network: [a.example]\n"), 0o644)
	// A link out of the workspace is not followed on the workspace side.
	os.Symlink("/etc", filepath.Join(ws, "skills", "etc"))
	cs, err := changeset.Begin(t.Context(), ws, filepath.Join(t.TempDir(), "cs"))
	if err != nil {
		t.Fatal(err)
	}
	review := func() string {
		ch, err := cs.Changes(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return SkillReview(cs, ch)
	}
	if s := review(); s != "" {
		t.Errorf("no changes: %q", s)
	}
	if err := cs.WriteFile("skills/weather/skill.yaml", []byte("network: [a.example, b.example]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if s := review(); !strings.Contains(s, "WIDENS skill weather:\n  + host-added: b.example\n") {
		t.Errorf("review %q", s)
	}
	// carapace.yaml is read only when skill.yaml is absent: adding one
	// beside skill.yaml changes nothing in effect.
	cs.WriteFile("skills/weather/skill.yaml", []byte("network: [a.example]\n"), 0o644)
	cs.WriteFile("skills/weather/carapace.yaml", []byte("network: [c.example]\n"), 0o644)
	if s := review(); s != "" {
		t.Errorf("a shadowed carapace.yaml: %q", s)
	}
}
