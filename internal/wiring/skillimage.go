package wiring

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"

	"github.com/moby/moby/client"

	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
	"github.com/fluffy-agent/fluffy/internal/sandbox/docker/skillimage"
	"github.com/fluffy-agent/fluffy/internal/sandboxrun"
	"github.com/fluffy-agent/fluffy/internal/skill"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// skillImages returns the builder of skill images on cli's engine: FROM
// the base image of u's configuration (sandbox.image), which it builds
// when it is missing, as a container sandbox's first run does.
func skillImages(u *userenv.Env, cli *client.Client) (*skillimage.Builder, error) {
	l, err := u.Config()
	if err != nil {
		return nil, err
	}
	base := l.Config.Sandbox.Image
	if base == "" {
		base = docker.BaseImage
	}
	return skillimage.New(skillimage.Options{
		Client: cli,
		Base:   base,
		EnsureBase: func(ctx context.Context) error {
			_, err := docker.EnsureBasePresent(ctx, cli, docker.DebianOptions{Tag: base})
			return err
		},
		// A build step is held to a sandbox's memory.
		Memory: int64(l.Config.Sandbox.Memory),
		Logger: u.Logger(),
	}), nil
}

// BuildSkillImages builds the images of u's skills (those b names, else
// every one with a Dockerfile) and with b.GC removes the stale ones.
// Each skill's failure is its SkillImage's Err; the error is the first
// of them, or what kept every build from starting.
func (*Core) BuildSkillImages(ctx context.Context, u *userenv.Env, b sandboxrun.SkillBuild) (sandboxrun.SkillBuildReport, error) {
	var rep sandboxrun.SkillBuildReport
	skills, errs := imageSkills(u)
	for _, n := range b.Names {
		if !slices.ContainsFunc(skills, func(s skill.Skill) bool { return s.Name == n }) {
			return rep, fmt.Errorf("%w: no skill named %q (%s)", userenv.ErrUsage, n, errors.Join(errs...))
		}
	}
	rt, err := engine(ctx, u, b.Runtime)
	if err != nil {
		return rep, err
	}
	defer rt.Close()
	sb, err := skillImages(u, rt.Client())
	if err != nil {
		return rep, err
	}
	progress := b.Progress
	if progress == nil {
		progress = io.Discard
	}
	for _, err := range errs {
		fmt.Fprintf(progress, "skipped: %v\n", err)
	}
	var first error
	for _, s := range skills {
		named := slices.Contains(b.Names, s.Name)
		if len(b.Names) > 0 && !named || len(b.Names) == 0 && (b.GC || s.Manifest.Image.Dockerfile == "") {
			continue
		}
		fmt.Fprintf(progress, "skill %s: ", s.Name)
		if s.Manifest.Image.Dockerfile == "" {
			fmt.Fprintln(progress, "no Dockerfile, runs in the base image")
		} else {
			fmt.Fprintf(progress, "building from %s\n", s.Manifest.Image.Dockerfile)
		}
		res, err := sb.Build(ctx, s, progress)
		rep.Images = append(rep.Images, sandboxrun.SkillImage{Skill: s.Name, Ref: res.Ref, Built: res.Built, Base: s.Manifest.Image.Dockerfile == "", Err: err})
		if err != nil && first == nil {
			first = err
		}
	}
	if b.GC {
		removed, err := sb.GC(ctx, skillimage.GCOptions{Load: loadSkillImage, Roots: rootList(u)})
		for _, c := range removed {
			rep.Removed = append(rep.Removed, sandboxrun.SkillImageGC{Ref: c.Ref, Skill: c.Skill, Reason: c.Reason, InUse: c.InUse})
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return rep, first
}

// rootList is u's skill roots, the folders a collection judges images
// of by u's configuration.
func rootList(u *userenv.Env) []string {
	var out []string
	for _, r := range userSkillRoots(u) {
		out = append(out, r.Dir)
	}
	return out
}

// collectSkillImages removes the stale images of u's skills (those whose
// folder holds no skill of their name any more, or under u's skill roots
// whose key is not the skill's current one) from the engine of sandbox.runtime (docker unless
// it says podman). It returns what it removed.
func collectSkillImages(ctx context.Context, u *userenv.Env) ([]skillimage.Collected, error) {
	runtime := "docker"
	if l, err := u.Config(); err == nil && l.Config.Sandbox.Runtime == "podman" {
		runtime = "podman"
	}
	rt, err := engine(ctx, u, runtime)
	if err != nil {
		return nil, err
	}
	defer rt.Close()
	sb, err := skillImages(u, rt.Client())
	if err != nil {
		return nil, err
	}
	return sb.GC(ctx, skillimage.GCOptions{Load: loadSkillImage, Roots: rootList(u)})
}

// startSkillImageGC runs collectSkillImages in the background at the
// assistant daemon's start, which does not wait for it; a machine without
// a container engine has no skill images, and is only logged at debug
// level. The function returned waits for it to end.
func startSkillImageGC(ctx context.Context, u *userenv.Env, log *slog.Logger) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		removed, err := collectSkillImages(ctx, u)
		if ee := (*sandboxrun.EngineError)(nil); errors.As(err, &ee) {
			log.Debug("skill images not collected: no container engine", "err", err)
			return
		}
		if err != nil {
			log.Warn("collecting stale skill images", "err", err)
		}
		for _, c := range removed {
			if c.InUse {
				log.Info("stale skill image kept: a container uses it", "image", c.Ref, "skill", c.Skill, "reason", c.Reason)
				continue
			}
			log.Info("stale skill image removed", "image", c.Ref, "skill", c.Skill, "reason", c.Reason)
		}
	}()
	return func() { <-done }
}
