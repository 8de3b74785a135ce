package wiring

import (
	"context"
	"errors"
	"sync"

	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
	"github.com/fluffy-agent/fluffy/internal/sandbox/uppers"
	"github.com/fluffy-agent/fluffy/internal/sandboxrun"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// imageEngine names the container engine that the image skills and
// image plugins of a session of runtime run on, whatever that session's
// own runtime: podman's when the session runs on podman, else docker's
// (DOCKER_HOST when set, engineHost).
func imageEngine(runtime string) string {
	if runtime == "podman" {
		return "podman"
	}
	return "docker"
}

// skillEngines are the container engines the runs of skills with a
// Dockerfile of the native sessions build and run on (docs/skills.md):
// one per session, connected at its first such run, so that a session
// without one never reaches for an engine, and closed when the session
// ends (sessionBoxes.EndSession). The zero value is not usable:
// newSkillEngines.
type skillEngines struct {
	// uppers, when set, is the registry of mounted change sets of the
	// sessions' runtimes, which the skills' containers join.
	uppers func() *uppers.Registry

	mu     sync.Mutex // guards rts and closed
	rts    map[string]*skillEngine
	closed bool
}

// skillEngine is one session's engine, connected once.
type skillEngine struct {
	mu sync.Mutex // held while connecting: one connection per session
	rt *docker.Runtime
}

func newSkillEngines() *skillEngines {
	return &skillEngines{rts: map[string]*skillEngine{}}
}

// errEnginesClosed refuses a run once the kernel is stopping.
var errEnginesClosed = errors.New("the kernel is stopping")

// runtime returns session's engine, the runtime of u's engine name
// (imageEngine), connecting it at the first call; an engine that does not
// answer is a *sandboxrun.EngineError naming what to start, and is asked
// again at the next run.
func (e *skillEngines) runtime(ctx context.Context, u *userenv.Env, session, name string) (*docker.Runtime, error) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, errEnginesClosed
	}
	se := e.rts[session]
	if se == nil {
		se = &skillEngine{}
		e.rts[session] = se
	}
	e.mu.Unlock()
	se.mu.Lock()
	defer se.mu.Unlock()
	if se.rt != nil {
		return se.rt, nil
	}
	// The session's change set was written by native sandboxes: its
	// run sees it as they do, and holds it in their registry.
	var up *uppers.Registry
	if e.uppers != nil {
		up = e.uppers()
	}
	o := docker.Options{Host: engineHost(u, name), Session: session, Template: "skill", UserXattr: true, Uppers: up, Logger: u.Logger()}
	if l, err := u.Config(); err == nil {
		o.Image = l.Config.Sandbox.Image
	}
	rt, err := docker.New(ctx, o)
	if err != nil {
		return nil, &sandboxrun.EngineError{Err: err}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.rts[session] != se {
		// The session ended (or the kernel stopped) while connecting.
		_ = rt.Close()
		return nil, errEnginesClosed
	}
	se.rt = rt
	return rt, nil
}

// EndSession closes session's engine client; its containers, one per
// run, are gone with their runs.
func (e *skillEngines) EndSession(session string) {
	e.mu.Lock()
	se := e.rts[session]
	delete(e.rts, session)
	e.mu.Unlock()
	se.close()
}

// Close closes every session's engine client; runtime fails afterwards.
func (e *skillEngines) Close() {
	e.mu.Lock()
	rts := e.rts
	e.rts, e.closed = map[string]*skillEngine{}, true
	e.mu.Unlock()
	for _, se := range rts {
		se.close()
	}
}

func (se *skillEngine) close() {
	if se == nil {
		return
	}
	se.mu.Lock()
	defer se.mu.Unlock()
	if se.rt != nil {
		_ = se.rt.Close()
		se.rt = nil
	}
}
