package docker_test

import (
	"bufio"
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
	"github.com/fluffy-agent/fluffy/internal/sandbox/sandboxtest"
)

func TestMain(m *testing.M) {
	if sandboxtest.IsProbe() {
		os.Exit(sandboxtest.ProbeMain())
	}
	code := m.Run()
	// Only the Podman seccomp files and the empty directory: a leaked
	// mount point inside must stay visible (and not be descended into).
	if files, _ := filepath.Glob(filepath.Join(stateDir(), "seccomp-*.json")); len(files) > 0 {
		for _, f := range files {
			os.Remove(f)
		}
	}
	os.Remove(stateDir())
	os.Exit(code)
}

const testImage = "fluffy-test-base:latest"

var (
	setupOnce sync.Once
	setupErr  error
	skipWhy   string
)

// engine connects to the engine and builds the test image once. Without
// an engine the test fails in CI (which installs one) and skips elsewhere.
func engine(t testing.TB) *docker.Runtime {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the container tests build an image and start containers, seconds each; run without -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("the docker backend mounts the workspace overlay on the host: run as root")
	}
	ctx := context.Background()
	rt, err := docker.New(ctx, docker.Options{Image: testImage, Session: "test-" + t.Name(), Template: "code-executor", StateDir: stateDir()})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI installs and starts dockerd (scripts/deps.sh), but: %v", err)
		}
		t.Skipf("no container engine reachable (outside CI, so skipping): %v", err)
	}
	t.Cleanup(func() { rt.Close() })
	// Containers change the host's mount table: not while another
	// package runs the adversarial suite (which watches it).
	sandboxtest.LockHost(t)
	setupOnce.Do(func() {
		files, err := probeLibs()
		if err != nil {
			setupErr = err
			return
		}
		_, setupErr = docker.EnsureBaseImage(ctx, rt.Client(), docker.BaseOptions{Tag: testImage, Files: files})
	})
	if setupErr != nil {
		t.Fatalf("building the test image: %v", setupErr)
	}
	_ = skipWhy
	return rt
}

// probeLibs lists the shared libraries this test binary needs when it is
// dynamically linked (CGO_ENABLED=1): the suite runs it inside the image.
func probeLibs() ([]string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	f, err := elf.Open(self)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dynamic := false
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			dynamic = true
		}
	}
	if !dynamic {
		return nil, nil
	}
	out, err := exec.Command("ldd", self).Output()
	if err != nil {
		return nil, err
	}
	var files []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		for _, f := range strings.Fields(sc.Text()) {
			if strings.HasPrefix(f, "/") {
				files = append(files, f)
			}
		}
	}
	return files, nil
}

func TestAdversarialSuite(t *testing.T) {
	rt := engine(t)
	sandboxtest.Run(t, sandboxtest.Options{Runtime: rt, MemoryKills: true, MountDirs: []string{stateDir()}})
}

// stateDir is this test process's own overlay mount directory.
func stateDir() string { return "/run/fluffy/docker-test-" + strconv.Itoa(os.Getpid()) }

func run(t *testing.T, rt sandbox.Runtime, spec sandbox.Spec) sandbox.Result {
	t.Helper()
	if spec.Env == nil {
		spec.Env = []string{"PATH=/bin"}
	}
	spec.Limits.Wall = 30 * time.Second
	res, err := rt.Run(context.Background(), spec)
	if err != nil {
		t.Fatalf("run %q: %v", spec.Argv, err)
	}
	return res
}

func TestWorkspaceThroughChangeSet(t *testing.T) { testWorkspace(t, engine(t)) }

func testWorkspace(t *testing.T, rt sandbox.Runtime) {
	base := t.TempDir()
	ws, cs := base+"/ws", base+"/cs"
	os.MkdirAll(ws+"/sub", 0o755)
	os.WriteFile(ws+"/keep.txt", []byte("keep\n"), 0o644)
	os.WriteFile(ws+"/gone.txt", []byte("gone\n"), 0o644)
	res := run(t, rt, sandbox.Spec{Workspace: ws, ChangeSet: cs, Argv: []string{"sh", "-c", "cat keep.txt && echo new > sub/new.txt && echo changed >> keep.txt && rm gone.txt && pwd"}})
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, res.Stderr)
	}
	if got := string(res.Stdout); got != "keep\n"+ws+"\n" {
		t.Errorf("stdout %q", got)
	}
	if b, _ := os.ReadFile(ws + "/keep.txt"); string(b) != "keep\n" {
		t.Errorf("the workspace changed: %q", b)
	}
	changes, err := sandbox.ReadChanges(ws, cs)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range changes {
		got[c.Path] = string(c.Kind)
	}
	want := map[string]string{"sub/new.txt": "added", "keep.txt": "modified", "gone.txt": "deleted"}
	for p, k := range want {
		if got[p] != k {
			t.Errorf("change %s: %q, want %q (all: %v)", p, got[p], k, got)
		}
	}
}

// TestWorkspaceReadOnly: the workspace as the change set shows it,
// read-only: a file only the change set holds is there, and a write
// fails and changes neither the workspace nor the change set.
func TestWorkspaceReadOnly(t *testing.T) {
	rt := engine(t)
	base := t.TempDir()
	ws, cs := base+"/ws", base+"/cs"
	os.MkdirAll(ws, 0o755)
	os.MkdirAll(cs, 0o755)
	os.WriteFile(ws+"/keep.txt", []byte("keep\n"), 0o644)
	os.WriteFile(cs+"/changed.txt", []byte("changed\n"), 0o644)
	script := "cat keep.txt changed.txt; echo x > keep.txt || echo refused; touch new.txt || echo refused; rm changed.txt || echo refused"
	res := run(t, rt, sandbox.Spec{Workspace: ws, ChangeSet: cs, WorkspaceReadOnly: true, Argv: []string{"sh", "-c", script}})
	if got := string(res.Stdout); got != "keep\nchanged\nrefused\nrefused\nrefused\n" || !strings.Contains(string(res.Stderr), "Read-only file system") {
		t.Fatalf("stdout %q stderr %q", got, res.Stderr)
	}
	if b, _ := os.ReadFile(ws + "/keep.txt"); string(b) != "keep\n" {
		t.Errorf("the workspace changed: %q", b)
	}
	changes, err := sandbox.ReadChanges(ws, cs)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 1 || changes[0].Path != "changed.txt" {
		t.Errorf("changes %+v, want only changed.txt", changes)
	}
}

func TestContainerSettings(t *testing.T) { testSettings(t, engine(t)) }

func testSettings(t *testing.T, rt sandbox.Runtime) {
	script := `set -e
grep -q '^NoNewPrivs:.1' /proc/self/status
grep -q '^Seccomp:.2' /proc/self/status
grep -q '^CapEff:.0000000000000000' /proc/self/status
if touch /rootfs-write 2>/dev/null; then echo rootfs-writable; exit 1; fi
echo x > /tmp/ok
for d in /run /var/tmp /etc /; do if touch $d/w 2>/dev/null; then echo "$d writable"; exit 1; fi; done
test "$(ls /sys/class/net)" = lo
for s in /var/run/docker.sock /run/docker.sock /run/podman/podman.sock; do test ! -e $s; done
echo ok`
	res := run(t, rt, sandbox.Spec{Argv: []string{"sh", "-c", script}, TmpSize: 1 << 20})
	if res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != "ok" {
		t.Fatalf("exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}

// Two live sessions: neither sees the other's processes.
func TestOtherSessionsInvisible(t *testing.T) {
	rt := engine(t)
	ctx := context.Background()
	a, err := rt.Start(ctx, sandbox.Spec{Env: []string{"PATH=/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Exec(ctx, []string{"sh", "-c", "sleep 123456 & exit 0"}); err != nil {
		t.Fatal(err)
	}
	res := run(t, rt, sandbox.Spec{Argv: []string{"sh", "-c", "ps -o args; ls /proc"}})
	if strings.Contains(string(res.Stdout), "123456") {
		t.Errorf("another session's process is visible:\n%s", res.Stdout)
	}
}

func TestLabelsAndGC(t *testing.T) {
	rt := engine(t)
	ctx := context.Background()
	inst, err := rt.Start(ctx, sandbox.Spec{Env: []string{"PATH=/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	id := inst.(*docker.Instance).ID()
	out, err := exec.Command("docker", "inspect", "-f", `{{index .Config.Labels "dev.fluffy.session"}} {{index .Config.Labels "dev.fluffy.template"}}`, id).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "test-TestLabelsAndGC code-executor" {
		t.Errorf("labels %q", got)
	}
	// Our own container is not an orphan.
	removed, err := docker.GC(ctx, rt.Client(), docker.GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range removed {
		if o.ID == id {
			t.Fatal("GC removed a container whose owner is alive")
		}
	}
	// A container left by a dead process is.
	orphan := exec.Command("docker", "create", "--label", "dev.fluffy.managed=1", "--label", "dev.fluffy.owner=999999999:1", "--network", "none", testImage, "true")
	b, err := orphan.Output()
	if err != nil {
		t.Fatal(err)
	}
	oid := strings.TrimSpace(string(b))
	removed, err = docker.GC(ctx, rt.Client(), docker.GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, o := range removed {
		found = found || o.ID == oid
	}
	if !found {
		exec.Command("docker", "rm", "-f", oid).Run()
		t.Fatalf("GC did not remove the orphan %s", oid)
	}
	// A container that only inherits dev.fluffy.managed from the image
	// (a skill build's intermediate container, one a person started from
	// the base image) has no owner: fluffy did not create it, and GC,
	// even --all, leaves it alone.
	b, err = exec.Command("docker", "create", "--network", "none", testImage, "true").Output()
	if err != nil {
		t.Fatal(err)
	}
	foreign := strings.TrimSpace(string(b))
	defer exec.Command("docker", "rm", "-f", foreign).Run()
	if out, _ := exec.Command("docker", "inspect", "-f", `{{index .Config.Labels "dev.fluffy.managed"}}`, foreign).Output(); strings.TrimSpace(string(out)) != "1" {
		t.Fatalf("the test image's label did not reach the container: %q", out)
	}
	removed, err = docker.GC(ctx, rt.Client(), docker.GCOptions{All: true, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range removed {
		if o.ID == foreign {
			t.Fatalf("GC would remove %s, a container fluffy did not create", foreign)
		}
	}
}

func TestImageCache(t *testing.T) {
	rt := engine(t)
	ctx := context.Background()
	dir := t.TempDir()
	os.WriteFile(dir+"/Dockerfile", []byte("FROM "+testImage+"\nCOPY requirements.txt /etc/req\n"), 0o644)
	os.WriteFile(dir+"/requirements.txt", []byte("a==1\n"), 0o644)
	tag := "fluffy-test-skill:latest"
	defer exec.Command("docker", "rmi", "-f", tag).Run()
	r1, err := docker.BuildDir(ctx, rt.Client(), dir, tag)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := docker.BuildDir(ctx, rt.Client(), dir, tag)
	if err != nil || !r2.Cached || r2.Content != r1.Content {
		t.Fatalf("second build: %+v %v, want cached", r2, err)
	}
	os.WriteFile(dir+"/requirements.txt", []byte("a==2\n"), 0o644)
	r3, err := docker.BuildDir(ctx, rt.Client(), dir, tag)
	if err != nil || r3.Cached || r3.Content == r1.Content {
		t.Fatalf("after a change: %+v %v, want a rebuild", r3, err)
	}
}

// The suite's probe cases only mean something when the probe runs inside:
// check it does, and that the kernel (seccomp) refuses, not the loader.
func TestProbeRunsInside(t *testing.T) {
	rt := engine(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	res := run(t, rt, sandbox.Spec{Argv: []string{"/opt/probe", "mount"}, Env: []string{"PATH=/bin", "FLUFFY_SANDBOX_PROBE=1"},
		Mounts: []sandbox.Mount{{Source: self, Target: "/opt/probe"}}})
	if got := string(res.Stdout); res.ExitCode != sandboxtest.ProbeRefusedExit || !strings.HasPrefix(got, sandboxtest.ProbeStarted) || !strings.Contains(got, "refused: EPERM: operation not permitted") {
		t.Fatalf("probe: exit %d stdout %q stderr %q", res.ExitCode, got, res.Stderr)
	}
}

// podmanHost is Podman's Docker-compatible API socket: FLUFFY_PODMAN_HOST,
// else the rootful default of `podman system service`.
func podmanHost() string {
	if h := os.Getenv("FLUFFY_PODMAN_HOST"); h != "" {
		return h
	}
	return "unix:///run/podman/podman.sock"
}

// TestPodman runs the same backend code against Podman's API socket.
func TestPodman(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the container tests build an image and start containers, seconds each; run without -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("the workspace overlay needs root")
	}
	host := podmanHost()
	if _, err := os.Stat(strings.TrimPrefix(host, "unix://")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI installs Podman and starts its API service (scripts/deps.sh), but %s: %v", host, err)
		}
		t.Skipf("Podman is not serving its Docker-compatible API at %s (start it with `podman system service --time=0 %s`, as scripts/deps.sh does): %v", host, host, err)
	}
	sandboxtest.LockHost(t)
	ctx := context.Background()
	rt, err := docker.New(ctx, docker.Options{Host: host, Image: testImage, Session: "test-podman", Template: "code-executor", StateDir: stateDir()})
	if err != nil {
		t.Fatalf("Podman's socket exists but: %v", err)
	}
	defer rt.Close()
	files, err := probeLibs()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := docker.EnsureBaseImage(ctx, rt.Client(), docker.BaseOptions{Tag: testImage, Files: files}); err != nil {
		t.Fatalf("building the test image with Podman: %v", err)
	}
	t.Run("workspace", func(t *testing.T) { testWorkspace(t, rt) })
	t.Run("settings", func(t *testing.T) { testSettings(t, rt) })
	t.Run("suite", func(t *testing.T) {
		sandboxtest.Run(t, sandboxtest.Options{Runtime: rt, MemoryKills: true, MountDirs: []string{stateDir()}})
	})
	t.Run("pool-proxy", func(t *testing.T) { testPoolProxy(t, rt, "test-podman") })
	t.Run("secret-env", func(t *testing.T) { testSecretEnv(t, host, false) })
	t.Run("stdin-file", func(t *testing.T) { testStdinFile(t, host) })
}

// A fork bomb that outlives the timeout: the run reports both the
// timeout that killed it and the pids limit it hit before (the cgroup's
// counters are read before the kill removes the container's cgroup).
func TestTimeoutKeepsLimitsHit(t *testing.T) {
	rt := engine(t)
	// The main shell forks once, first, and then replaces itself by
	// sleep: a shell that cannot fork exits, and its second fork (b|b
	// forks per element) could meet the limit its first child filled,
	// ending the run before its timeout.
	// rt.Run, not run, which would set a 30 s timeout.
	res, err := rt.Run(context.Background(), sandbox.Spec{Argv: []string{"sh", "-c", `b(){ b|b& }; (b) & exec sleep 60`},
		Env: []string{"PATH=/bin"}, Limits: sandbox.Limits{Pids: 32, Wall: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Killed != sandbox.LimitTime || !res.HitLimit(sandbox.LimitTime) || !res.HitLimit(sandbox.LimitPids) {
		t.Fatalf("killed %q, hit %v: want the timeout and the pids limit (result %+v)", res.Killed, res.Hit, res)
	}
}

// A spec's Image is the container's image in place of the runtime's (a
// skill's own); without one the runtime's runs.
func TestSpecImage(t *testing.T) {
	rt := engine(t)
	dir := t.TempDir()
	os.WriteFile(dir+"/Dockerfile", []byte("FROM "+testImage+"\nCOPY marker /etc/skill-marker\n"), 0o644)
	os.WriteFile(dir+"/marker", []byte("from the skill's image\n"), 0o644)
	tag := "fluffy-test-spec-image:latest"
	defer exec.Command("docker", "rmi", "-f", tag).Run()
	if _, err := docker.BuildDir(context.Background(), rt.Client(), dir, tag); err != nil {
		t.Fatal(err)
	}
	res := run(t, rt, sandbox.Spec{Argv: []string{"cat", "/etc/skill-marker"}, Image: tag})
	if res.ExitCode != 0 || string(res.Stdout) != "from the skill's image\n" {
		t.Fatalf("in the spec's image: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if res := run(t, rt, sandbox.Spec{Argv: []string{"cat", "/etc/skill-marker"}}); res.ExitCode == 0 {
		t.Fatalf("the runtime's image has the marker: %q", res.Stdout)
	}
}
