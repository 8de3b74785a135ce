package skillimage_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
	"github.com/fluffy-agent/fluffy/internal/sandbox/docker/skillimage"
	"github.com/fluffy-agent/fluffy/internal/skill"
)

// The example skill with a Dockerfile (examples/skills/weather) builds
// FROM the Debian base image with its vendored requirement installed, and
// its script, run in that image with only the proxy for a network, asks
// the API through it and prints the forecast.
func TestExampleWeather(t *testing.T) { testExampleWeather(t, engine(t)) }

func testExampleWeather(t *testing.T, cli *client.Client) {
	ctx := t.Context()
	if _, err := cli.ImageInspect(ctx, docker.BaseImage); err != nil {
		if _, err := exec.LookPath("mmdebstrap"); err != nil {
			t.Skip("needs the Debian base image (fluffy image build base), built by mmdebstrap: scripts/deps.sh installs it")
		}
	}
	dir, err := filepath.Abs("../../../../examples/skills/weather")
	if err != nil {
		t.Fatal(err)
	}
	// A copy, so the image's labels name a folder the test owns (a gc
	// afterwards removes the image with the folder).
	s := skill.Skill{Name: "weather", Dir: t.TempDir(), Manifest: skill.Manifest{Image: skill.Image{Dockerfile: "Dockerfile"}}}
	if err := os.CopyFS(s.Dir, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	removeSkillImages(t, cli, s)
	// The base image's build takes the lock the cmd/fluffy scripts'
	// builds of it take (the default lock directory).
	b := skillimage.New(skillimage.Options{Client: cli, LockDir: t.TempDir(), EnsureBase: func(ctx2 context.Context) error {
		_, err := docker.EnsureBasePresent(ctx2, cli, docker.DebianOptions{})
		return err
	}})
	var progress strings.Builder
	res, err := b.Build(ctx, s, &progress)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	// The image holds the requirement (asked of the image: its RUN step
	// may come from the engine's cache, built by another test from the
	// same context, and then prints nothing).
	ctr, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: &container.Config{Image: res.Ref, Cmd: []string{"true"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.ContainerRemove(context.WithoutCancel(ctx), ctr.ID, client.ContainerRemoveOptions{Force: true})
	if _, err := cli.ContainerStatPath(ctx, ctr.ID, client.ContainerStatPathOptions{Path: "/usr/local/lib/weather/wxformat"}); err != nil {
		t.Errorf("the image lacks the requirement (%v):\n%s", err, progress.String())
	}
	// Changing a script the image does not hold (.dockerignore) keeps
	// the image; changing the requirements file rebuilds it.
	os.WriteFile(filepath.Join(s.Dir, "forecast.py"), []byte("# changed\n"), 0o644)
	if ref, built, err := b.Ensure(ctx, s); err != nil || built || ref != res.Ref {
		t.Fatalf("after a script changed: %s built=%v %v; want %s kept", ref, built, err, res.Ref)
	}
	os.WriteFile(filepath.Join(s.Dir, "requirements.txt"), []byte("wxformat\nnotvendored\n"), 0o644)
	if _, err := b.Build(ctx, s, nil); err == nil || !strings.Contains(err.Error(), "Dockerfile:8: RUN sh /opt/weather/install.sh") {
		t.Fatalf("a requirement not vendored: %v, want the failing line", err)
	}

	// The API behind a stand-in for the egress proxy: a plain HTTP proxy
	// on a unix socket, which the container reaches at
	// sandbox.ProxyListen.
	sock := filepath.Join(t.TempDir(), "proxy.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var asked []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.Method+" "+r.URL.String()+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		if r.URL.Host != "api.weather.test" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"summary": "light rain", "low": 4.2, "high": 9.6})
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	rt, err := docker.New(ctx, docker.Options{Host: cli.DaemonHost(), Image: res.Ref, Session: "test-" + t.Name(), StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	out, err := rt.Run(ctx, sandbox.Spec{
		Argv:        []string{"python3", "/skills/weather/forecast.py"},
		Env:         []string{"PATH=/usr/bin:/bin", "HTTP_PROXY=http://" + sandbox.ProxyListen, "WEATHER_TOKEN=tok"},
		Mounts:      []sandbox.Mount{{Source: dir, Target: "/skills/weather"}},
		Network:     sandbox.NetworkProxy,
		Seccomp:     "standard-net",
		ProxySocket: sock,
		Stdin:       strings.NewReader(`{"city": "Oslo"}`),
		Limits:      sandbox.Limits{Output: 1 << 16, Wall: 60 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.TrimSpace(string(out.Stdout)); out.ExitCode != 0 || got != "Oslo: light rain, 4-10 C" {
		t.Fatalf("exit %d, stdout %q, stderr %q; proxy saw %q", out.ExitCode, got, out.Stderr, asked)
	}
	if len(asked) != 1 || asked[0] != "GET http://api.weather.test/v1/forecast?city=Oslo Bearer tok" {
		t.Errorf("proxy saw %q", asked)
	}
}
