package doctor

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets the test binary act as the fluffy binary for probes.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ProbeCommand {
		os.Exit(ProbeMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

func self(t *testing.T) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func find(t *testing.T, r Report, name string) Check {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check named %q in %+v", name, r.Checks)
	return Check{}
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestHealthy(t *testing.T) {
	for _, tt := range []struct {
		checks []Check
		want   bool
	}{
		{[]Check{{Status: OK, Required: true}, {Status: Warn}}, true},
		{[]Check{{Status: Warn, Required: true}}, true},
		{[]Check{{Status: Fail}}, true},
		{[]Check{{Status: OK}, {Status: Fail, Required: true}}, false},
	} {
		if got := (Report{Checks: tt.checks}).Healthy(); got != tt.want {
			t.Errorf("Healthy(%+v) = %v", tt.checks, got)
		}
	}
}

// TestNamespaceProbes runs the real probes: this machine (and CI) offers
// user namespaces and overlayfs, so they must pass, and a probe that
// cannot start must fail rather than pass.
func TestNamespaceProbes(t *testing.T) {
	r := Run(t.Context(), Options{Home: filepath.Join(t.TempDir(), "home"), Runtime: "native", Self: self(t)})
	for _, name := range []string{"user namespaces", "overlayfs in userns", "seccomp", "kernel", "data directory", "free disk"} {
		c := find(t, r, name)
		if c.Status != OK || !c.Required {
			t.Errorf("%s: %+v, want required OK", name, c)
		}
	}
	if !r.Healthy() {
		t.Errorf("report unhealthy: %+v", r)
	}
	bad := Run(t.Context(), Options{Home: t.TempDir(), Runtime: "native", Self: "/nonexistent/fluffy"})
	if c := find(t, bad, "user namespaces"); c.Status != Fail || c.Fix == "" {
		t.Errorf("probe with a missing binary: %+v, want FAIL with a fix", c)
	}
	if bad.Healthy() {
		t.Error("report with failed required probes is healthy")
	}
	// With the docker runtime, namespaces are not required.
	dock := Run(t.Context(), Options{Home: t.TempDir(), Runtime: "docker", Self: "/nonexistent/fluffy", Getenv: env(map[string]string{"DOCKER_HOST": "unix:///nonexistent.sock"})})
	if c := find(t, dock, "user namespaces"); c.Status != Warn || c.Required {
		t.Errorf("userns under docker runtime: %+v, want optional WARN", c)
	}
	if c := find(t, dock, "docker engine"); c.Status != Fail || !c.Required || !strings.Contains(c.Detail, "/nonexistent.sock") {
		t.Errorf("docker under docker runtime: %+v, want required FAIL naming the socket", c)
	}
}

func TestProbeMainErrors(t *testing.T) {
	for _, args := range [][]string{nil, {"nope"}, {"overlay"}} {
		if ProbeMain(args) == 0 {
			t.Errorf("ProbeMain(%q) succeeded", args)
		}
	}
}

// TestDockerEngine serves the Docker API's /version on a unix socket.
func TestDockerEngine(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "docker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/version" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(`{"Version":"28.2.2","ApiVersion":"1.50"}`))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	c := checkDocker(t.Context(), Options{Getenv: env(map[string]string{"DOCKER_HOST": "unix://" + sock}), Timeout: 2e9}, true)
	if c.Status != OK || !strings.Contains(c.Detail, "28.2.2 (API 1.50)") {
		t.Errorf("checkDocker = %+v", c)
	}
	c = checkDocker(t.Context(), Options{Getenv: env(map[string]string{"DOCKER_HOST": "tcp://127.0.0.1:2375"}), Timeout: 2e9}, false)
	if c.Status != Warn || !strings.Contains(c.Detail, "only unix://") {
		t.Errorf("tcp DOCKER_HOST: %+v", c)
	}
}

func TestDataDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o600)
	open := filepath.Join(dir, "open")
	os.Mkdir(open, 0o755)
	private := filepath.Join(dir, "private")
	os.Mkdir(private, 0o700)
	for _, tt := range []struct {
		path string
		want Status
		fix  bool
	}{
		{filepath.Join(dir, "missing"), OK, false},
		{file, Fail, true},
		{open, Warn, true},
		{private, OK, false},
	} {
		c := checkDataDir(tt.path)
		if c.Status != tt.want || (c.Fix != "") != tt.fix {
			t.Errorf("checkDataDir(%s) = %+v, want %s", tt.path, c, tt.want)
		}
	}
}

func TestTools(t *testing.T) {
	missing := func(string) (string, error) { return "", errors.New("not found") }
	c := checkTool(context.Background(), Options{LookPath: missing, Timeout: 2e9}, "cargo", []string{"--version"}, "install rust")
	if c.Status != Warn || c.Fix != "install rust" {
		t.Errorf("missing tool: %+v", c)
	}
	failing := func(string) (string, error) { return "/bin/false", nil }
	c = checkTool(context.Background(), Options{LookPath: failing, Timeout: 2e9}, "x", nil, "fix")
	if c.Status != Warn || !strings.Contains(c.Detail, "does not run") {
		t.Errorf("failing tool: %+v", c)
	}
	c = checkTool(context.Background(), Options{LookPath: func(string) (string, error) { return "/bin/echo", nil }, Timeout: 2e9}, "echo", []string{"v1.2\nmore"}, "")
	if c.Status != OK || c.Detail != "v1.2" {
		t.Errorf("working tool: %+v", c)
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{512: "512 B", 2048: "2.0 KiB", 3 << 30: "3.0 GiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
