package wiring

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

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
