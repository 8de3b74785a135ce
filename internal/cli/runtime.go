package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/bootstrap"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native"
)

// runtimeProbes say whether each sandbox runtime is usable here; they are
// fields so that tests can stand in for the host.
type runtimeProbes struct {
	native func(ctx context.Context) error
	engine func(ctx context.Context, runtime string) error
}

// hostProbes checks the real host: the native sandbox's facilities (a
// real probe sandbox; missing required ones are fine with
// sandbox.allow_degraded), and a container engine answering a ping.
func (a *App) hostProbes(allowDegraded bool) runtimeProbes {
	return runtimeProbes{
		native: func(ctx context.Context) error {
			var missing []string
			for _, f := range native.Detect(ctx, native.DetectOptions{Self: a.Self}) {
				if f.Required && !f.Available {
					missing = append(missing, fmt.Sprintf("%s: %s (fix: %s)", f.Name, f.Detail, f.Fix))
				}
			}
			if len(missing) == 0 || allowDegraded {
				return nil
			}
			return errors.New(strings.Join(missing, "; "))
		},
		engine: func(ctx context.Context, runtime string) error {
			rt, err := docker.New(ctx, docker.Options{Host: engineHost(a, runtime)})
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
func detectRuntime(ctx context.Context, want string, p runtimeProbes) (string, error) {
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
			err = p.native(ctx)
		} else {
			err = p.engine(ctx, rt)
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
// as detectRuntime says; nil (with the reason logged) when none is
// usable, and then shell.exec and test.run are refused.
func (a *App) sessionRuntime(ctx context.Context, log *slog.Logger) (sandbox.Runtime, string) {
	l, err := a.Config()
	if err != nil {
		return nil, ""
	}
	sc := l.Config.Sandbox
	name, err := detectRuntime(ctx, sc.Runtime, a.hostProbes(sc.AllowDegraded))
	if err != nil {
		log.Warn("no sandbox: shell.exec and test.run will be refused", "err", err)
		return nil, ""
	}
	if name == "native" {
		rt, err := native.New(native.Options{Self: a.Self, AllowDegraded: sc.AllowDegraded, Logger: log})
		if err != nil {
			log.Warn("no sandbox: shell.exec and test.run will be refused", "err", err)
			return nil, ""
		}
		return rt, name
	}
	rt, err := docker.New(ctx, docker.Options{Host: engineHost(a, name), Image: sc.Image, Template: sc.Template, Session: "kernel", Logger: log})
	if err != nil {
		log.Warn("no sandbox: shell.exec and test.run will be refused", "runtime", name, "err", err)
		return nil, ""
	}
	log.Info("sessions run in containers", "runtime", name)
	return rt, name
}
