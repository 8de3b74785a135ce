//go:build fluffy_front

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// front says this is the front build (see the package comment).
const front = true

// coreName is the full build, installed beside the front build.
const coreName = "fluffy-core"

// handOver replaces this process with fluffy-core, passing the command
// line and environment unchanged: same pid, same terminal, same signals,
// and fluffy-core's exit status is the command's. It returns only when
// fluffy-core cannot be started.
func handOver() int {
	self, err := os.Executable()
	if err == nil {
		self, err = filepath.EvalSymlinks(self)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fluffy: locate the fluffy binary:", err)
		return 1
	}
	core := filepath.Join(filepath.Dir(self), coreName)
	if si, err := os.Stat(self); err == nil {
		if ci, err := os.Stat(core); err == nil && os.SameFile(si, ci) {
			fmt.Fprintf(os.Stderr, "fluffy: %s is this same front binary, not the full build; reinstall fluffy (make install)\n", core)
			return 1
		}
	}
	err = syscall.Exec(core, os.Args, os.Environ())
	fmt.Fprintf(os.Stderr, "fluffy: this command needs %s, the full build of fluffy, beside %s: %v\n", coreName, self, err)
	fmt.Fprintf(os.Stderr, "fix: install fluffy's three binaries side by side (fluffy, %s, fluffy-sandbox-init): make install, or make build and use bin/\n", coreName)
	return 1
}

// forwarder: the front build never runs the egress forwarder (--net proxy
// is handed over to fluffy-core, which re-executes itself as one).
func forwarder([]string) (int, bool) { return 0, false }
