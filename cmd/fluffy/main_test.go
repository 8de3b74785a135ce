package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native"
	"github.com/fluffy-agent/fluffy/internal/sandbox/sandboxtest"
)

// TestMain lets testscript run this test binary as the "fluffy" command, so
// the scripts in testdata/script exercise the real command tree, exit codes
// and output, re-executions included.
func TestMain(m *testing.M) {
	// os.Executable is this test binary: the sandbox init re-executes it.
	if native.IsInit() {
		os.Exit(native.InitMain())
	}
	testscript.Main(m, map[string]func(){
		"fluffy": func() { os.Exit(run()) },
	})
}

// TestScripts runs testdata/script/*.txtar. Each script starts with an empty
// $HOME and $WORK; see the testscript package for the language.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		Setup:               scriptSetup,
		RequireExplicitExec: false,
		Condition:           scriptCondition,
		Cmds:                scriptCmds,
	})
}

// scriptSetup prepares every script's environment.
func scriptSetup(env *testscript.Env) error {
	env.Setenv("XDG_CONFIG_HOME", env.WorkDir+"/.config")
	env.Setenv("XDG_DATA_HOME", env.WorkDir+"/.local/share")
	// The host's Go build cache, for scripts that run the real go
	// on the host (never handed to a sandbox).
	env.Setenv("HOST_GOCACHE", hostGoCache())
	// The repository's examples (examples/skills), which scripts copy.
	if ex, err := filepath.Abs(filepath.Join("..", "..", "examples")); err == nil {
		env.Setenv("EXAMPLES", ex)
	}
	// Where a script keeps what a person looks at afterwards (the web
	// console's screenshots): go test -artifacts keeps it.
	if a, ok := env.T().(interface{ ArtifactDir() string }); ok && strings.Contains(env.T().(interface{ Name() string }).Name(), "browser") {
		env.Setenv("ARTIFACTS", a.ArtifactDir())
	}
	// Sandbox scripts change the host's mount table (containers)
	// and cgroups: hold the lock the sandbox suites take while
	// they watch those.
	if n, ok := env.T().(interface{ Name() string }); ok && strings.Contains(n.Name(), "sandbox") {
		release, err := sandboxtest.AcquireHostLock()
		if err != nil {
			return err
		}
		env.Defer(release)
	}
	return nil
}

// scriptCondition answers [matrix] (this test binary has the Matrix
// scripts' commands: it was built with -tags goolm, as make test does)
// and [docker].
func scriptCondition(cond string) (bool, error) {
	if cond == "matrix" {
		return scriptCmds["mx"] != nil, nil
	}
	return engineCondition("", "CI starts dockerd")(cond)
}

// engineCondition answers [docker]: the container engine at host (empty:
// DOCKER_HOST, else Docker's socket) answers and we are root (the
// workspace overlay is mounted on the host). In CI, which installs and
// starts the engine (ci says so), a missing engine fails the script
// instead.
func engineCondition(host, ci string) func(string) (bool, error) {
	return func(cond string) (bool, error) {
		if cond != "docker" {
			return false, fmt.Errorf("unknown condition %q", cond)
		}
		if os.Geteuid() != 0 {
			return false, nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rt, err := docker.New(ctx, docker.Options{Host: host})
		if err != nil {
			if os.Getenv("CI") == "true" {
				return false, fmt.Errorf("%s, but: %w", ci, err)
			}
			return false, nil
		}
		rt.Close()
		return true, nil
	}
}

// hostGoCache is this user's Go build cache ($GOCACHE, else the default
// under the user cache directory), or a fresh directory.
func hostGoCache() string {
	if c := os.Getenv("GOCACHE"); c != "" && c != "off" {
		return c
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "go-build")
	}
	return filepath.Join(os.TempDir(), "fluffy-test-gocache")
}
