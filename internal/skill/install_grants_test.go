package skill

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestApplyGrants(t *testing.T) {
	in := installWeather(t)
	m, _, err := in.Asks("weather")
	if err != nil {
		t.Fatal(err)
	}
	installed := Skill{Name: "weather", Scope: ScopeUser, Dir: in.Dir("weather"), Manifest: m}
	own := Skill{Name: "notes", Scope: ScopeUser, Dir: filepath.Join(in.SkillsDir, "notes"), Manifest: Manifest{Network: []string{"notes.example"}}}
	assistant := Skill{Name: "weather", Scope: ScopeAssistant, Dir: t.TempDir(), Manifest: m}
	all := []Skill{installed, own, assistant}

	out, refused := in.ApplyGrants(all)
	if len(refused) != 0 || len(out) != 3 {
		t.Fatalf("out %d refused %v", len(out), refused)
	}
	if out[0].Manifest.Network != nil || out[0].Manifest.Credentials != nil {
		t.Errorf("ungranted installed skill keeps %v %v", out[0].Manifest.Network, out[0].Manifest.Credentials)
	}
	if len(out[0].Manifest.Entrypoints) != 1 {
		t.Errorf("entrypoints lost: %v", out[0].Manifest.Entrypoints)
	}
	if len(out[1].Manifest.Network) != 1 || len(out[2].Manifest.Network) != 1 {
		t.Errorf("the person's own skills changed: %v %v", out[1].Manifest, out[2].Manifest)
	}
	if len(all[0].Manifest.Network) != 1 {
		t.Error("the input was modified")
	}

	_, digest, _ := in.Asks("weather")
	in.SetGrant(t.Context(), "weather", &Grant{Network: m.Network, Credentials: m.Credentials, Digest: digest})
	out, _ = in.ApplyGrants(all)
	if len(out[0].Manifest.Network) != 1 || len(out[0].Manifest.Credentials) != 1 {
		t.Errorf("granted: %v %v", out[0].Manifest.Network, out[0].Manifest.Credentials)
	}

	// Tampered: left out, with the reason.
	os.WriteFile(filepath.Join(in.Dir("weather"), "new.sh"), []byte("x"), 0o755)
	out, refused = in.ApplyGrants(all)
	if len(out) != 2 || len(refused) != 1 || !errors.Is(refused[0], ErrTampered) {
		t.Errorf("tampered: out %d refused %v", len(out), refused)
	}
}
