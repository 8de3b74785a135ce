package docker

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// ErrImageDigest is sandbox.ErrImageDigest.
var ErrImageDigest = sandbox.ErrImageDigest

var _ sandbox.ImageRuntime = (*Runtime)(nil)

// Pinned resolves ref, NAME@sha256:HEX, against the engine: the image
// NAME names must have the ID sha256:HEX (an image built here) or carry
// it among its repository digests (one pulled by digest). It returns a
// runtime like r whose sandboxes start from that image by its ID, so a
// later retag under NAME changes nothing already resolved, and the
// image's own command (its entrypoint and cmd). Nothing is pulled: an
// image missing here is an error. The runtime shares r's engine client:
// close r, not it.
func (r *Runtime) Pinned(ctx context.Context, ref string) (sandbox.Runtime, []string, error) {
	name, hex, ok := strings.Cut(ref, "@sha256:")
	if !ok || name == "" || hex == "" {
		return nil, nil, fmt.Errorf("%w: %q is not NAME@sha256:HEX", ErrImageDigest, ref)
	}
	want := "sha256:" + hex
	img, err := r.cli.ImageInspect(ctx, name)
	if err != nil {
		return nil, nil, fmt.Errorf("docker: image %s: %w", name, err)
	}
	match := img.ID == want || slices.ContainsFunc(img.RepoDigests, func(d string) bool { return strings.HasSuffix(d, "@"+want) })
	if !match {
		return nil, nil, fmt.Errorf("%w: %s is %s, pinned %s", ErrImageDigest, name, img.ID, want)
	}
	var argv []string
	if img.Config != nil {
		argv = append(append(argv, img.Config.Entrypoint...), img.Config.Cmd...)
	}
	c := &Runtime{cli: r.cli, opts: r.opts, owner: r.owner, log: r.log, podman: r.podman, engineLimits: r.engineLimits}
	c.opts.Image = img.ID
	return c, argv, nil
}
