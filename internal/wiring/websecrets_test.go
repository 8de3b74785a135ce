package wiring

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/secret"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// TestWebSecretsNeverAValue: the credentials page's view of a use whose
// reference resolves (through the env backend) names it and never holds
// its value.
func TestWebSecretsNeverAValue(t *testing.T) {
	dir := t.TempDir()
	const value = "v4lue-that-must-not-show"
	u := &userenv.Env{Cwd: dir, Environ: []string{"HOME=" + dir, "FLUFFY_HOME=" + filepath.Join(dir, "data"),
		"XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "PATH=/usr/bin:/bin", "GH_TOKEN=" + value}}
	cfg := "secrets:\n  uses:\n    - ref: env:GH_TOKEN\n      as: proxy\n      name: GH_TOKEN\n      bind: [api.github.com]\n      commands: [gh]\n" +
		"serve:\n  webhooks:\n    - name: deploy\n      secret: env:GH_TOKEN\n"
	if err := os.MkdirAll(filepath.Join(dir, "config", "fluffy"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config", "fluffy", "config.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := u.Config()
	if err != nil {
		t.Fatal(err)
	}
	bs, err := u.SecretBackends(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := bs["env"].Lookup(t.Context(), "GH_TOKEN"); err != nil || string(got) != value {
		t.Fatalf("the env backend resolves %q, %v; the test needs it to resolve", got, err)
	}
	v, err := webSecrets{u: u, l: l}.Secrets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if all := fmt.Sprintf("%+v", v); strings.Contains(all, value) {
		t.Fatalf("the credentials view holds a value: %s", all)
	}
	if len(v.Uses) != 2 || v.Uses[0].Ref != "secret://env/GH_TOKEN" || v.Uses[0].As != string(secret.AsProxy) || v.Uses[1].By != "serve.webhooks deploy" {
		t.Errorf("uses: %+v", v.Uses)
	}
	bks, err := webSecrets{u: u, l: l}.Backends(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if all := fmt.Sprintf("%+v", bks); strings.Contains(all, value) {
		t.Fatalf("the backends' states hold a value: %s", all)
	}
	var env bool
	for _, b := range bks {
		env = env || b.Name == "env" && b.State == string(secret.Unlocked)
	}
	if !env {
		t.Errorf("backends: %+v", bks)
	}
}
