package wiring

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native"
	"github.com/fluffy-agent/fluffy/internal/sandboxrun"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// sandboxRuntime returns the backend r names (sandbox.runtime or
// --runtime) and a function releasing it: the native backend (the
// sandbox server's shared one, when the run is served there and is not
// traced), or a container engine (otherSandboxRuntime).
func sandboxRuntime(ctx context.Context, r sandboxrun.RuntimeRequest) (sandbox.Runtime, func(), error) {
	switch r.Name {
	case "", "native":
		if r.Host != nil && r.Trace == nil {
			rt, err := r.Host.Runtime(r.AllowDegraded)
			if err != nil {
				return nil, nil, err
			}
			return rt, func() {}, nil
		}
		l, err := r.User.Config()
		if err != nil {
			return nil, nil, err
		}
		slots, err := hostSlots(r.User, l.Config.Sched)
		if err != nil {
			return nil, nil, err
		}
		rt, err := native.New(native.Options{Self: r.User.Self, AllowDegraded: r.AllowDegraded, Logger: r.User.Logger(), Trace: r.Trace})
		if err != nil {
			return nil, nil, err
		}
		// Look at the host (namespaces, landlock, cgroups) while the
		// caller finishes its own set-up, not at the start of the run.
		go rt.Prepare()
		if slots != nil {
			return slotPlain(rt, slots), func() {}, nil
		}
		return rt, func() {}, nil
	case "auto", "docker", "podman":
		return otherSandboxRuntime(ctx, r)
	}
	return nil, nil, fmt.Errorf("%w: unknown sandbox runtime %q (have native, docker, podman)", userenv.ErrUsage, r.Name)
}

// otherSandboxRuntime returns the backends other than native: auto
// (detected: native when the host offers it, else a container engine),
// docker and podman. For the container backends it removes orphaned
// containers first and builds the base image when it is missing or stale.
func otherSandboxRuntime(ctx context.Context, r sandboxrun.RuntimeRequest) (sandbox.Runtime, func(), error) {
	u := r.User
	if r.Name == "auto" {
		name, err := detectRuntime(ctx, r.Name, hostProbes(u, r.AllowDegraded))
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
		}
		r.Name = name
		if name == "native" {
			return sandboxRuntime(ctx, r)
		}
	}
	rt, err := docker.New(ctx, docker.Options{Host: engineHost(u, r.Name), Image: r.Image, Template: r.Template,
		Session: "cli-" + strconv.Itoa(os.Getpid()), Logger: u.Logger()})
	if err != nil {
		return nil, nil, err
	}
	if removed, err := docker.GC(ctx, rt.Client(), docker.GCOptions{}); err != nil {
		u.Logger().Warn("removing orphaned sandbox containers", "err", err)
	} else if len(removed) > 0 {
		u.Logger().Info("removed orphaned sandbox containers", "count", len(removed))
	}
	if r.Image == "" || r.Image == docker.BaseImage {
		if _, err := docker.EnsureBasePresent(ctx, rt.Client(), docker.DebianOptions{}); err != nil {
			rt.Close()
			return nil, nil, fmt.Errorf("%w: base image: %w", sandbox.ErrSetup, err)
		}
	}
	return rt, func() { rt.Close() }, nil
}
