package wiring

import (
	"github.com/fluffy-agent/fluffy/internal/memory"
	"github.com/fluffy-agent/fluffy/internal/tool"
	"github.com/fluffy-agent/fluffy/internal/tool/memtool"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// registerMemory adds memory.search and memory.get to a session's tools
// when the assistant workspace has memory files; the index is opened
// and synced at each search (memory.OnDemand), so a session sees the
// files as they are without a watcher of its own.
func registerMemory(u *userenv.Env, reg *tool.Registry) error {
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
	return memtool.Register(reg, memtool.Options{Index: idx, Root: ws})
}
