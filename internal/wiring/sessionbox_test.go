package wiring

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
	"github.com/fluffy-agent/fluffy/internal/sandbox/sandboxtest"
	"github.com/fluffy-agent/fluffy/internal/sched"
	"github.com/fluffy-agent/fluffy/internal/tdd"
)

// dockerEngine skips without root and a Docker engine, and makes sure
// the base image exists; it returns the options sessions' runtimes use.
func dockerEngine(t *testing.T) *docker.Options {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: starts containers")
	}
	if os.Geteuid() != 0 {
		t.Skip("the docker backend mounts the workspace overlay on the host: run as root")
	}
	rt, err := docker.New(t.Context(), docker.Options{})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI starts dockerd, but: %v", err)
		}
		t.Skipf("no container engine: %v", err)
	}
	defer rt.Close()
	// An image of its own: the base image's tag holds the Debian image
	// the cmd/fluffy scripts build, which this must not replace under
	// them.
	if _, err := docker.EnsureBaseImage(t.Context(), rt.Client(), docker.BaseOptions{Tag: wiringTestImage}); err != nil {
		t.Fatal(err)
	}
	// Containers change the host's mount table: not while another
	// package runs the adversarial suite (which watches it).
	sandboxtest.LockHost(t)
	return &docker.Options{Image: wiringTestImage, StateDir: "/run/fluffy/docker-test-" + strconv.Itoa(os.Getpid())}
}

// wiringTestImage is the busybox image the session container tests run.
const wiringTestImage = "fluffy-wiring-test:latest"

// sessionContainers lists the ids of the containers labelled with session.
func sessionContainers(t *testing.T, session string) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-aq", "--no-trunc", "--filter", "label="+docker.LabelSession+"="+session).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))
}

// waitContainers waits until session has n containers.
func waitContainers(t *testing.T, session string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ids := sessionContainers(t, session)
		if len(ids) == n || time.Now().After(deadline) {
			if len(ids) != n {
				t.Fatalf("session %s has %d containers, want %d", session, len(ids), n)
			}
			return ids
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSessionContainers: with a container engine, a session's tools come
// with a container started ahead from the session's own sandbox; its
// first command runs there and sees the change set as the kernel left it
// after the container started; a second session gets containers of its
// own, which never see the first session's workspace, change set or
// /tmp; a session that ends loses its containers.
func TestSessionContainers(t *testing.T) {
	eng := dockerEngine(t)
	dir := t.TempDir()
	u := testUser(t, dir, dir)
	log := u.Logger()
	al, j, m := sessionStores(t, dir)
	boxes := newSessionBoxes(log, func() resolved { return resolved{name: "docker", engine: eng} })
	defer boxes.Close()
	tools := sessionTools(u, log, nil, &livePolicy{u: u, log: log, audit: al}, nil, boxes, nil, memoryDeps{now: time.Now}, nil, nil, observe{})
	allow := "rules:\n  - id: run-anything\n    effect: allow\n    match:\n      action: exec\n  - id: run-awk\n    effect: allow\n    match:\n      action: exec\n      exec_capable: true\n"
	if err := os.MkdirAll(filepath.Join(dir, "config", "fluffy"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config", "fluffy", "policy.yaml"), []byte(allow), 0o600); err != nil {
		t.Fatal(err)
	}
	// open starts a session over a new workspace holding file.
	open := func(name, file string) (agent.Tools, string, *changeset.ChangeSet) {
		ws := filepath.Join(dir, name)
		if err := os.MkdirAll(ws, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, file), []byte(name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cs, err := changeset.Begin(t.Context(), ws, filepath.Join(dir, "cs-"+name))
		if err != nil {
			t.Fatal(err)
		}
		id := "test-box-" + name + "-" + strconv.Itoa(os.Getpid())
		st, err := tdd.Resume(t.Context(), j, m, id, tdd.Explore)
		if err != nil {
			t.Fatal(err)
		}
		r, err := tools(t.Context(), kernel.Env{Session: id, Workspace: ws, ChangeSet: cs, TDD: st, Audit: al})
		if err != nil {
			t.Fatal(err)
		}
		return r, id, cs
	}
	shell := func(r agent.Tools, cmd string) string {
		t.Helper()
		args, _ := json.Marshal(map[string]string{"command": cmd})
		res, err := r.Call(t.Context(), llm.ToolCall{ID: "c", Name: "shell.exec", Args: args})
		if err != nil || res.IsError {
			t.Fatalf("shell.exec %q: %v %s", cmd, err, res.Content)
		}
		return res.Content
	}

	ra, a, csA := open("a", "only-a.txt")
	warmA := waitContainers(t, a, 1)
	// The kernel writes to the change set after the container started.
	if err := os.WriteFile(filepath.Join(csA.UpperDir(), "later.txt"), []byte("written later\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// (awk writes /tmp; the policy refuses a shell redirection there.)
	out := shell(ra, `hostname; cat later.txt; awk 'BEGIN { print "secret-a" > "/tmp/left-by-a" }'; cat /tmp/left-by-a`)
	if host := strings.Fields(out)[0]; !strings.HasPrefix(warmA[0], host) {
		t.Fatalf("session a's first command ran in %q, not in its pre-warmed container %s:\n%s", host, warmA[0], out)
	}
	if !strings.Contains(out, "written later") || !strings.Contains(out, "secret-a") {
		t.Fatalf("the pre-warmed container does not see what the kernel wrote after it started:\n%s", out)
	}
	waitContainers(t, a, 1) // the replacement, warmed in the background
	ownA := sessionContainers(t, a)

	rb, b, _ := open("b", "only-b.txt")
	warmB := waitContainers(t, b, 1)
	for _, id := range append(warmA, ownA...) {
		if id == warmB[0] {
			t.Fatalf("session b got session a's container %s", id)
		}
	}
	out = shell(rb, "hostname; cat /tmp/left-by-a 2>&1; ls; ls "+filepath.Join(dir, "a")+" 2>&1; true")
	host := strings.Fields(out)[0]
	if !strings.HasPrefix(warmB[0], host) {
		t.Fatalf("session b's command ran in %q, not in its own container %s", host, warmB[0])
	}
	for _, leak := range []string{"secret-a", "only-a.txt", "later.txt"} {
		if strings.Contains(out, leak) {
			t.Fatalf("session b sees %q of session a:\n%s", leak, out)
		}
	}
	if !strings.Contains(out, "only-b.txt") {
		t.Fatalf("session b does not see its own workspace:\n%s", out)
	}
	// A session that ends loses its containers; the other keeps its own.
	boxes.EndSession(a)
	if ids := sessionContainers(t, a); len(ids) != 0 {
		t.Fatalf("session a ended with %d containers left", len(ids))
	}
	waitContainers(t, b, 1)
	boxes.Close()
	if ids := sessionContainers(t, b); len(ids) != 0 {
		t.Fatalf("the kernel stopped with %d containers of session b left", len(ids))
	}
}

// TestSessionContainerNet: with a container engine and a policy rule
// naming a host, a session's command gets the egress proxy of its call,
// in its pre-warmed container (warmed with the profile such commands
// have), and reaches the allowed host on the host's loopback.
func TestSessionContainerNet(t *testing.T) {
	eng := dockerEngine(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello through the proxy\n")
	}))
	defer srv.Close()
	hostPort := strings.TrimPrefix(srv.URL, "http://")
	dir := t.TempDir()
	u := testUser(t, dir, dir)
	log := u.Logger()
	al, j, m := sessionStores(t, dir)
	boxes := newSessionBoxes(log, func() resolved { return resolved{name: "docker", engine: eng} })
	defer boxes.Close()
	tools := sessionTools(u, log, nil, &livePolicy{u: u, log: log, audit: al}, nil, boxes, nil, memoryDeps{now: time.Now}, nil, nil, observe{})
	rules := "rules:\n  - id: run-anything\n    effect: allow\n    match:\n      action: exec\n" +
		"  - id: local-api\n    effect: allow\n    match: {action: net, host: \"" + hostPort + "\"}\n"
	if err := os.MkdirAll(filepath.Join(dir, "config", "fluffy"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config", "fluffy", "policy.yaml"), []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	cs, err := changeset.Begin(t.Context(), ws, filepath.Join(dir, "cs"))
	if err != nil {
		t.Fatal(err)
	}
	id := "test-net-" + strconv.Itoa(os.Getpid())
	st, err := tdd.Resume(t.Context(), j, m, id, tdd.Explore)
	if err != nil {
		t.Fatal(err)
	}
	r, err := tools(t.Context(), kernel.Env{Session: id, Workspace: ws, ChangeSet: cs, TDD: st, Audit: al})
	if err != nil {
		t.Fatal(err)
	}
	warm := waitContainers(t, id, 1)
	// busybox's wget, which reads http_proxy.
	cmd := "hostname; wget -q -O - " + srv.URL + "/"
	args, _ := json.Marshal(map[string]string{"command": cmd})
	res, err := r.Call(t.Context(), llm.ToolCall{ID: "n1", Name: "shell.exec", Args: args})
	if err != nil || res.IsError {
		t.Fatalf("shell.exec: %v %s", err, res.Content)
	}
	if !strings.Contains(res.Content, "hello through the proxy") {
		t.Fatalf("the allowed host did not answer:\n%s", res.Content)
	}
	if host := strings.Fields(res.Content)[0]; !strings.HasPrefix(warm[0], host) {
		t.Fatalf("the command ran in %q, not in the session's pre-warmed container %s:\n%s", host, warm[0], res.Content)
	}
}

// TestWarmContainerGivesWay: under the container limit (2), a session's
// pre-warmed container holds a slot as a Warm task, and a triggered
// session's command that finds both slots taken (the warm container, a
// command running in another session) has the warm container destroyed,
// not the running command stopped: it runs while the other command still
// runs, and no more than two containers are alive at once.
func TestWarmContainerGivesWay(t *testing.T) {
	eng := dockerEngine(t)
	s, err := sched.New(sched.Options{Limits: sched.Limits{Resources: map[sched.Resource]int64{sched.Containers: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	boxes := newSessionBoxes(slog.New(slog.DiscardHandler), func() resolved { return resolved{name: "docker", engine: eng} })
	boxes.sched = s
	defer boxes.Close()
	ctx := t.Context()
	spec := sandbox.Spec{Env: []string{"PATH=/bin:/usr/bin"}, Limits: sandbox.Limits{Wall: time.Minute}}
	pid := strconv.Itoa(os.Getpid())
	a, b, c := "test-warm-a-"+pid, "test-warm-b-"+pid, "test-warm-c-"+pid
	runtime := func(session string) sandbox.Runtime {
		t.Helper()
		rt, name, _, err := boxes.For(ctx, session)
		if err != nil {
			t.Fatal(err)
		}
		return scheduledRuntime(rt, s, nil, session, name)
	}
	_, _, warm, err := boxes.For(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	warm(spec)
	waitContainers(t, a, 1)
	if st := s.Status(); st.Use[string(sched.Containers)] != 1 {
		t.Fatalf("the pre-warmed container holds no slot: %+v", st.Use)
	}

	// Session b's command runs until it is cancelled.
	bctx, stopB := context.WithCancel(ctx)
	defer stopB()
	bdone := make(chan error, 1)
	rb := runtime(b)
	go func() {
		_, err := rb.Run(bctx, withArgv(spec, "sleep", "600"))
		bdone <- err
	}()
	waitContainers(t, b, 1)

	// Session c's command, in a triggered turn.
	turn, err := s.Acquire(ctx, sched.Task{Class: sched.Triggered, Session: c, Label: "turn"})
	if err != nil {
		t.Fatal(err)
	}
	defer turn.Release()
	res, err := runtime(c).Run(sched.WithLease(ctx, turn), withArgv(spec, "echo", "ran"))
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "ran" {
		t.Fatalf("session c's command: %v %+v", err, res)
	}
	select {
	case err := <-bdone:
		t.Fatalf("the running command ended (%v) instead of the pre-warmed container", err)
	default:
	}
	if ids := sessionContainers(t, a); len(ids) != 0 {
		t.Fatalf("session a's pre-warmed container %v is still there: three containers under a limit of two", ids)
	}
	stopB()
	<-bdone
}

func withArgv(spec sandbox.Spec, argv ...string) sandbox.Spec {
	spec.Argv = argv
	return spec
}
