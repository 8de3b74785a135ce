package main

import (
	"os"
	"os/exec"
	"path/filepath"

	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	scriptCmds["example-plugin"] = examplePlugin
}

// examplePlugin is the script command "example-plugin NAME DIR": it
// copies examples/plugins/NAME's manifest and tests into DIR and builds
// its server there with the host's go (its build cache), as the
// example's README says a person would.
func examplePlugin(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: example-plugin NAME DIR")
	}
	wd, err := os.Getwd()
	ts.Check(err)
	src := filepath.Join(wd, "..", "..", "examples", "plugins", args[0])
	dst := ts.MkAbs(args[1])
	ts.Check(os.MkdirAll(filepath.Join(dst, "tests"), 0o755))
	files, err := filepath.Glob(filepath.Join(src, "tests", "*.json"))
	ts.Check(err)
	for _, f := range append(files, filepath.Join(src, "fluffy-plugin.yaml")) {
		b, err := os.ReadFile(f)
		ts.Check(err)
		rel, err := filepath.Rel(src, f)
		ts.Check(err)
		ts.Check(os.WriteFile(filepath.Join(dst, rel), b, 0o644))
	}
	build := exec.Command("go", "build", "-o", filepath.Join(dst, args[0]), ".")
	build.Dir = src
	build.Env = append(os.Environ(), "GOCACHE="+hostGoCache(), "GOFLAGS=-buildvcs=false -trimpath -tags=goolm")
	if v := ts.Getenv("CGO_ENABLED"); v != "" {
		// A script's CGO_ENABLED=0: a static server, for an image.
		build.Env = append(build.Env, "CGO_ENABLED="+v)
	}
	if out, err := build.CombinedOutput(); err != nil {
		ts.Fatalf("go build: %v\n%s", err, out)
	}
}
