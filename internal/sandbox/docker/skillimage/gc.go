package skillimage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/moby/moby/client"

	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
	"github.com/fluffy-agent/fluffy/internal/skill"
)

// Why GC found an image stale.
const (
	ReasonGone         = "skill gone"           // its folder holds no skill any more
	ReasonRenamed      = "skill renamed"        // the folder's skill has another name now
	ReasonNoDockerfile = "no Dockerfile"        // the skill runs in the base image now
	ReasonSuperseded   = "superseded"           // the skill's context hashes to another key
	reasonKeep         = ""                     // current
	reasonUnknown      = "could not be checked" // kept: Load or the key failed
)

// GCOptions select what GC removes.
type GCOptions struct {
	// Load reads the skill in a folder as it is now. An error wrapping
	// fs.ErrNotExist means the folder holds no skill any more; any other
	// error keeps the folder's images. Required.
	Load func(dir string) (skill.Skill, error)
	// DryRun lists without removing.
	DryRun bool
	// Roots are the folders (skill roots) under which an image's skill
	// is checked for being renamed, without a Dockerfile or superseded:
	// the key depends on the base image of the configuration GC runs
	// with, which is another user's, or another test's, elsewhere. Empty
	// means everywhere. An image whose folder holds no skill any more is
	// removed wherever the folder was.
	Roots []string
}

// Collected is a stale skill image.
type Collected struct {
	// Ref is its tag as Build named it (its ID when untagged).
	Ref, Skill, Dir string
	// Reason is one of the Reason constants.
	Reason string
	// InUse is true when a container (running or stopped) was created
	// from it: it is kept.
	InUse bool
}

// GC removes the skill images whose skill is gone (its folder holds no
// skill of that name, or one without a Dockerfile) and those whose key is
// no longer the skill's current one, unless a container uses them. It
// returns what it found stale, removed or (InUse) kept.
func (b *Builder) GC(ctx context.Context, opts GCOptions) ([]Collected, error) {
	if opts.Load == nil {
		return nil, errors.New("skillimage: GC needs GCOptions.Load")
	}
	imgs, err := docker.ListAgain(ctx, func(ctx context.Context) (client.ImageListResult, error) {
		return b.cli.ImageList(ctx, client.ImageListOptions{Filters: make(client.Filters).Add("label", LabelSkill)})
	})
	if err != nil {
		return nil, fmt.Errorf("skillimage: listing images: %w", err)
	}
	ctrs, err := docker.ListAgain(ctx, func(ctx context.Context) (client.ContainerListResult, error) {
		return b.cli.ContainerList(ctx, client.ContainerListOptions{All: true})
	})
	if err != nil {
		return nil, fmt.Errorf("skillimage: listing containers: %w", err)
	}
	used := map[string]bool{}
	for _, c := range ctrs.Items {
		used[c.ImageID] = true
	}
	type state struct {
		s       skill.Skill
		loadErr error
		key     string
		keyErr  error
	}
	roots := make([]string, 0, len(opts.Roots))
	for _, r := range opts.Roots {
		if real, err := filepath.EvalSymlinks(r); err == nil {
			r = real
		}
		roots = append(roots, filepath.Clean(r))
	}
	within := func(dir string) bool {
		for _, r := range roots {
			if strings.HasPrefix(dir, r+string(filepath.Separator)) {
				return true
			}
		}
		return len(roots) == 0
	}
	dirs := map[string]*state{}
	var out []Collected
	var errs []error
	for _, img := range imgs.Items {
		if !complete(img.Labels) {
			// The classic builder adds a build's labels one step at a
			// time, so a build in progress (this process's, another
			// user's) has layers with some of them: never a skill's
			// image, and removing one fails that build.
			continue
		}
		name, dir := img.Labels[LabelSkill], img.Labels[LabelDir]
		var tags []string
		for _, t := range img.RepoTags {
			if strings.HasPrefix(withoutRegistry(t), Repository+"/") {
				tags = append(tags, t)
			}
		}
		st, ok := dirs[dir]
		if !ok {
			st = &state{}
			st.s, st.loadErr = opts.Load(dir)
			if st.loadErr == nil && within(dir) && st.s.Manifest.Image.Dockerfile != "" {
				st.key, st.keyErr = b.Key(ctx, st.s)
			}
			dirs[dir] = st
		}
		// An untagged image (a rebuild moved its tag, or a build in
		// progress) follows the same rules: one with the current key
		// is kept.
		reason := reasonKeep
		switch {
		case errors.Is(st.loadErr, fs.ErrNotExist):
			reason = ReasonGone
		case st.loadErr != nil:
			reason = reasonUnknown
		case !within(dir):
		case st.s.Name != name:
			reason = ReasonRenamed
		case st.s.Manifest.Image.Dockerfile == "":
			reason = ReasonNoDockerfile
		case st.keyErr != nil:
			reason = reasonUnknown
		case img.Labels[docker.LabelContent] != st.key:
			reason = ReasonSuperseded
		}
		if reason == reasonUnknown && within(dir) {
			err := st.loadErr
			if err == nil {
				err = st.keyErr
			}
			b.log.Warn("skill image kept: its skill could not be read", slog.String("dir", dir), slog.Any("err", err))
		}
		if reason == reasonKeep || reason == reasonUnknown {
			continue
		}
		c := Collected{Ref: img.ID, Skill: name, Dir: dir, Reason: reason, InUse: used[img.ID]}
		if len(tags) > 0 {
			names := make([]string, len(tags))
			for i, t := range tags {
				names[i] = withoutRegistry(t)
			}
			c.Ref = strings.Join(names, ",")
		}
		out = append(out, c)
		if c.InUse || opts.DryRun {
			continue
		}
		refs := tags
		if len(refs) == 0 {
			refs = []string{img.ID}
		}
		for _, r := range refs {
			// Never forced: an engine that still has a container of it
			// (one created since the list) refuses, and the image stays.
			if _, err := b.cli.ImageRemove(ctx, r, client.ImageRemoveOptions{PruneChildren: true}); err != nil && !isNotFound(err) {
				errs = append(errs, fmt.Errorf("skillimage: removing %s: %w", r, err))
			}
		}
	}
	return out, errors.Join(errs...)
}

// withoutRegistry is an image name without the registry host Podman
// puts before a name it was given without one (docker.io/fluffy-skill/...,
// localhost/...): a first component with a dot or a colon, or localhost.
func withoutRegistry(name string) string {
	host, rest, ok := strings.Cut(name, "/")
	if ok && (strings.ContainsAny(host, ".:") || host == "localhost") {
		return rest
	}
	return name
}

// complete reports whether an image carries every label Build gives a
// skill image: only a finished build's image does.
func complete(labels map[string]string) bool {
	for _, l := range []string{docker.LabelContent, LabelSkill, LabelDir, LabelDockerfile} {
		if labels[l] == "" {
			return false
		}
	}
	return true
}
