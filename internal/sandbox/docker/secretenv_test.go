package docker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/moby/moby/client"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
	"github.com/fluffy-agent/fluffy/internal/secret"
)

func TestSecretEnv(t *testing.T) {
	engine(t)
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		host = "unix:///var/run/docker.sock"
	}
	testSecretEnv(t, host, true)
}

// recorder is a proxy in front of an engine's socket that keeps every
// byte the client sends.
type recorder struct {
	mu   sync.Mutex
	sent bytes.Buffer
}

// listen serves a socket forwarding to the engine at host (unix://) and
// returns the socket's address.
func (rec *recorder) listen(t *testing.T, host string) string {
	sock := filepath.Join(t.TempDir(), "engine.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			e, err := net.Dial("unix", strings.TrimPrefix(host, "unix://"))
			if err != nil {
				c.Close()
				continue
			}
			go func() {
				_, _ = io.Copy(c, e)
				c.Close()
			}()
			go func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					rec.mu.Lock()
					rec.sent.Write(buf[:n])
					rec.mu.Unlock()
					if _, werr := e.Write(buf[:n]); werr != nil || err != nil {
						if cw, ok := e.(interface{ CloseWrite() error }); ok && err == io.EOF {
							_ = cw.CloseWrite()
							return
						}
						e.Close()
						return
					}
				}
			}()
		}
	}()
	return "unix://" + sock
}

func (rec *recorder) contains(s string) bool {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return bytes.Contains(rec.sent.Bytes(), []byte(s))
}

// testSecretEnv: a variable whose bytes are in the spec's arena reaches
// the command through the container's environment file, never the
// engine's API (the container's and the exec's configuration do not
// hold it), the file is gone before the command runs, and the output is
// captured in the arena.
//
// With record, the engine is reached through a recorder, which checks
// that the value is in no request. Not for Podman: the runtime reads the
// engine's rlimits from its socket's peer, which would be the recorder.
func testSecretEnv(t *testing.T, host string, record bool) {
	ctx := context.Background()
	rec := &recorder{}
	if record {
		host = rec.listen(t, host)
	}
	rt, err := docker.New(ctx, docker.Options{Host: host, Image: testImage, Session: "test-" + t.Name(), Template: "code-executor", StateDir: stateDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	value := "s3cr'et \"q\" $HOME `x`\nline-" + strings.Repeat("z", 5000)
	arena := &secret.Arena{}
	defer arena.Wipe()
	entry := arena.String([]byte("TOKEN="), []byte(value))
	inst, err := rt.Start(ctx, sandbox.Spec{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	in := inst.(*docker.Instance)
	spec := sandbox.Spec{Argv: []string{"sh", "-c", `printf '%s' "$TOKEN"; echo; echo "plain=$PLAIN"; ls -A /.fluffy-env; cat /.fluffy-env/* 2>&1 | head -c 100`},
		Env: []string{"PATH=/bin", entry, "PLAIN=visible"}, Scratch: arena, Limits: sandbox.Limits{Wall: 30 * time.Second, Output: 1 << 20}}
	res, err := in.Run(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	want := value + "\nplain=visible\n"
	if res.ExitCode != 0 || !strings.HasPrefix(string(res.Stdout), want) {
		t.Fatalf("exit %d stdout %.200q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if rest := string(res.Stdout[len(want):]); strings.Contains(rest, "env-") || strings.Contains(rest, "s3cr") {
		t.Errorf("the command saw the environment file: %q", rest)
	}
	if !arena.Holds(unsafe.String(&res.Stdout[0], len(res.Stdout))) {
		t.Error("the output is not in the arena")
	}
	info, err := rt.Client().ContainerInspect(ctx, in.ID(), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(info.Container.Config.Env, func(e string) bool { return strings.Contains(e, "s3cr") }) ||
		strings.Contains(strings.Join(info.Container.Config.Cmd, " "), "s3cr") {
		t.Errorf("the container's configuration holds the value: %q", info.Container.Config.Env)
	}
	if rec.contains("line-zzzzzzzz") {
		t.Error("the value went to the engine's API")
	}
	// A missing program under the wrapper is still a missing program.
	spec.Argv = []string{"no-such-program"}
	if _, err := in.Run(ctx, spec); !errors.Is(err, sandbox.ErrCommandNotFound) {
		t.Errorf("a missing program: %v", err)
	}
}

// TestStdinFile: a command's standard input held in memory is there
// before the command starts (a file of the container's, not the exec's
// stream), so a command that never reads it and ends at once keeps its
// output; with the stream, Podman lost it about one run in two (and put
// a message of its own in stderr). A command that reads it gets it
// whole, and the file is gone once it has started.
func TestStdinFile(t *testing.T) {
	engine(t)
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		host = "unix:///var/run/docker.sock"
	}
	testStdinFile(t, host)
}

func testStdinFile(t *testing.T, host string) {
	ctx := context.Background()
	rt, err := docker.New(ctx, docker.Options{Host: host, Image: testImage, Session: "test-" + t.Name(), Template: "code-executor", StateDir: stateDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	inst, err := rt.Start(ctx, sandbox.Spec{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	in := inst.(*docker.Instance)
	run := func(script, stdin string) sandbox.Result {
		t.Helper()
		res, err := in.Run(ctx, sandbox.Spec{Argv: []string{"sh", "-c", script}, Env: []string{"PATH=/bin"},
			Stdin: bytes.NewReader([]byte(stdin)), Limits: sandbox.Limits{Wall: 30 * time.Second, Output: 1 << 20}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for i := range 12 {
		if res := run("echo out", `{"unread": true}`); string(res.Stdout) != "out\n" || len(res.Stderr) != 0 {
			t.Fatalf("run %d of a command that does not read its stdin: stdout %q stderr %q", i, res.Stdout, res.Stderr)
		}
	}
	big := strings.Repeat("line of input\n", 5000)
	if res := run("cat", big); string(res.Stdout) != big {
		t.Fatalf("cat: %d bytes out of %d, stderr %q", len(res.Stdout), len(big), res.Stderr)
	}
	info, err := rt.Client().ContainerInspect(ctx, in.ID(), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/root/.fluffy-env", info.Container.State.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("left in the container: %s", e.Name())
	}
}
