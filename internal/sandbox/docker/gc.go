package docker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/moby/moby/client"
)

// GCOptions select what GC removes.
type GCOptions struct {
	// All removes every fluffy container, live owner or not.
	All bool
	// DryRun lists without removing.
	DryRun bool
	// StateDir is where the workspace overlays are mounted; empty means
	// /run/fluffy/docker.
	StateDir string
}

// Orphan is a container GC found.
type Orphan struct {
	ID, Session, Template, Owner, Mount string
}

// GC removes the containers a fluffy runtime created (labelled with
// LabelManaged and LabelOwner) whose owning process is gone (a crashed
// or killed fluffy), with their anonymous volumes, and unmounts their
// workspace overlays, and then the overlays of dead owners that no
// container refers to any more. It returns the containers it removed.
func GC(ctx context.Context, cli *client.Client, opts GCOptions) ([]Orphan, error) {
	list, err := ListAgain(ctx, func(ctx context.Context) (client.ContainerListResult, error) {
		return cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", LabelManaged+"=1")})
	})
	if err != nil {
		return nil, fmt.Errorf("docker: listing containers: %w", err)
	}
	var out []Orphan
	var errs []error
	for _, c := range list.Items {
		o := Orphan{ID: c.ID, Session: c.Labels[LabelSession], Template: c.Labels[LabelTemplate], Owner: c.Labels[LabelOwner], Mount: c.Labels[LabelMount]}
		if o.Owner == "" {
			// Not created by a fluffy runtime (which always names the
			// owner): it inherits LabelManaged from a fluffy image, as a
			// skill image build's intermediate containers and a person's
			// own containers of the base image do.
			continue
		}
		if !opts.All && ownerAlive(o.Owner) {
			continue
		}
		out = append(out, o)
		if opts.DryRun {
			continue
		}
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("removing %s: %w", shortID(c.ID), err))
			continue
		}
		if strings.HasPrefix(o.Mount, "/") {
			if err := releaseMount(o.Mount, c.Labels[LabelWork]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if !opts.DryRun {
		// Overlays whose container is already gone (a crash between
		// mounting and creating, or between removing and unmounting).
		if _, err := gcMounts(orDefault(opts.StateDir, "/run/fluffy/docker")); err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// ownerAlive reports whether the process named by a "pid:starttime" label
// still runs (same pid and same start time: not a reused pid).
func ownerAlive(label string) bool {
	p, st, ok := strings.Cut(label, ":")
	pid, err := strconv.Atoi(p)
	if !ok || err != nil || pid <= 0 {
		return false
	}
	cur, err := procStart(pid)
	return err == nil && cur == st
}
