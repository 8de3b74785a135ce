package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/units"
)

func mapEnv(m map[string]string) Env {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func write(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHierarchy(t *testing.T) {
	dir := t.TempDir()
	user := write(t, dir, "user.yaml", `
log:
  level: debug
sandbox:
  runtime: docker
  timeout: 5m
  memory: 1GiB
  pids: 100
`)
	project := write(t, dir, "project.yaml", `
sandbox:
  timeout: 2m
  memory: 512MiB
model: anthropic/claude-sonnet-4-5
`)
	env := mapEnv(map[string]string{
		"HOME":                       "/home/u",
		"FLUFFY_SANDBOX_MEMORY":      "256MiB",
		"FLUFFY_SANDBOX_PIDS":        "64",
		"FLUFFY_AUDIT_FLUSH_ENTRIES": "7",
	})
	l, err := Load(Options{Env: env, UserFile: user, ProjectFile: project, Flags: []string{"sandbox.pids=32"}})
	if err != nil {
		t.Fatal(err)
	}
	c := l.Config
	checks := []struct {
		key   string
		got   any
		want  any
		layer string
	}{
		{"home", c.Home, "/home/u/.local/share/fluffy", LayerDefault},
		{"log.level", c.Log.Level, "debug", LayerUser},
		{"sandbox.runtime", c.Sandbox.Runtime, "docker", LayerUser},
		{"sandbox.timeout", c.Sandbox.Timeout.Std(), 2 * time.Minute, LayerProject},
		{"model", c.Model, "anthropic/claude-sonnet-4-5", LayerProject},
		{"sandbox.memory", c.Sandbox.Memory, units.Size(256 << 20), LayerEnv},
		{"audit.flush_entries", c.Audit.FlushEntries, 7, LayerEnv},
		{"sandbox.pids", c.Sandbox.Pids, 32, LayerFlag},
		{"tdd.mode", c.TDD.Mode, "strict", LayerDefault},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.key, ch.got, ch.want)
		}
		if o := l.Origins[ch.key]; o.Layer != ch.layer {
			t.Errorf("%s came from %v, want layer %s", ch.key, o, ch.layer)
		}
	}
	if o := l.Origins["sandbox.timeout"]; o.File != project || o.Line != 3 {
		t.Errorf("sandbox.timeout origin = %+v, want %s line 3", o, project)
	}
	if o := l.Origins["sandbox.memory"]; o.Env != "FLUFFY_SANDBOX_MEMORY" {
		t.Errorf("sandbox.memory origin = %+v", o)
	}
	if len(l.Files) != 2 {
		t.Errorf("Files = %v", l.Files)
	}
}

func TestDataDirDefaults(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"HOME": "/h"}, "/h/.local/share/fluffy"},
		{map[string]string{"HOME": "/h", "XDG_DATA_HOME": "/x"}, "/x/fluffy"},
		{map[string]string{"HOME": "/h", "XDG_DATA_HOME": "/x", "FLUFFY_HOME": "/f"}, "/f"},
	} {
		l, err := Load(Options{Env: mapEnv(tt.env)})
		if err != nil {
			t.Fatal(err)
		}
		if l.Config.Home != tt.want {
			t.Errorf("env %v: home = %q, want %q", tt.env, l.Config.Home, tt.want)
		}
	}
	if got := UserFile(mapEnv(map[string]string{"HOME": "/h"})); got != "/h/.config/fluffy/config.yaml" {
		t.Errorf("UserFile = %q", got)
	}
}

// TestRegistries: net.registries values load, "default" names the
// public registry, and an empty value leaves the runner off.
func TestRegistries(t *testing.T) {
	dir := t.TempDir()
	l, err := Load(Options{Env: mapEnv(map[string]string{"HOME": "/home/u"}),
		UserFile: write(t, dir, "user.yaml", "net:\n  registries:\n    go: http://127.0.0.1:8080\n    pypi: default\n")})
	if err != nil {
		t.Fatal(err)
	}
	got := l.Config.Net.Registries.Enabled()
	want := map[string]string{"go": "http://127.0.0.1:8080", "pypi": "https://pypi.org/simple"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Enabled() = %v, want %v", got, want)
	}
	if o := l.Origins["net.registries.go"]; o.Line != 3 {
		t.Fatalf("origin of net.registries.go: %+v", o)
	}
	if len(Default(mapEnv(nil)).Net.Registries.Enabled()) != 0 {
		t.Fatal("a registry is on by default")
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name    string
		user    string
		project string
		env     map[string]string
		flags   []string
		want    []string // substrings, all must appear
	}{
		{name: "syntax", user: "sandbox:\n  runtime: [docker\n", want: []string{"user.yaml:", "invalid YAML"}},
		{name: "tab indent", user: "sandbox:\n\truntime: docker\n", want: []string{"user.yaml:2:1", "invalid YAML"}},
		{name: "unknown key suggests", user: "sandbox:\n  runtme: docker\n", want: []string{"user.yaml:2:3", "sandbox.runtme: unknown key (did you mean sandbox.runtime?)"}},
		{name: "misplaced key suggests", user: "timeout: 5m\n", want: []string{"user.yaml:1:1", "timeout: unknown key (did you mean approval.timeout or sandbox.timeout?)"}},
		{name: "misplaced unique key", user: "log:\n  pids: 3\n", want: []string{"log.pids: unknown key (did you mean sandbox.pids?)"}},
		{name: "unknown section", user: "zzz:\n  a: 1\n", want: []string{"zzz: unknown key"}},
		{name: "wrong type int", user: "sandbox:\n  pids: many\n", want: []string{"user.yaml:2:9", "sandbox.pids: expected a whole number, got \"many\""}},
		{name: "wrong type bool", user: "sandbox:\n  allow_degraded: yes please\n", want: []string{"sandbox.allow_degraded: expected a boolean"}},
		{name: "quoted bool refused", user: "sandbox:\n  allow_degraded: \"true\"\n", want: []string{"expected a boolean"}},
		{name: "section not mapping", user: "sandbox: docker\n", want: []string{"user.yaml:1:10", "sandbox must be a mapping"}},
		{name: "list for scalar", user: "model: [a, b]\n", want: []string{"model: expected a string, got a list"}},
		{name: "bad size", user: "sandbox:\n  memory: 2G\n", want: []string{"user.yaml:2:11", "sandbox.memory", "ambiguous"}},
		{name: "bad duration", user: "sandbox:\n  timeout: 30\n", want: []string{"sandbox.timeout", "has no unit"}},
		{name: "bad enum", user: "sandbox:\n  runtime: lxc\n", want: []string{"user.yaml:2:12", `"lxc" is not one of auto, native, docker, podman`}},
		{name: "negative", user: "sandbox:\n  pids: -1\n", want: []string{"sandbox.pids: must not be negative"}},
		{name: "duplicate", user: "model: a\nmodel: b\n", want: []string{"user.yaml:2:1", "set twice"}},
		{name: "two documents", user: "model: a\n---\nmodel: b\n", want: []string{"more than one YAML document"}},
		{name: "top-level list", user: "- a\n", want: []string{"top level must be a mapping"}},
		{name: "project may not loosen", project: "sandbox:\n  allow_degraded: true\n", want: []string{"project.yaml:2:3", "may only be set by the user"}},
		{name: "project may not move home", project: "home: /tmp/evil\n", want: []string{"home: may only be set by the user"}},
		{name: "env wrong type", env: map[string]string{"FLUFFY_SANDBOX_PIDS": "lots"}, want: []string{"FLUFFY_SANDBOX_PIDS: sandbox.pids: expected a whole number"}},
		{name: "env float", env: map[string]string{"FLUFFY_AGENT_MAX_COST": "cheap"}, want: []string{"FLUFFY_AGENT_MAX_COST: agent.max_cost: expected a number, got \"cheap\""}},
		{name: "env bad enum", env: map[string]string{"FLUFFY_TDD_MODE": "yolo"}, want: []string{"FLUFFY_TDD_MODE: tdd.mode", `"yolo" is not one of strict, explore, debug`}},
		{name: "relative home", env: map[string]string{"FLUFFY_HOME": "rel/dir"}, want: []string{"home: must be an absolute path"}},
		{name: "flag unknown", flags: []string{"sandbox.runtim=docker"}, want: []string{"--set sandbox.runtim=docker", "did you mean sandbox.runtime?"}},
		{name: "flag no equals", flags: []string{"sandbox.runtime"}, want: []string{"expected key=value"}},
		{name: "serve list entry typo", user: "serve:\n  cron:\n    - name: daily\n      schedul: \"0 9 * * *\"\n", want: []string{"user.yaml:4:7", "serve.cron", `unknown key "schedul" in a cron job`}},
		{name: "serve matrix typo", user: "serve:\n  matrix:\n    - homeserver: https://m.test\n      acess_token: x\n", want: []string{"user.yaml:4:7", "serve.matrix", `unknown key "acess_token" in a matrix account`}},
		{name: "project may not add matrix", project: "serve:\n  matrix: []\n", want: []string{"serve.matrix: may only be set by the user"}},
		{name: "serve list entry not a mapping", user: "serve:\n  webhooks:\n    - github\n", want: []string{"user.yaml:3:7", "a webhook must be a mapping"}},
		{name: "serve nested route typo", user: "serve:\n  webhooks:\n    - name: gh\n      report: {chanel: mail}\n", want: []string{"user.yaml:4:16", `unknown key "chanel" in a route`}},
		{name: "sched negative", user: "sched:\n  sandboxes: -2\n", want: []string{"user.yaml:2:", "sched.sandboxes: must not be negative"}},
		{name: "project may not raise sched limits", project: "sched:\n  global: 100\n", want: []string{"project.yaml:2:3", "sched.global: may only be set by the user"}},
		{name: "project may not set retention", project: "sessions:\n  retention: 1h\n", want: []string{"sessions.retention: may only be set by the user"}},
		{name: "project may not add hooks", project: "serve:\n  webhooks: []\n", want: []string{"serve.webhooks: may only be set by the user"}},
		{name: "registry not a URL", user: "net:\n  registries:\n    go: proxy.golang.org\n", want: []string{"user.yaml:3:9", "net.registries.go", "must start with https:// or http://"}},
		{name: "registry credentials", user: "net:\n  registries:\n    pypi: https://me:secret@pypi.test/simple\n", want: []string{"user.yaml:3:11", "net.registries.pypi", "credentials"}},
		{name: "registry IPv6", user: "net:\n  registries:\n    npm: http://[::1]:8080\n", want: []string{"net.registries.npm", "name or an IPv4 address"}},
		{name: "registry unknown runner", user: "net:\n  registries:\n    cargo: default\n", want: []string{"user.yaml:3:5", "net.registries.cargo: unknown key"}},
		{name: "registry from a project", project: "net:\n  registries:\n    go: http://127.0.0.1:9\n", want: []string{"project.yaml:3:5", "may only be set by the user"}},
		{name: "registry env", env: map[string]string{"FLUFFY_NET_REGISTRIES_GO": "ftp://x"}, want: []string{"FLUFFY_NET_REGISTRIES_GO", "net.registries.go"}},
		{name: "all errors reported", user: "sandbox:\n  pids: x\n  runtme: y\n", want: []string{"sandbox.pids", "sandbox.runtme"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Flags: tt.flags}
			env := map[string]string{"HOME": "/home/u"}
			for k, v := range tt.env {
				env[k] = v
			}
			opts.Env = mapEnv(env)
			if tt.user != "" {
				opts.UserFile = write(t, dir, "user.yaml", tt.user)
			}
			if tt.project != "" {
				opts.ProjectFile = write(t, dir, "project.yaml", tt.project)
			}
			l, err := Load(opts)
			if err == nil {
				t.Fatalf("Load succeeded, want error containing %q", tt.want)
			}
			if l != nil {
				t.Fatal("Load returned a config along with an error: half-loaded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

func TestEmptyAndMissingFiles(t *testing.T) {
	dir := t.TempDir()
	empty := write(t, dir, "empty.yaml", "")
	comments := write(t, dir, "comments.yaml", "# nothing here\n")
	l, err := Load(Options{Env: mapEnv(map[string]string{"HOME": "/h"}), UserFile: empty, ProjectFile: comments})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(l.Config, Default(mapEnv(map[string]string{"HOME": "/h"}))) {
		t.Error("empty files changed the configuration")
	}
	if _, err := Load(Options{Env: mapEnv(map[string]string{"HOME": "/h"}), UserFile: filepath.Join(dir, "missing.yaml")}); err != nil {
		t.Errorf("a missing file is not an error: %v", err)
	}
	unreadable := filepath.Join(dir, "adir.yaml")
	if err := os.Mkdir(unreadable, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(Options{Env: mapEnv(map[string]string{"HOME": "/h"}), UserFile: unreadable}); err == nil || !strings.Contains(err.Error(), "adir.yaml") {
		t.Errorf("unreadable file: err = %v", err)
	}
}

func TestUnknownEnv(t *testing.T) {
	errs := UnknownEnv([]string{"FLUFFY_SANDBOX_RUNTME=docker", "FLUFFY_HOME=/x", "FLUFFY__INIT=1", "PATH=/bin", "FLUFFY_ZZZZZZZZZZZZZZZZ=1"})
	if len(errs) != 2 {
		t.Fatalf("UnknownEnv = %v, want 2 errors", errs)
	}
	if !strings.Contains(errs[0].Error(), "FLUFFY_SANDBOX_RUNTME: unknown configuration variable (did you mean FLUFFY_SANDBOX_RUNTIME?)") {
		t.Errorf("errs[0] = %v", errs[0])
	}
	if strings.Contains(errs[1].Error(), "did you mean") {
		t.Errorf("no suggestion expected for a far-off name: %v", errs[1])
	}
}

func TestValidateFile(t *testing.T) {
	dir := t.TempDir()
	good := write(t, dir, "good.yaml", "sandbox:\n  runtime: podman\n")
	if err := ValidateFile(good, LayerUser, mapEnv(map[string]string{"HOME": "/h"})); err != nil {
		t.Errorf("good file: %v", err)
	}
	bad := write(t, dir, "bad.yaml", "audit:\n  retention_days: 3\n")
	if err := ValidateFile(bad, LayerProject, mapEnv(map[string]string{"HOME": "/h"})); err == nil || !strings.Contains(err.Error(), "may only be set by the user") {
		t.Errorf("project-scoped audit key: %v", err)
	}
}

func TestProjectRoot(t *testing.T) {
	dir := t.TempDir()
	deep := filepath.Join(dir, "repo", "a", "b")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "repo", ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := ProjectRoot(deep); got != filepath.Join(dir, "repo") {
		t.Errorf("ProjectRoot = %q", got)
	}
	if got := ProjectFile(deep); got != filepath.Join(dir, "repo", ".fluffy", "config.yaml") {
		t.Errorf("ProjectFile = %q", got)
	}
}

func TestKeysHaveEnvNames(t *testing.T) {
	seen := map[string]string{}
	for _, k := range Keys() {
		if other, dup := seen[k.Env]; dup {
			t.Errorf("keys %s and %s share the variable %s", k.Name, other, k.Env)
		}
		seen[k.Env] = k.Name
	}
	if seen["FLUFFY_HOME"] != "home" {
		t.Error("FLUFFY_HOME must set home, as docs/DESIGN.md documents (Storage and files)")
	}
}

// FuzzLoad feeds arbitrary bytes as a user file: Load must never panic and
// must either succeed with a valid config or fail with no config.
func FuzzLoad(f *testing.F) {
	for _, s := range []string{"", "model: x\n", "sandbox:\n  runtime: docker\n  memory: 1GiB\n", "a: [", "sandbox: {pids: -1}", "&a x: *a", "home: /x\n"} {
		f.Add(s)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, body string) {
		p := filepath.Join(dir, "fuzz.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := Load(Options{Env: mapEnv(map[string]string{"HOME": "/h"}), UserFile: p})
		if (l == nil) == (err == nil) {
			t.Fatalf("Load returned config=%v err=%v", l != nil, err)
		}
		if err == nil && l.Config.Sandbox.Pids < 0 {
			t.Fatal("invalid value accepted")
		}
	})
}

func TestFloatFromEnvAndFlags(t *testing.T) {
	l, err := Load(Options{Env: mapEnv(map[string]string{"HOME": "/h", "FLUFFY_AGENT_MAX_COST": "2.5"})})
	if err != nil {
		t.Fatal(err)
	}
	if l.Config.Agent.MaxCost != 2.5 || l.Origins["agent.max_cost"].Layer != LayerEnv {
		t.Errorf("max_cost = %v from %v", l.Config.Agent.MaxCost, l.Origins["agent.max_cost"])
	}
	l, err = Load(Options{Env: mapEnv(map[string]string{"HOME": "/h"}), Flags: []string{"agent.max_cost=0.75"}})
	if err != nil || l.Config.Agent.MaxCost != 0.75 {
		t.Errorf("flag: %v, %v", l, err)
	}
}
