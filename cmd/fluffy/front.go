//go:build fluffy_front

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fluffy-agent/fluffy/internal/buildinfo"
	"github.com/fluffy-agent/fluffy/internal/sandboxd"
)

// coreName is the full build, installed beside the front build.
const coreName = "fluffy-core"

func main() {
	os.Exit(run())
}

func run() int {
	args := os.Args[1:]
	if len(args) == 1 && args[0] == "version" {
		i := buildinfo.Get()
		fmt.Printf("fluffy %s\ncommit %s\n%s %s\n", i.Version, i.Commit, i.GoVersion, i.Platform)
		return 0
	}
	self, core, err := binaries()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fluffy:", err)
		return 1
	}
	if !sandboxd.Forwardable(args) || os.Getenv("FLUFFY_SANDBOX_SERVER") == "off" {
		return handOver(self, core)
	}
	reply, err := forward(core, args)
	switch {
	case errors.Is(err, sandboxd.ErrUnavailable):
		// Nothing ran: fluffy-core runs the command itself.
		debugf("fluffy: the sandbox server is unavailable, running the command in this process: %v", err)
		return handOver(self, core)
	case err != nil:
		// The request was delivered: the command may have run, so it is
		// not run again.
		fmt.Fprintln(os.Stderr, "fluffy:", err)
		fmt.Fprintln(os.Stderr, "fluffy: the outcome of the command is unknown; FLUFFY_SANDBOX_SERVER=off runs commands without the server")
		return 1
	case reply.HandOver:
		return handOver(self, core)
	}
	return reply.Code
}

// forward sends the command line to the sandbox server of core, starting
// one when none answers.
func forward(core string, args []string) (sandboxd.Reply, error) {
	sock, err := sandboxd.SocketPath(core)
	if err != nil {
		return sandboxd.Reply{}, fmt.Errorf("%w: %w", sandboxd.ErrUnavailable, err)
	}
	cwd, err := os.Getwd()
	if err != nil {
		return sandboxd.Reply{}, fmt.Errorf("%w: working directory: %w", sandboxd.ErrUnavailable, err)
	}
	return sandboxd.Call(context.Background(), sandboxd.ClientOptions{
		Socket: sock,
		Server: []string{core, "sandbox", "serve", "--socket", sock},
		// A short command never pays for catching signals (~1 ms of
		// CPU); a Ctrl-C sooner kills fluffy, and the server, seeing it
		// gone, stops the command all the same.
		CatchSignalsAfter: 50 * time.Millisecond,
	}, sandboxd.Request{Args: args, Environ: os.Environ(), Cwd: cwd})
}

// binaries locates this binary and fluffy-core beside it.
func binaries() (self, core string, err error) {
	self, err = os.Executable()
	if err == nil {
		self, err = filepath.EvalSymlinks(self)
	}
	if err != nil {
		return "", "", fmt.Errorf("locate the fluffy binary: %w", err)
	}
	return self, filepath.Join(filepath.Dir(self), coreName), nil
}

// handOver replaces this process with fluffy-core, passing the command
// line and environment unchanged: same pid, same terminal, same signals,
// and fluffy-core's exit status is the command's. It returns only when
// fluffy-core cannot be started.
func handOver(self, core string) int {
	if si, err := os.Stat(self); err == nil {
		if ci, err := os.Stat(core); err == nil && os.SameFile(si, ci) {
			fmt.Fprintf(os.Stderr, "fluffy: %s is this same front binary, not the full build; reinstall fluffy (make install)\n", core)
			return 1
		}
	}
	err := syscall.Exec(core, os.Args, os.Environ())
	fmt.Fprintf(os.Stderr, "fluffy: this command needs %s, the full build of fluffy, beside %s: %v\n", coreName, self, err)
	fmt.Fprintf(os.Stderr, "fix: install fluffy's three binaries side by side (fluffy, %s, fluffy-sandbox-init): make install, or make build and use bin/\n", coreName)
	return 1
}

// debugf prints when --debug or a debug log level is asked for in the
// environment; the front does not parse flags beyond what it forwards.
func debugf(format string, args ...any) {
	if os.Getenv("FLUFFY_LOG_LEVEL") == "debug" || hasArg("--debug") {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}
}

func hasArg(a string) bool {
	for _, x := range os.Args[1:] {
		if x == "--" {
			return false
		}
		if x == a {
			return true
		}
	}
	return false
}
