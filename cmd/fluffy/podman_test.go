package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
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
