package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/moby/moby/client"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
)

// podmanHost is Podman's Docker-compatible API socket: FLUFFY_PODMAN_HOST,
// else the rootful default of `podman system service`.
func podmanHost() string {
	if h := os.Getenv("FLUFFY_PODMAN_HOST"); h != "" {
		return h
	}
	return "unix:///run/podman/podman.sock"
}

// TestPodmanScripts runs the container scripts (testdata/script/
// *_docker.txtar) against Podman: DOCKER_HOST names Podman's socket, so
// the runtime docker of every fluffy the scripts start talks to Podman's
// Docker-compatible API, images and all. Without Podman the scripts skip,
// except in CI (scripts/deps.sh installs and starts it), where they fail.
func TestPodmanScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/script/*_docker.txtar")
	if err != nil || len(files) == 0 {
		t.Fatalf("no container scripts: %v", err)
	}
	host := podmanHost()
	if !testing.Short() && os.Geteuid() == 0 {
		if err := copyBaseImage(t.Context(), host); err != nil {
			t.Logf("the scripts build the base image in Podman themselves: %v", err)
		}
	}
	testscript.Run(t, testscript.Params{
		Files: files,
		Setup: func(env *testscript.Env) error {
			env.Setenv("DOCKER_HOST", host)
			return scriptSetup(env)
		},
		Condition: engineCondition(host, "CI starts Podman's API service (scripts/deps.sh)"),
		Cmds:      scriptCmds,
	})
}

// copyBaseImage loads Docker's base image into Podman (an image save and
// load through both engines' APIs) when Docker's is the Debian image of
// the current recipe and Podman's is not: the Docker scripts, which run
// first, have built it, and a second build from the apt sources would
// double the time of this leg. The copy carries the recipe's label, so
// 'fluffy image build base' in the scripts finds it up to date, as it
// would after its own build.
func copyBaseImage(ctx context.Context, host string) error {
	want, err := docker.DebianContent(docker.DebianOptions{})
	if err != nil {
		return err
	}
	from, err := docker.New(ctx, docker.Options{})
	if err != nil {
		return err
	}
	defer from.Close()
	to, err := docker.New(ctx, docker.Options{Host: host})
	if err != nil {
		return err
	}
	defer to.Close()
	label := func(cli *client.Client) string {
		img, err := cli.ImageInspect(ctx, docker.BaseImage)
		if err != nil || img.Config == nil {
			return ""
		}
		return img.Config.Labels[docker.LabelContent]
	}
	if label(from.Client()) != want || label(to.Client()) == want {
		return nil
	}
	saved, err := from.Client().ImageSave(ctx, []string{docker.BaseImage})
	if err != nil {
		return err
	}
	defer saved.Close()
	loaded, err := to.Client().ImageLoad(ctx, saved, client.ImageLoadWithQuiet(true))
	if err != nil {
		return err
	}
	defer loaded.Close()
	_, err = io.Copy(io.Discard, loaded)
	return err
}
