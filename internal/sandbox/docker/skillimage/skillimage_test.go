package skillimage_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
	"github.com/fluffy-agent/fluffy/internal/sandbox/docker/skillimage"
	"github.com/fluffy-agent/fluffy/internal/skill"
)

// testBase is the busybox base the tests build FROM (its own tag, so the
// docker package's tests, which add files to theirs, do not rebuild it).
const testBase = "fluffy-skillimage-test-base:latest"

var (
	baseOnce sync.Once
	baseErr  error
)

// engine returns a client of the local engine with the test base built.
// Without an engine the test fails in CI (which starts one) and skips
// elsewhere.
func engine(t testing.TB) *client.Client {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: builds images, seconds each; run without -short")
	}
	cli, err := client.New(client.FromEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
		cancel()
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI starts dockerd (scripts/deps.sh), but: %v", err)
		}
		t.Skipf("no container engine reachable (outside CI, so skipping): %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	baseOnce.Do(func() {
		_, baseErr = docker.EnsureBaseImage(context.Background(), cli, docker.BaseOptions{Tag: testBase})
	})
	if baseErr != nil {
		t.Fatalf("building the test base: %v", baseErr)
	}
	return cli
}

// TestPodman runs the engine tests against Podman's Docker-compatible
// API (its classic builder: other progress lines, image names under
// docker.io/).
func TestPodman(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds images, seconds each; run without -short")
	}
	host := os.Getenv("FLUFFY_PODMAN_HOST")
	if host == "" {
		host = "unix:///run/podman/podman.sock"
	}
	cli, err := client.New(client.FromEnv, client.WithHost(host))
	if err == nil {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err = cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
		cancel()
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI installs Podman and starts its API service (scripts/deps.sh), but %s: %v", host, err)
		}
		t.Skipf("Podman is not serving its Docker-compatible API at %s (start it with `podman system service --time=0 %s`, as scripts/deps.sh does): %v", host, host, err)
	}
	t.Cleanup(func() { cli.Close() })
	if _, err := docker.EnsureBaseImage(t.Context(), cli, docker.BaseOptions{Tag: testBase}); err != nil {
		t.Fatalf("building the test base with Podman: %v", err)
	}
	t.Run("rebuild", func(t *testing.T) { testEnsureRebuildsOnChange(t, cli) })
	t.Run("error-line", func(t *testing.T) { testBuildErrorNamesLine(t, cli) })
	t.Run("gc", func(t *testing.T) { testGC(t, cli) })
	t.Run("memory", func(t *testing.T) { testBuildMemoryLimit(t, cli) })
}

// newSkill writes a skill folder with files, a SKILL.md naming it and a
// manifest naming the Dockerfile (as a real one has: a 'skill build --gc'
// running meanwhile sees it as current), and returns its Skill.
func newSkill(t *testing.T, name string, files map[string]string) skill.Skill {
	t.Helper()
	dir := t.TempDir()
	files["SKILL.md"] = "---\nname: " + name + "\ndescription: a test\n---\n"
	files["skill.yaml"] = "image:\n  dockerfile: Dockerfile\n"
	for n, data := range files {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return skill.Skill{Name: name, Dir: dir, Manifest: skill.Manifest{Image: skill.Image{Dockerfile: "Dockerfile"}}}
}

func newBuilder(t testing.TB, cli *client.Client) *skillimage.Builder {
	return skillimage.New(skillimage.Options{Client: cli, Base: testBase, LockDir: t.TempDir()})
}

// removeSkillImages removes every image built from the folder of s at
// the end.
func removeSkillImages(t testing.TB, cli *client.Client, s skill.Skill) {
	t.Cleanup(func() {
		imgs, _ := cli.ImageList(context.Background(), client.ImageListOptions{Filters: make(client.Filters).Add("label", skillimage.LabelDir+"="+s.Dir)})
		for _, img := range imgs.Items {
			cli.ImageRemove(context.Background(), img.ID, client.ImageRemoveOptions{Force: true, PruneChildren: true})
		}
	})
}

// Ensure builds once per build context: unchanged (or only touched)
// files reuse the image, a changed requirements file, mode or
// Dockerfile builds a new one.
func TestEnsureRebuildsOnChange(t *testing.T) { testEnsureRebuildsOnChange(t, engine(t)) }

func testEnsureRebuildsOnChange(t *testing.T, cli *client.Client) {
	ctx := t.Context()
	s := newSkill(t, "skillimage-test-rebuild", map[string]string{
		"Dockerfile":       "FROM fluffy-base\nCOPY requirements.txt /opt/req\nRUN cat /opt/req\n",
		"requirements.txt": "alpha==1\n",
		".dockerignore":    "*.log\n",
	})
	removeSkillImages(t, cli, s)
	b := newBuilder(t, cli)
	builds := 0
	ensure := func(what string) string {
		t.Helper()
		ref, built, err := b.Ensure(ctx, s)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if built {
			builds++
		}
		return ref
	}
	ref1 := ensure("first")
	if !strings.HasPrefix(ref1, "fluffy-skill/skillimage-test-rebuild:") || builds != 1 {
		t.Fatalf("first Ensure: %s, %d builds", ref1, builds)
	}
	if ensure("unchanged") != ref1 || builds != 1 {
		t.Fatalf("an unchanged skill was built again (%d builds)", builds)
	}
	future := time.Now().Add(time.Hour)
	filepath.Walk(s.Dir, func(p string, _ os.FileInfo, _ error) error { return os.Chtimes(p, future, future) })
	os.WriteFile(filepath.Join(s.Dir, "build.log"), []byte("ignored"), 0o644)
	if ensure("touched") != ref1 || builds != 1 {
		t.Fatalf("touching the files or adding an ignored one built again (%d builds)", builds)
	}
	os.WriteFile(filepath.Join(s.Dir, "requirements.txt"), []byte("alpha==2\n"), 0o644)
	ref2 := ensure("requirements changed")
	if ref2 == ref1 || builds != 2 {
		t.Fatalf("a changed requirements file: %s (was %s), %d builds", ref2, ref1, builds)
	}
	os.Chmod(filepath.Join(s.Dir, "requirements.txt"), 0o600)
	if ensure("mode changed") == ref2 || builds != 3 {
		t.Fatalf("a changed mode did not rebuild (%d builds)", builds)
	}
	// The built image is FROM the base and carries the file.
	img, err := cli.ImageInspect(ctx, ref2)
	if err != nil || img.Config.Labels[skillimage.LabelSkill] != s.Name || img.Config.Labels[skillimage.LabelDir] != s.Dir {
		t.Fatalf("labels of %s: %v %v", ref2, img.Config, err)
	}
	// A skill without a Dockerfile runs in the base image.
	plain := skill.Skill{Name: "plain", Dir: t.TempDir()}
	if ref, built, err := b.Ensure(ctx, plain); ref != testBase || built || err != nil {
		t.Errorf("Ensure without a Dockerfile = %q, %v, %v; want the base", ref, built, err)
	}
}

// A step that fails names the Dockerfile's line; the progress shows the
// steps.
func TestBuildErrorNamesLine(t *testing.T) { testBuildErrorNamesLine(t, engine(t)) }

func testBuildErrorNamesLine(t *testing.T, cli *client.Client) {
	s := newSkill(t, "skillimage-test-fail", map[string]string{
		"Dockerfile": "FROM fluffy-base\n# install\nRUN echo one \\\n  two\nRUN exit 3\n",
	})
	removeSkillImages(t, cli, s)
	var progress strings.Builder
	_, err := newBuilder(t, cli).Build(t.Context(), s, &progress)
	var de *skillimage.DockerfileError
	if !errors.As(err, &de) || de.Line != 5 || de.Path != filepath.Join(s.Dir, "Dockerfile") || !strings.Contains(err.Error(), "RUN exit 3") {
		t.Fatalf("err = %v, want a DockerfileError at line 5", err)
	}
	if !strings.Contains(progress.String(), "RUN echo one") {
		t.Errorf("progress:\n%s", progress.String())
	}
	// What the engine cannot parse: its line too.
	os.WriteFile(filepath.Join(s.Dir, "Dockerfile"), []byte("FROM fluffy-base\n\nBOGUS x\n"), 0o644)
	if _, _, err := newBuilder(t, cli).Ensure(t.Context(), s); !errors.As(err, &de) || de.Line != 3 || !strings.Contains(strings.ToLower(err.Error()), "unknown instruction") {
		t.Errorf("an unknown instruction: %v", err)
	}
	// A Dockerfile FROM a registry image is refused before the engine
	// sees it.
	os.WriteFile(filepath.Join(s.Dir, "Dockerfile"), []byte("FROM debian:stable\n"), 0o644)
	if _, _, err := newBuilder(t, cli).Ensure(t.Context(), s); !errors.Is(err, skillimage.ErrRefused) || !errors.As(err, &de) || de.Line != 1 {
		t.Errorf("FROM debian: %v", err)
	}
	// The Dockerfile must be inside the folder and no link.
	for _, df := range []string{"../Dockerfile", "/etc/passwd"} {
		s.Manifest.Image.Dockerfile = df
		if _, _, err := newBuilder(t, cli).Ensure(t.Context(), s); !errors.Is(err, skillimage.ErrInvalid) {
			t.Errorf("dockerfile %q: %v", df, err)
		}
	}
	os.Symlink("/etc/passwd", filepath.Join(s.Dir, "Link"))
	os.Symlink("/etc", filepath.Join(s.Dir, "etc"))
	for _, df := range []string{"Link", "etc/passwd"} {
		s.Manifest.Image.Dockerfile = df
		if _, _, err := newBuilder(t, cli).Ensure(t.Context(), s); !errors.Is(err, skillimage.ErrInvalid) || !strings.Contains(err.Error(), "link") {
			t.Errorf("a Dockerfile through a link (%s): %v", df, err)
		}
	}
}

// A build step's container has the memory limit given (cgroup v2 or v1).
func TestBuildMemoryLimit(t *testing.T) { testBuildMemoryLimit(t, engine(t)) }

func testBuildMemoryLimit(t *testing.T, cli *client.Client) {
	s := newSkill(t, "skillimage-test-memory", map[string]string{
		"Dockerfile": "FROM fluffy-base\nRUN echo limit=$(cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes)\n",
	})
	removeSkillImages(t, cli, s)
	b := skillimage.New(skillimage.Options{Client: cli, Base: testBase, LockDir: t.TempDir(), Memory: 96 << 20})
	var progress strings.Builder
	if _, err := b.Build(t.Context(), s, &progress); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(progress.String(), fmt.Sprintf("limit=%d\n", 96<<20)) {
		t.Errorf("progress:\n%s", progress.String())
	}
}

// A missing base is ErrNoBase, or built through EnsureBase.
func TestMissingBase(t *testing.T) { testMissingBase(t, engine(t)) }

func testMissingBase(t *testing.T, cli *client.Client) {
	s := newSkill(t, "skillimage-test-nobase", map[string]string{"Dockerfile": "FROM fluffy-base\n"})
	removeSkillImages(t, cli, s)
	b := skillimage.New(skillimage.Options{Client: cli, Base: "fluffy-skillimage-no-such-base:latest", LockDir: t.TempDir()})
	if _, _, err := b.Ensure(t.Context(), s); !errors.Is(err, skillimage.ErrNoBase) {
		t.Fatalf("err = %v, want ErrNoBase", err)
	}
	called := 0
	b = skillimage.New(skillimage.Options{Client: cli, Base: "fluffy-skillimage-no-such-base:latest", LockDir: t.TempDir(),
		EnsureBase: func(context.Context) error { called++; return fmt.Errorf("no mmdebstrap") }})
	if _, _, err := b.Ensure(t.Context(), s); err == nil || called != 1 || !strings.Contains(err.Error(), "no mmdebstrap") {
		t.Fatalf("err = %v after %d calls, want EnsureBase's", err, called)
	}
}

// load reads a test skill folder as newSkill wrote it: the name from
// SKILL.md, the Dockerfile's from skill.yaml.
func load(dir string) (skill.Skill, error) {
	md, err := os.ReadFile(filepath.Join(dir, "SKILL.md"))
	if err != nil {
		return skill.Skill{}, err
	}
	name, _, _ := strings.Cut(strings.TrimPrefix(string(md), "---\nname: "), "\n")
	s := skill.Skill{Name: name, Dir: dir}
	if m, err := os.ReadFile(filepath.Join(dir, "skill.yaml")); err == nil {
		s.Manifest.Image.Dockerfile = strings.TrimSpace(strings.TrimPrefix(string(m), "image:\n  dockerfile:"))
	}
	return s, nil
}

// GC removes superseded images and those of skills gone, never one a
// container was created from.
func TestGC(t *testing.T) { testGC(t, engine(t)) }

func testGC(t *testing.T, cli *client.Client) {
	ctx := t.Context()
	name := "skillimage-test-gc"
	s := newSkill(t, name, map[string]string{"Dockerfile": "FROM fluffy-base\nCOPY req /req\n", "req": "1\n"})
	removeSkillImages(t, cli, s)
	b := newBuilder(t, cli)
	old, _, err := b.Ensure(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	// A container of the old image keeps it.
	ctr, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: &container.Config{Image: old, Cmd: []string{"true"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.ContainerRemove(context.Background(), ctr.ID, client.ContainerRemoveOptions{Force: true}) })
	os.WriteFile(filepath.Join(s.Dir, "req"), []byte("2\n"), 0o644)
	mid, _, err := b.Ensure(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(s.Dir, "req"), []byte("3\n"), 0o644)
	cur, _, err := b.Ensure(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	// Outside the roots given only a skill gone counts: the key is the
	// configuration's, which may be another's there.
	got, err := b.GC(ctx, skillimage.GCOptions{Load: load, Roots: []string{t.TempDir()}, DryRun: true})
	for _, c := range got {
		if c.Skill == name {
			t.Errorf("outside the roots: %+v", c)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	got, err = b.GC(ctx, skillimage.GCOptions{Load: load, Roots: []string{filepath.Dir(s.Dir)}})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, c := range got {
		if c.Skill != name {
			continue
		}
		r := c.Reason
		if c.InUse {
			r += " in use"
		}
		reasons[c.Ref] = r
	}
	want := map[string]string{old: skillimage.ReasonSuperseded + " in use", mid: skillimage.ReasonSuperseded}
	if fmt.Sprint(reasons) != fmt.Sprint(want) {
		t.Fatalf("GC found %v, want %v", reasons, want)
	}
	exists := func(ref string) bool { _, err := cli.ImageInspect(ctx, ref); return err == nil }
	if !exists(old) || exists(mid) || !exists(cur) {
		t.Fatalf("after GC: old %v (in use: kept), mid %v (removed), current %v (kept)", exists(old), exists(mid), exists(cur))
	}
	// The skill goes: its image goes, once no container holds it, inside
	// the roots or not.
	os.Remove(filepath.Join(s.Dir, "SKILL.md"))
	cli.ContainerRemove(ctx, ctr.ID, client.ContainerRemoveOptions{Force: true})
	if _, err := b.GC(ctx, skillimage.GCOptions{Load: load, DryRun: true}); err != nil || !exists(cur) {
		t.Fatalf("a dry run removed %s (%v)", cur, err)
	}
	got, err = b.GC(ctx, skillimage.GCOptions{Load: load, Roots: []string{t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	if exists(old) || exists(cur) {
		t.Fatalf("after the skill went: %+v", got)
	}
	for _, c := range got {
		if c.Skill == name && c.Reason != skillimage.ReasonGone {
			t.Errorf("%+v: want %q", c, skillimage.ReasonGone)
		}
	}
}

// GC never removes a layer of a build in progress: the classic builder
// adds the labels one step at a time, so a layer carries the skill's
// name before its folder, and GC, run meanwhile by another process (a
// 'fluffy serve' starting), took the folder-less layer for a skill gone
// and removed it from under the build.
func TestGCKeepsPartialBuild(t *testing.T) {
	cli := engine(t)
	ctx := t.Context()
	body, _, err := docker.DeterministicTar(map[string]docker.TarEntry{
		"Dockerfile": {Type: tar.TypeReg, Mode: 0o644, Data: []byte("FROM " + testBase + "\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	// What a build has after its name's LABEL step and before its
	// folder's: the key and the name, no folder, no tag.
	resp, err := cli.ImageBuild(ctx, bytes.NewReader(body), client.ImageBuildOptions{
		Version: build.BuilderV1, Remove: true, NetworkMode: "none",
		Labels: map[string]string{docker.LabelContent: "partial-" + t.Name(), skillimage.LabelSkill: "skillimage-test-partial"},
	})
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	imgs, err := cli.ImageList(ctx, client.ImageListOptions{Filters: make(client.Filters).Add("label", docker.LabelContent+"=partial-"+t.Name())})
	if err != nil || len(imgs.Items) != 1 {
		t.Fatalf("the partial image: %v %v", imgs, err)
	}
	id := imgs.Items[0].ID
	t.Cleanup(func() { cli.ImageRemove(context.Background(), id, client.ImageRemoveOptions{Force: true}) })
	got, err := newBuilder(t, cli).GC(ctx, skillimage.GCOptions{Load: load})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range got {
		if c.Skill == "skillimage-test-partial" {
			t.Errorf("GC took a build's layer for a stale image: %+v", c)
		}
	}
	if _, err := cli.ImageInspect(ctx, id); err != nil {
		t.Fatalf("GC removed a build's layer: %v", err)
	}
}
