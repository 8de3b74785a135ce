// Package wiring assembles fluffy's daemon side from its parts: the
// kernel daemon's sessions with their tools, gates and sandbox runtime,
// the live policy they and the approvals decide with, approvals, and the
// sandbox runtimes of 'fluffy sandbox run'. It is the
// one package that links the backends (sandbox/native, sandbox/docker,
// the tool router and built-in tools, the egress proxy); the entry point
// (cmd/fluffy) hands what it builds to the CLI through small interfaces,
// so the CLI itself links none of them.
package wiring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/bootstrap"
	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native"
	"github.com/fluffy-agent/fluffy/internal/sandbox/uppers"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// probes say whether each sandbox runtime is usable here; they are
// fields so that tests can stand in for the host.
type probes struct {
	Native func(ctx context.Context) error
	Engine func(ctx context.Context, runtime string) error
}

// hostProbes checks the real host: the native sandbox's facilities (a
// real probe sandbox; missing required ones are fine with
// sandbox.allow_degraded), and a container engine answering a ping.
func hostProbes(u *userenv.Env, allowDegraded bool) probes {
	return probes{
		Native: func(ctx context.Context) error {
			var missing []string
			for _, f := range native.Detect(ctx, native.DetectOptions{Self: u.Self}) {
				if f.Required && !f.Available {
					missing = append(missing, fmt.Sprintf("%s: %s (fix: %s)", f.Name, f.Detail, f.Fix))
				}
			}
			if len(missing) == 0 || allowDegraded {
				return nil
			}
			return errors.New(strings.Join(missing, "; "))
		},
		Engine: func(ctx context.Context, runtime string) error {
			rt, err := docker.New(ctx, docker.Options{Host: engineHost(u, runtime)})
			if err != nil {
				return err // it names the engine's address and the fix
			}
			rt.Close()
			return nil
		},
	}
}

// detectRuntime resolves sandbox.runtime (auto, native, docker, podman)
// to the runtime sessions will use: auto takes native when the host
// offers it, else a container engine that answers. When none is usable
// it returns one *bootstrap.StartError naming each runtime's problem and
// the fix.
func detectRuntime(ctx context.Context, want string, p probes) (string, error) {
	var tried []string
	for _, rt := range []string{"native", "docker", "podman"} {
		if want != "auto" && want != rt && !(want == "" && rt == "native") {
			continue
		}
		if want == "auto" && rt == "podman" {
			break // auto never picks podman: it needs its own service
		}
		var err error
		if rt == "native" {
			err = p.Native(ctx)
		} else {
			err = p.Engine(ctx, rt)
		}
		if err == nil {
			return rt, nil
		}
		tried = append(tried, fmt.Sprintf("%s: %v", rt, err))
	}
	if want == "" {
		want = "native"
	}
	fix := "run 'fluffy doctor' to see every check; fix what the lines above name, or choose another runtime with sandbox.runtime (auto, native, docker, podman)"
	if want == "native" || want == "auto" {
		fix += ", or run with weaker isolation, loudly, with sandbox.allow_degraded: true in your user configuration"
	}
	return "", &bootstrap.StartError{What: fmt.Sprintf("no usable sandbox runtime (sandbox.runtime is %s)", want),
		Err: errors.New("\n  " + strings.Join(tried, "\n  ")), Fix: fix}
}

// sessionRuntime is the sandbox runtime of the kernel's sessions, chosen
// as detectRuntime says: the native runtime, or the options of a
// container engine that answers (each session connects on its own, see
// sessionBoxes). None (with the reason logged) when none is usable, and
// then shell.exec and test.run are refused. Its sandboxes hold the change
// sets they mount in up (sessionBoxes.ups; nil: each runtime its own).
func sessionRuntime(ctx context.Context, u *userenv.Env, log *slog.Logger, up *uppers.Registry) resolved {
	l, err := u.Config()
	if err != nil {
		return resolved{}
	}
	sc := l.Config.Sandbox
	name, err := detectRuntime(ctx, sc.Runtime, hostProbes(u, sc.AllowDegraded))
	if err != nil {
		log.Warn("no sandbox: shell.exec and test.run will be refused", "err", err)
		return resolved{}
	}
	if name == "native" {
		// Each session has a runtime of its own: a runtime holds one
		// sandbox built ahead, which must serve that session alone. They
		// share one registry of the change sets mounted: a session's
		// runtime replaced after its idle timeout may still be
		// discarding a sandbox on the session's change set. The
		// containers of image skills and plugins share it too (up,
		// sessionBoxes.ups).
		o := native.Options{Self: u.Self, AllowDegraded: sc.AllowDegraded, Logger: log, Uppers: up}
		if _, err := native.New(o); err != nil {
			log.Warn("no sandbox: shell.exec and test.run will be refused", "err", err)
			return resolved{}
		}
		return resolved{name: name, native: func() (aheadRuntime, error) { return native.New(o) }}
	}
	log.Info("sessions run in containers, pre-warmed per session", "runtime", name)
	return resolved{name: name, engine: &docker.Options{Host: engineHost(u, name), Image: sc.Image, Template: sc.Template, Logger: log, Uppers: up}}
}

// podmanSocket is where `podman system service` listens as root.
const podmanSocket = "unix:///run/podman/podman.sock"

// engineHost is the container engine address for runtime docker or
// podman: DOCKER_HOST from the invocation's environment, else the
// engine's own default.
func engineHost(u *userenv.Env, runtime string) string {
	if h, ok := u.Getenv("DOCKER_HOST"); ok && h != "" {
		return h
	}
	if runtime == "podman" {
		return podmanSocket
	}
	return ""
}
