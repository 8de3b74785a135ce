package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// composeModel is the replayed model of the deployment test: every
// session it starts answers once, without tools.
const composeModel = `{"turn": {"text": "Hello from the container."}}` + "\n"

// TestComposeDeployment builds fluffy's image (deploy/Dockerfile) on the
// Debian base image, starts deploy/compose.yaml with docker-compose, waits
// for the image's health check (/healthz) and reads /readyz from the host,
// sends a signed webhook from the host and asks the assistant through the
// kernel socket inside the container, damages the webhook's nonce store,
// kills the container with SIGKILL and starts it again: healthy, yet
// /readyz says 503 and names the hook until the file is gone; the sessions
// are still there, the audit log verifies, and the daemon answers again.
// Then the image's native sandbox: refused under Docker's defaults (as
// compose runs it), working with the two options docs/deploy.md names.
func TestComposeDeployment(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds fluffy's image and runs it, about a minute")
	}
	if os.Geteuid() != 0 {
		t.Skip("the webhook secret file must belong to the image's user (uid 1000): run as root")
	}
	if _, err := exec.LookPath("docker-compose"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI installs docker-compose (scripts/deps.sh)")
		}
		t.Skip("no docker-compose: apt-get install docker-compose (scripts/deps.sh does)")
	}
	if out, err := exec.Command("docker", "version").CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI starts dockerd (scripts/deps.sh), but: %v\n%s", err, out)
		}
		t.Skipf("no container engine reachable (outside CI, so skipping): %v", err)
	}
	t0 := time.Now()
	image := buildImage(t)
	t.Logf("image %s ready after %s", image, time.Since(t0).Round(time.Millisecond))

	// The project: compose.yaml as shipped, with the configuration, the
	// key file and the secret it expects beside it.
	dir := t.TempDir()
	proj := filepath.Join(dir, "deploy")
	for _, d := range []string{filepath.Join(proj, "config"), filepath.Join(proj, "secrets"), filepath.Join(dir, "bin")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	compose, err := os.ReadFile("../../deploy/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The configuration as shipped, with the replayed model.
	shipped, err := os.ReadFile("../../deploy/config/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	config := regexp.MustCompile(`(?m)^model: .*$`).ReplaceAllString(string(shipped), "model: replay//config/fluffy/model.jsonl")
	if config == string(shipped) {
		t.Fatal("deploy/config/config.yaml names no model: line to replace")
	}
	secret := filepath.Join(proj, "secrets", "webhook_secret")
	for name, body := range map[string]string{
		"compose.yaml":           string(compose),
		"fluffy.env":             "ANTHROPIC_API_KEY=unused-the-model-is-replayed\n",
		"config/config.yaml":     config,
		"config/model.jsonl":     composeModel,
		"secrets/webhook_secret": "a webhook secret of the test\n",
	} {
		if err := os.WriteFile(filepath.Join(proj, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(secret, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config/config.yaml", "config/model.jsonl"} {
		if err := os.Chmod(filepath.Join(proj, f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hookPort, webPort, healthPort := freePort(t), freePort(t), freePort(t)
	name := fmt.Sprintf("fluffye2e%d", os.Getpid())
	dc := func(args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command("docker-compose", append([]string{"-p", name, "-f", filepath.Join(proj, "compose.yaml")}, args...)...)
		cmd.Dir = proj
		cmd.Env = append(os.Environ(), "FLUFFY_IMAGE="+image, "FLUFFY_WEBHOOK_PORT="+strconv.Itoa(hookPort), "FLUFFY_WEB_PORT="+strconv.Itoa(webPort), "FLUFFY_HEALTH_PORT="+strconv.Itoa(healthPort))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := dc(args...)
		if err != nil {
			t.Fatalf("docker-compose %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	must("config", "-q")
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := dc("logs", "--no-color", "--tail", "40")
			t.Logf("the container's log:\n%s", out)
		}
		if out, err := dc("down", "-v", "--remove-orphans", "-t", "5"); err != nil {
			t.Logf("docker-compose down: %v\n%s", err, out)
		}
	})
	t1 := time.Now()
	must("up", "-d", "--no-build")
	id := strings.TrimSpace(must("ps", "-q", "fluffy"))
	waitHealthy(t, id)
	t.Logf("healthy %s after up", time.Since(t1).Round(time.Millisecond))
	readyz := func() (int, string) {
		t.Helper()
		c := &http.Client{Timeout: 10 * time.Second}
		res, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", healthPort))
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	waitFor(t, "/readyz from the host", func() bool { code, _ := readyz(); return code == http.StatusOK })
	inside := func(stdin string, argv ...string) string {
		t.Helper()
		cmd := exec.Command("docker", append([]string{"exec", "-i", id}, argv...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("in the container, %s: %v\n%s", strings.Join(argv, " "), err, out)
		}
		return string(out)
	}

	// A webhook from the host, signed as the hook expects: a session.
	payload := `{"event":"deployed","version":"1.2.3"}`
	headers := inside(payload, "fluffy", "hook", "sign", "deploy", "--body", "-")
	req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/hooks/deploy", hookPort), strings.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(headers), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			t.Fatalf("hook sign printed %q", headers)
		}
		req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("webhook: %d %s", resp.StatusCode, body)
	}
	// And a person's message through the kernel socket.
	if out := inside("", "fluffy", "ask", "how did the deployment go?"); !strings.Contains(out, "Hello from the container.") {
		t.Fatalf("ask: %q", out)
	}
	waitFor(t, "the webhook's session", func() bool {
		return strings.Contains(inside("", "fluffy", "audit", "log", "--kind", "channel.inbound"), `"channel":"deploy"`)
	})
	before := sessionIDs(inside("", "fluffy", "session", "ls", "--all"))
	if len(before) != 2 {
		t.Fatalf("sessions before the kill: %v", before)
	}

	// A channel that cannot start: the webhook's nonce store damaged.
	// kill -9, start again: the daemon serves (the health check passes)
	// but is not ready, and says why.
	nonces := "/data/fluffy/serve/hooks/deploy/nonces"
	inside("", "sh", "-c", "umask 077 && printf 'this is not a record\\n' > "+nonces)
	t2 := time.Now()
	must("kill", "-s", "SIGKILL", "fluffy")
	must("start", "fluffy")
	waitHealthy(t, id)
	t.Logf("healthy %s after a kill -9 and a start", time.Since(t2).Round(time.Millisecond))
	waitFor(t, "the hook failing", func() bool {
		return strings.Contains(inside("", "fluffy", "kernel", "status"), "failing")
	})
	if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "channel deploy: failing") {
		t.Errorf("/readyz with the hook failing: %d %q", code, body)
	}
	// Gone, the supervision's next restart connects the hook.
	inside("", "rm", nonces)
	waitFor(t, "/readyz after the nonce store is removed", func() bool { code, _ := readyz(); return code == http.StatusOK })
	if after := sessionIDs(inside("", "fluffy", "session", "ls", "--all")); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Errorf("sessions after the restart %v, before %v", after, before)
	}
	if out := inside("", "fluffy", "audit", "verify", "--full"); !strings.Contains(out, "audit log intact") {
		t.Errorf("audit verify: %s", out)
	}
	if out := inside("", "fluffy", "ask", "--thread", "again", "still there?"); !strings.Contains(out, "Hello from the container.") {
		t.Errorf("ask after the restart: %q", out)
	}

	// The native sandbox: not under Docker's defaults, as compose runs it;
	// with seccomp and the /proc masks lifted, it runs.
	if out, err := exec.Command("docker", "exec", "-w", "/data", id, "fluffy", "sandbox", "run", "--", "echo", "sandboxed").CombinedOutput(); err == nil || !strings.Contains(string(out), "operation not permitted") {
		t.Errorf("under Docker's defaults the sandbox: %v\n%s", err, out)
	}
	out, err := exec.Command("docker", "run", "--rm", "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL",
		"--security-opt", "no-new-privileges:true", "--security-opt", "seccomp=unconfined", "--security-opt", "systempaths=unconfined",
		"-w", "/data", "--entrypoint", "fluffy", image, "sandbox", "run", "--", "echo", "sandboxed").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "sandboxed\n") {
		t.Errorf("the sandbox with seccomp=unconfined and systempaths=unconfined: %v\n%s", err, out)
	}
	t.Logf("the whole test: %s", time.Since(t0).Round(time.Millisecond))
}

// sessionIDs are the first column of "fluffy session ls" after its
// header.
func sessionIDs(ls string) []string {
	var ids []string
	for i, l := range strings.Split(strings.TrimSpace(ls), "\n") {
		if f := strings.Fields(l); i > 0 && len(f) > 0 {
			ids = append(ids, f[0])
		}
	}
	return ids
}

// buildImage builds the three static binaries and fluffy's image from
// them on the base image, tagged by the content of all four (binaries,
// Dockerfile, the base image's id): an unchanged build is not rebuilt.
func buildImage(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the binaries with")
	}
	bin := t.TempDir()
	for _, b := range []struct{ out, pkg, tags string }{
		{"fluffy", ".", "fluffy_front"},
		{"fluffy-core", ".", "goolm"},
		{"fluffy-sandbox-init", "../fluffy-sandbox-init", ""},
	} {
		cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags", "-s -w", "-tags", b.tags, "-o", filepath.Join(bin, b.out), b.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.out, err, out)
		}
	}
	// The base image is built from the host's apt sources, once (its
	// content label makes a second build a no-op).
	if out, err := exec.Command(filepath.Join(bin, "fluffy-core"), "image", "build", "base").CombinedOutput(); err != nil {
		t.Fatalf("fluffy image build base: %v\n%s", err, out)
	}
	baseID, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", "fluffy-base:latest").Output()
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	h.Write(baseID)
	for _, f := range []string{"../../deploy/Dockerfile", filepath.Join(bin, "fluffy"), filepath.Join(bin, "fluffy-core"), filepath.Join(bin, "fluffy-sandbox-init")} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(f), len(b))
		h.Write(b)
	}
	tag := "fluffy-e2e:" + hex.EncodeToString(h.Sum(nil))[:16]
	pruneE2EImages(t, tag)
	if exec.Command("docker", "image", "inspect", tag).Run() == nil {
		return tag
	}
	if out, err := exec.Command("docker", "build", "-q", "-f", "../../deploy/Dockerfile", "-t", tag, bin).CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	return tag
}

// e2eImageGrace is how old another fluffy-e2e image must be before a
// test removes it: a younger one may belong to a run going on beside
// this one (another checkout on the same engine).
const e2eImageGrace = time.Hour

// pruneE2EImages removes the fluffy-e2e images that earlier runs built
// from other binaries, so a machine that runs the test at every change
// does not fill up; keep (this run's tag) stays. An image a container
// still uses is not removed (docker refuses, the test goes on).
func pruneE2EImages(t *testing.T, keep string) {
	t.Helper()
	out, err := exec.Command("docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}\t{{.CreatedAt}}", "fluffy-e2e").Output()
	if err != nil {
		t.Logf("listing the old fluffy-e2e images: %v", err)
		return
	}
	stale := staleE2EImages(string(out), keep, time.Now().Add(-e2eImageGrace))
	for _, ref := range stale {
		if out, err := exec.Command("docker", "image", "rm", ref).CombinedOutput(); err != nil {
			t.Logf("docker image rm %s: %v: %s", ref, err, bytes.TrimSpace(out))
		}
	}
	if len(stale) > 0 {
		t.Logf("removed up to %d old fluffy-e2e images", len(stale))
	}
}

// staleE2EImages picks from listing (lines "fluffy-e2e:TAG<TAB>created",
// as docker image ls formats them) the images to remove: every
// fluffy-e2e tag but keep created before cutoff. A line it cannot read
// is kept.
func staleE2EImages(listing, keep string, cutoff time.Time) []string {
	var stale []string
	for _, line := range strings.Split(listing, "\n") {
		ref, created, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if !ok || ref == keep {
			continue
		}
		repo, tag, _ := strings.Cut(ref, ":")
		if repo != "fluffy-e2e" || tag == "" || tag == "<none>" {
			continue
		}
		// docker prints time.Time's String, maybe with a monotonic
		// reading or a zone name only.
		created, _, _ = strings.Cut(created, " m=")
		at, err := time.Parse("2006-01-02 15:04:05 -0700 MST", created)
		if err != nil || !at.Before(cutoff) {
			continue
		}
		stale = append(stale, ref)
	}
	return stale
}

// waitHealthy waits (a minute at most) for the container's health check
// to pass.
func waitHealthy(t *testing.T, id string) {
	t.Helper()
	defer func() {
		if t.Failed() {
			out, _ := exec.Command("docker", "inspect", "--format", "{{json .State}}", id).CombinedOutput()
			t.Logf("the container's state: %s", out)
		}
	}()
	waitFor(t, "the container's health check", func() bool {
		out, _ := exec.Command("docker", "inspect", "--format", "{{.State.Health.Status}}", id).Output()
		return strings.TrimSpace(string(out)) == "healthy"
	})
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for !ok() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within a minute", what)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestStaleE2EImages: the compose test's clean-up removes only other
// fluffy-e2e images old enough not to be a run beside it, never its own,
// never another repository's, never one it cannot read the age of.
func TestStaleE2EImages(t *testing.T) {
	listing := "fluffy-e2e:aaaa\t2026-11-28 04:47:34 +0000 UTC\n" + // this run's, old: kept
		"fluffy-e2e:bbbb\t2026-11-28 03:00:00 +0000 UTC\n" + // old: removed
		"fluffy-e2e:cccc\t2026-11-28 04:30:00 +0000 UTC\n" + // younger than the cutoff: kept
		"fluffy-e2e:dddd\t2026-11-27 23:59:59 +0000 UTC\n" + // old: removed
		"fluffy-e2e:<none>\t2026-11-27 23:59:59 +0000 UTC\n" + // untagged: not by name
		"fluffy-base:latest\t2026-11-27 23:59:59 +0000 UTC\n" + // another repository
		"fluffy-e2e:eeee\tsome day\n" + // unreadable: kept
		"fluffy-e2e:ffff\t2026-11-28 04:59:59 +0100 CET\n" + // 03:59:59 UTC: removed
		"\n"
	cutoff := time.Date(2026, 11, 28, 4, 0, 0, 0, time.UTC)
	got := staleE2EImages(listing, "fluffy-e2e:aaaa", cutoff)
	if want := []string{"fluffy-e2e:bbbb", "fluffy-e2e:dddd", "fluffy-e2e:ffff"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("stale %v, want %v", got, want)
	}
}
