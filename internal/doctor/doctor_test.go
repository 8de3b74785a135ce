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

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

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

func facilities(fs ...sandbox.Facility) func(context.Context) []sandbox.Facility {
	return func(context.Context) []sandbox.Facility { return fs }
}

// TestFacilities checks how the sandbox's facility report becomes checks:
// a missing required facility fails the report only under the native
// runtime, and optional ones only warn.
func TestFacilities(t *testing.T) {
	all := facilities(
		sandbox.Facility{Name: "userns", Available: true, Required: true, Detail: "all namespaces"},
		sandbox.Facility{Name: "landlock", Available: false, Required: true, Detail: "landlock unavailable", Fix: "boot with lsm=landlock"},
		sandbox.Facility{Name: "cgroup", Available: false, Detail: "v1 only", Fix: "delegate"},
	)
	home := filepath.Join(t.TempDir(), "home")
	r := Run(t.Context(), Options{Home: home, Runtime: "native", Facilities: all})
	if c := find(t, r, "user namespaces"); c.Status != OK || !c.Required || c.Detail != "all namespaces" {
		t.Errorf("userns: %+v", c)
	}
	if c := find(t, r, "landlock"); c.Status != Fail || !c.Required || c.Fix != "boot with lsm=landlock" {
		t.Errorf("landlock: %+v", c)
	}
	if c := find(t, r, "cgroups"); c.Status != Warn || c.Required {
		t.Errorf("cgroups: %+v", c)
	}
	if r.Healthy() {
		t.Error("a missing required facility left the report healthy")
	}
	if r.Checks[0].Name != "kernel" || r.Checks[1].Name != "user namespaces" {
		t.Errorf("order: kernel, then the sandbox's facilities; got %s, %s", r.Checks[0].Name, r.Checks[1].Name)
	}
	// Under the docker runtime the native facilities are informative.
	dock := Run(t.Context(), Options{Home: home, Runtime: "docker", Facilities: all,
		Getenv: env(map[string]string{"DOCKER_HOST": "unix:///nonexistent.sock"})})
	if c := find(t, dock, "landlock"); c.Status != Warn || c.Required {
		t.Errorf("landlock under docker: %+v", c)
	}
	if c := find(t, dock, "docker engine"); c.Status != Fail || !c.Required || !strings.Contains(c.Detail, "/nonexistent.sock") {
		t.Errorf("docker under docker runtime: %+v, want required FAIL naming the socket", c)
	}
	// Without detection wired in, doctor fails closed rather than
	// claiming the sandbox works.
	none := Run(t.Context(), Options{Home: home, Runtime: "native"})
	if c := find(t, none, "native sandbox"); c.Status != Fail || none.Healthy() {
		t.Errorf("no detection: %+v", c)
	}
	for _, name := range []string{"kernel", "data directory", "free disk"} {
		if c := find(t, r, name); c.Status != OK || !c.Required {
			t.Errorf("%s: %+v", name, c)
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
