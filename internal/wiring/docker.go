package wiring

import (
	"context"

	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
	"github.com/fluffy-agent/fluffy/internal/sandboxrun"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// engine connects to the container engine of runtime (docker, podman);
// an engine that does not answer is a *sandboxrun.EngineError.
func engine(ctx context.Context, u *userenv.Env, runtime string) (*docker.Runtime, error) {
	rt, err := docker.New(ctx, docker.Options{Host: engineHost(u, runtime)})
	if err != nil {
		return nil, &sandboxrun.EngineError{Err: err}
	}
	return rt, nil
}

// SandboxGC removes the containers fluffy labelled whose fluffy is gone
// (all: every one; dryRun: none, listing them).
func (*Core) SandboxGC(ctx context.Context, u *userenv.Env, runtime string, all, dryRun bool) ([]sandboxrun.Container, error) {
	rt, err := engine(ctx, u, runtime)
	if err != nil {
		return nil, err
	}
	defer rt.Close()
	removed, err := docker.GC(ctx, rt.Client(), docker.GCOptions{All: all, DryRun: dryRun})
	out := make([]sandboxrun.Container, 0, len(removed))
	for _, o := range removed {
		out = append(out, sandboxrun.Container{ID: o.ID, Session: o.Session, Template: o.Template, Owner: o.Owner})
	}
	return out, err
}

// BuildImage builds the base image (the Debian one, or with Minimal the
// busybox one) or b.Dir's Dockerfile as b.Tag, unless an image of that tag
// was built from the same content.
func (*Core) BuildImage(ctx context.Context, u *userenv.Env, runtime string, b sandboxrun.ImageBuild) (sandboxrun.Image, error) {
	rt, err := engine(ctx, u, runtime)
	if err != nil {
		return sandboxrun.Image{}, err
	}
	defer rt.Close()
	var res docker.BuildResult
	switch {
	case b.Dir != "":
		res, err = docker.BuildDir(ctx, rt.Client(), b.Dir, b.Tag)
	case b.Minimal:
		res, err = docker.EnsureBaseImage(ctx, rt.Client(), docker.BaseOptions{Tag: b.Tag})
	default:
		res, err = docker.EnsureDebianImage(ctx, rt.Client(), docker.DebianOptions{Tag: b.Tag})
	}
	if err != nil {
		return sandboxrun.Image{}, err
	}
	return sandboxrun.Image{Tag: res.Tag, Content: res.Content, Cached: res.Cached}, nil
}
