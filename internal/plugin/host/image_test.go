package host_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/fluffy-agent/fluffy/internal/plugin"
	"github.com/fluffy-agent/fluffy/internal/plugin/host"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// imageEngine is the docker runtime with a plugin image built locally:
// the wordcount example, static, FROM a busybox base (no registry here),
// tagged name; it returns the runtime and the image's ID.
func imageEngine(t *testing.T, session, name string) (*docker.Runtime, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: builds an image and starts containers")
	}
	if os.Geteuid() != 0 {
		t.Skip("the docker backend mounts on the host: run as root")
	}
	ctx := t.Context()
	rt, err := docker.New(ctx, docker.Options{Session: session, Template: "plugin", StateDir: "/run/fluffy/docker-plugin-test-" + strconv.Itoa(os.Getpid())})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI installs and starts dockerd (scripts/deps.sh), but: %v", err)
		}
		t.Skipf("no container engine reachable (outside CI, so skipping): %v", err)
	}
	t.Cleanup(func() { rt.Close() })
	const base = "fluffy-plugin-test-base:latest"
	if _, err := docker.EnsureBaseImage(ctx, rt.Client(), docker.BaseOptions{Tag: base}); err != nil {
		t.Fatalf("base image: %v", err)
	}
	bctx := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bctx, "wordcount"), ".")
	build.Dir = filepath.Join(repoRoot(t), "examples", "plugins", "wordcount")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	df := "FROM " + base + "\nCOPY wordcount /usr/local/bin/wordcount\nCMD [\"/usr/local/bin/wordcount\"]\n"
	if err := os.WriteFile(filepath.Join(bctx, "Dockerfile"), []byte(df), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := docker.BuildDir(ctx, rt.Client(), bctx, name); err != nil {
		t.Fatalf("plugin image: %v", err)
	}
	img, err := rt.Client().ImageInspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return rt, img.ID
}

// imageHost starts m on rt: as the session's runtime, or with images
// as Options.Images beside a session that runs natively.
func imageHost(t *testing.T, rt *docker.Runtime, images bool, session, ws string, m plugin.Manifest) (*tool.Registry, host.Report, *plugin.MemStore) {
	t.Helper()
	st := plugin.NewMemStore()
	st.Put(plugin.Record{Manifest: m, Dir: openDir(t), State: plugin.Enabled})
	o := host.Options{Store: st, Audit: &memAudit{}, Runtimes: map[string]sandbox.Runtime{"docker": rt}, DefaultRuntime: "docker",
		Session: session, Workspace: ws, Ping: 200 * time.Millisecond, StartTimeout: 20 * time.Second}
	if images {
		o.Runtimes, o.DefaultRuntime, o.Images = map[string]sandbox.Runtime{"native": notImages{rt}}, "native", rt
	}
	h, err := host.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	reg := tool.NewRegistry()
	reps, err := h.Start(t.Context(), reg)
	if err != nil || len(reps) != 1 {
		t.Fatalf("start: %v %+v", err, reps)
	}
	return reg, reps[0], st
}

// notImages is a runtime that runs no image (the native one, say).
type notImages struct{ sandbox.Runtime }

// TestImagePlugin: a plugin whose manifest names an image pinned by its
// digest runs in a container of exactly that image through the docker
// runtime, with the manifest's limits, no network, the workspace
// read-only (read-workspace); its tools are listed and called through
// the host. Over stdio on the session's docker runtime, and over
// streamable HTTP on the socket it shares with fluffy, run through
// Options.Images for a session whose own runtime is another.
func TestImagePlugin(t *testing.T) {
	t.Run("stdio", func(t *testing.T) { testImagePlugin(t, "", false) })
	t.Run("http-images", func(t *testing.T) { testImagePlugin(t, "http", true) })
}

func testImagePlugin(t *testing.T, transport string, images bool) {
	session := "plugimg-" + transport + strconv.Itoa(os.Getpid())
	const name = "fluffy-plugin-test-wordcount:latest"
	rt, id := imageEngine(t, session, name)
	ws := openDir(t)
	if err := os.WriteFile(filepath.Join(ws, "README.md"), []byte("hello image\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := plugin.Manifest{Name: "wordcount", Version: "1", Run: plugin.Run{Image: "fluffy-plugin-test-wordcount@" + id, Transport: transport},
		Sandbox:      plugin.Sandbox{Memory: 96 << 20, PIDs: 32},
		Capabilities: []plugin.Capability{plugin.CapReadWorkspace}}
	reg, rep, _ := imageHost(t, rt, images, session, ws, m)
	if rep.Err != nil || !slices.Equal(rep.Tools, []string{"mcp.wordcount.count", "mcp.wordcount.count_file"}) {
		t.Fatalf("report %+v", rep)
	}
	res, err := call(t, reg, "mcp.wordcount.count_file", map[string]any{"path": "README.md"})
	if err != nil || !strings.Contains(string(res.Output), `"words":2`) {
		t.Fatalf("count_file: %q %v", res.Output, err)
	}
	cs, err := rt.Client().ContainerList(t.Context(), client.ContainerListOptions{Filters: make(client.Filters).Add("label", docker.LabelSession+"="+session)})
	if err != nil || len(cs.Items) != 1 {
		t.Fatalf("containers: %v %+v", err, cs)
	}
	info, err := rt.Client().ContainerInspect(t.Context(), cs.Items[0].ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := info.Container
	if c.Image != id || c.HostConfig.Memory != 96<<20 || c.HostConfig.PidsLimit == nil || *c.HostConfig.PidsLimit != 34 || c.HostConfig.NetworkMode != "none" {
		t.Errorf("container: image %s memory %d pids %v network %s", c.Image, c.HostConfig.Memory, c.HostConfig.PidsLimit, c.HostConfig.NetworkMode)
	}
	for _, mt := range c.Mounts {
		if mt.Destination == ws && mt.RW {
			t.Errorf("the workspace is writable: %+v", mt)
		}
	}
}

// TestImagePluginWrongDigest: a name that holds another image than the
// one pinned is refused and the plugin disabled; nothing runs.
func TestImagePluginWrongDigest(t *testing.T) {
	session := "plugimg-wrong-" + strconv.Itoa(os.Getpid())
	const name = "fluffy-plugin-test-wordcount:latest"
	rt, _ := imageEngine(t, session, name)
	m := plugin.Manifest{Name: "wordcount", Version: "1",
		Run: plugin.Run{Image: "fluffy-plugin-test-wordcount@sha256:" + strings.Repeat("0", 64)}}
	_, rep, st := imageHost(t, rt, false, session, "", m)
	if !errors.Is(rep.Err, sandbox.ErrImageDigest) {
		t.Fatalf("report %+v", rep)
	}
	if r, _ := st.Get(context.Background(), "wordcount"); r.State != plugin.Disabled {
		t.Errorf("state %s (%s)", r.State, r.Reason)
	}
}
