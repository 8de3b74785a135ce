package userenv

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRegistries: each enabled registry names its hosts (the public ones
// with their second host), gives the policy a default rule and the
// sandbox the variables that point its tool at it; none enabled, nothing.
func TestRegistries(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env := func(config string) *Env {
		t.Helper()
		cfg := filepath.Join(root, "config")
		if err := os.MkdirAll(filepath.Join(cfg, "fluffy"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cfg, "fluffy", "config.yaml"), []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		return &Env{Cwd: root, Environ: []string{"HOME=" + filepath.Join(root, "home"), "FLUFFY_HOME=" + filepath.Join(root, "data"),
			"XDG_CONFIG_HOME=" + cfg, "GOMODCACHE=" + filepath.Join(root, "nocache")}}
	}
	ws := filepath.Join(root, "ws")

	e := env("net:\n  registries:\n    go: default\n    pypi: default\n    npm: http://10.1.2.3:4873\n")
	regs, err := e.Registries()
	if err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, r := range regs {
		hosts = append(hosts, r.Key+"="+strings.Join(r.Hosts, ","))
	}
	want := []string{"go=proxy.golang.org:443,sum.golang.org:443", "npm=10.1.2.3:4873", "pypi=pypi.org:443,files.pythonhosted.org:443"}
	if !slices.Equal(hosts, want) {
		t.Fatalf("hosts %q, want %q", hosts, want)
	}
	opts, err := e.PolicyOptions()
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.HostRules) != 3 || opts.HostRules[0].ID != "default.registry.go" || !strings.Contains(opts.HostRules[0].Origin, "config.yaml:3") {
		t.Fatalf("policy rules: %+v", opts.HostRules)
	}
	got, err := e.RegistryEnv(ws)
	if err != nil {
		t.Fatal(err)
	}
	wantEnv := []string{"GOPROXY=https://proxy.golang.org", "GOSUMDB=sum.golang.org", "npm_config_registry=http://10.1.2.3:4873", "PIP_INDEX_URL=https://pypi.org/simple"}
	if !slices.Equal(got, wantEnv) {
		t.Fatalf("env %q, want %q", got, wantEnv)
	}

	// Another Go proxy, and the person's module cache first.
	cache := filepath.Join(root, "gomod")
	if err := os.MkdirAll(filepath.Join(cache, "cache", "download"), 0o700); err != nil {
		t.Fatal(err)
	}
	e = env("net:\n  registries:\n    go: http://127.0.0.1:3000\n")
	e.Environ = append(e.Environ, "GOMODCACHE="+cache)
	got, err = e.RegistryEnv(ws)
	if err != nil {
		t.Fatal(err)
	}
	wantEnv = []string{"GOPROXY=file:///var/cache/fluffy/user/go-mod/cache/download,http://127.0.0.1:3000", "GOSUMDB=off"}
	if !slices.Equal(got, wantEnv) {
		t.Fatalf("env %q, want %q", got, wantEnv)
	}

	e = env("")
	if got, err := e.RegistryEnv(ws); err != nil || got != nil {
		t.Fatalf("no registry: env %q, %v", got, err)
	}
	if opts, err := e.PolicyOptions(); err != nil || len(opts.HostRules) != 0 {
		t.Fatalf("no registry: rules %+v, %v", opts.HostRules, err)
	}
}
