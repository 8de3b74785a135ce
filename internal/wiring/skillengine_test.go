package wiring

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/uppers"
	"github.com/fluffy-agent/fluffy/internal/sandboxrun"
)

// The engine of a native session's image skills: an engine that does
// not answer is an EngineError naming its address and what to start,
// asked again at the next run; a session's engine is connected once and
// a session of the same name after the end gets a new one; after Close no run gets one.
func TestSkillEngines(t *testing.T) {
	dir := t.TempDir()
	u := testUser(t, dir, dir)
	dead := "unix://" + filepath.Join(dir, "no-engine.sock")
	u.Environ = append(u.Environ, "DOCKER_HOST="+dead)
	e := newSkillEngines()
	for range 2 {
		_, err := e.runtime(t.Context(), u, "s1", "docker")
		if ee := (*sandboxrun.EngineError)(nil); !errors.As(err, &ee) || !strings.Contains(err.Error(), dead) || !strings.Contains(err.Error(), "start dockerd") {
			t.Fatalf("no engine: %v", err)
		}
	}
	e.EndSession("s1")

	dockerEngine(t)
	u = testUser(t, dir, dir)
	rt, err := e.runtime(t.Context(), u, "s1", "docker")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := e.runtime(t.Context(), u, "s1", "docker"); err != nil || again != rt {
		t.Fatalf("the session's second run: %p, %v; want its engine %p", again, err, rt)
	}
	other, err := e.runtime(t.Context(), u, "s2", "docker")
	if err != nil || other == rt {
		t.Fatalf("another session: %p, %v", other, err)
	}
	e.EndSession("s1")
	if next, err := e.runtime(t.Context(), u, "s1", "docker"); err != nil || next == rt {
		t.Fatalf("a session of that name again: %p, %v", next, err)
	}
	e.Close()
	if _, err := e.runtime(t.Context(), u, "s3", "docker"); !errors.Is(err, errEnginesClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// The containers of a native session's image skills hold the change set
// in the registry of the sessions' native runtimes: a run waits for a
// native sandbox on it (asking an idle one to go) rather than mounting
// an overlay on the change set beside it.
func TestSkillEnginesShareUppers(t *testing.T) {
	eng := dockerEngine(t)
	dir := t.TempDir()
	u := testUser(t, dir, dir)
	reg := uppers.NewRegistry()
	boxes := newSessionBoxes(slog.New(slog.DiscardHandler), func() resolved { return resolved{name: "native"} })
	boxes.ups = reg
	defer boxes.skills.Close()
	rt, err := boxes.skills.runtime(t.Context(), u, "s1", "docker")
	if err != nil {
		t.Fatal(err)
	}
	ws, cs := filepath.Join(dir, "ws"), filepath.Join(dir, "cs")
	for _, d := range []string{ws, cs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	native, err := reg.Acquire(t.Context(), cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer native.Release()
	evicted := make(chan struct{})
	native.Idle(func() { close(evicted) })
	done := make(chan error, 1)
	go func() {
		_, err := rt.Run(context.Background(), sandbox.Spec{Image: eng.Image, Workspace: ws, ChangeSet: cs, WorkspaceReadOnly: true,
			Argv: []string{"true"}, Env: []string{"PATH=/bin"}, Limits: sandbox.Limits{Wall: 30 * time.Second}})
		done <- err
	}()
	select {
	case <-evicted:
	case err := <-done:
		t.Fatalf("the skill's container ran beside the native sandbox on its change set (err %v)", err)
	}
	native.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
