package wiring

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/memory"
	"github.com/fluffy-agent/fluffy/internal/tool"
	"github.com/fluffy-agent/fluffy/internal/tool/memtool"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// registerMemory adds memory.search and memory.get to a session's tools
// when the assistant workspace has memory files, and memory.write when
// the session runs on the assistant workspace (cs is its change set); the
// index is opened and synced at each search (memory.OnDemand), so a
// session sees the files as they are without a watcher of its own.
func registerMemory(u *userenv.Env, reg *tool.Registry, cs *changeset.ChangeSet, now func() time.Time) error {
	l, err := u.Config()
	if err != nil {
		return err
	}
	home, _ := u.Getenv("HOME")
	ws := memory.Workspace(l.Config.Serve.Workspace, home)
	if ws == "" || !memory.HasMemory(ws) {
		return nil
	}
	d, err := u.DataDir()
	if err != nil {
		return err
	}
	idx := memory.OnDemand{
		Options:     memory.Options{Root: ws, DB: memory.IndexPath(d), Logger: u.Logger()},
		NewEmbedder: func() memory.Embedder { return &memory.Local{} },
	}
	o := memtool.Options{Index: idx, Root: ws, Now: now}
	if real, err := filepath.EvalSymlinks(ws); err == nil && cs != nil && real == cs.Workspace() {
		o.ChangeSet = cs
	}
	return memtool.Register(reg, o)
}

// TestNowEnv names the variable that sets the kernel's clock, for tests
// only (the end-to-end "days later" script): an RFC 3339 time the clock
// starts at, running on from there. It starts with config.EnvInternalPrefix,
// so it is not configuration and is not documented as such.
const TestNowEnv = config.EnvInternalPrefix + "TEST_NOW"

// kernelClock is the kernel's clock: the wall clock, or in a test the
// time TestNowEnv names plus the time elapsed since.
func kernelClock(u *userenv.Env) (func() time.Time, error) {
	v, ok := u.Getenv(TestNowEnv)
	if !ok || v == "" {
		return time.Now, nil
	}
	at, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return nil, fmt.Errorf("%s: want an RFC 3339 time: %w", TestNowEnv, err)
	}
	start := time.Now()
	return func() time.Time { return at.Add(time.Since(start)) }, nil
}
