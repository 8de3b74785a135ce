package wiring

import (
	"context"
	"sync"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
	"github.com/fluffy-agent/fluffy/internal/sandbox/uppers"
	"github.com/fluffy-agent/fluffy/internal/sandboxrun"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// pluginImages is the container engine the image plugins (run.image)
// of one session run on, whatever that session's own runtime: connected
// at the first such plugin's start, so a session without one never
// reaches for an engine; closed with the session's plugins.
type pluginImages struct {
	u                *userenv.Env
	runtime, session string
	// uppers, when set, is the registry of mounted change sets of the
	// session's runtime, which the plugins' containers join.
	uppers *uppers.Registry

	mu sync.Mutex // guards rt
	rt *docker.Runtime
}

var _ sandbox.ImageRuntime = (*pluginImages)(nil)

// newPluginImages runs image plugins on the engine of runtime when that
// is podman, else on docker's (imageEngine).
func newPluginImages(u *userenv.Env, runtime, session string) *pluginImages {
	return &pluginImages{u: u, runtime: imageEngine(runtime), session: session}
}

func (p *pluginImages) Pinned(ctx context.Context, ref string) (sandbox.Runtime, []string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rt == nil {
		rt, err := docker.New(ctx, docker.Options{Host: engineHost(p.u, p.runtime), Session: p.session, Template: "plugin", Uppers: p.uppers, Logger: p.u.Logger()})
		if err != nil {
			return nil, nil, &sandboxrun.EngineError{Err: err}
		}
		p.rt = rt
	}
	return p.rt.Pinned(ctx, ref)
}

// Close closes the engine's client, once the servers it ran are gone.
func (p *pluginImages) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rt != nil {
		_ = p.rt.Close()
		p.rt = nil
	}
}
