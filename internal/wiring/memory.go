package wiring

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/lockfile"
	"github.com/fluffy-agent/fluffy/internal/memory"
	"github.com/fluffy-agent/fluffy/internal/memory/embed"
	"github.com/fluffy-agent/fluffy/internal/tool"
	"github.com/fluffy-agent/fluffy/internal/tool/memtool"
	"github.com/fluffy-agent/fluffy/internal/userenv"
	"github.com/fluffy-agent/fluffy/internal/web"
)

// memoryDeps are what the sessions' memory tools share: the kernel's
// clock and the index the assistant daemon holds (nil outside it).
type memoryDeps struct {
	now  func() time.Time
	held *heldMemory
}

// registerMemory adds memory.search and memory.get to a session's tools
// when the assistant workspace has memory files, and memory.write when
// the session runs on the assistant workspace (cs is its change set).
// Searches use the index the assistant daemon holds, kept current by its
// watcher; without one (no daemon), the index is opened and synced at
// each search (memory.OnDemand), so a session sees the files as they are
// either way.
func registerMemory(u *userenv.Env, reg *tool.Registry, cs *changeset.ChangeSet, deps memoryDeps) error {
	l, err := u.Config()
	if err != nil {
		return err
	}
	home, _ := u.Getenv("HOME")
	ws := memory.Workspace(l.Config.Serve.Workspace, home)
	sources := memory.SourcesFrom(l.Config.Memory.Sources, home)
	if ws == "" || !memory.HasMemory(ws) && len(sources) == 0 {
		return nil
	}
	d, err := u.DataDir()
	if err != nil {
		return err
	}
	set := embed.Resolve(l.Config, u.Getenv)
	idx := sessionMemory{held: deps.held, root: ws, demand: memory.OnDemand{
		Options:     memory.Options{Root: ws, DB: memory.IndexPath(d), Logger: u.Logger(), Sources: sources},
		NewEmbedder: func() memory.Embedder { return makeEmbedder(set, u.Logger()) },
	}}
	o := memtool.Options{Index: idx, Root: ws, Now: deps.now, Sources: sources}
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

// makeEmbedder makes the configured embedder; one that cannot be made
// (a provider without its key) leaves search to full text, said in the
// log.
func makeEmbedder(set embed.Setting, log *slog.Logger) memory.Embedder {
	e, err := set.Make(context.Background())
	if err != nil {
		log.Warn("memory search runs on full text alone", "err", err)
		return nil
	}
	return e
}

// heldMemory is the memory index the assistant daemon holds open while it
// serves: one Index, brought up to date at start and kept current by its
// watcher, so a save is searchable once the watcher has settled and no
// search scans the files again.
type heldMemory struct {
	mu     sync.RWMutex
	idx    *memory.Index
	lock   *lockfile.Lock // the index's, held as long as idx is
	cancel context.CancelFunc
	done   chan struct{}
	// synced, optional, is the watcher's callback after each update
	// (tests wait on it).
	synced func(memory.SyncReport, error)
}

// open opens and syncs the index of workspace ws and starts its watcher.
// A workspace without memory files holds nothing.
func (h *heldMemory) open(ctx context.Context, u *userenv.Env, ws string, log *slog.Logger) error {
	l, err := u.Config()
	if err != nil {
		return err
	}
	home, _ := u.Getenv("HOME")
	sources := memory.SourcesFrom(l.Config.Memory.Sources, home)
	if !memory.HasMemory(ws) && len(sources) == 0 {
		return nil
	}
	d, err := u.DataDir()
	if err != nil {
		return err
	}
	// A command reindexing now holds the lock for seconds at most.
	lk, err := memory.Lock(ctx, memory.IndexPath(d), heldLockWait)
	if err != nil {
		return err
	}
	x, err := memory.Open(ctx, memory.Options{Root: ws, DB: memory.IndexPath(d), Embedder: makeEmbedder(embed.Resolve(l.Config, u.Getenv), log), Logger: log, Sources: sources, Lock: lk})
	if err != nil {
		lk.Release()
		return err
	}
	rep, err := x.Sync(ctx)
	if err != nil {
		x.Close()
		lk.Release()
		return err
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	synced := h.synced
	h.mu.Lock()
	h.idx, h.lock, h.cancel, h.done = x, lk, cancel, done
	h.mu.Unlock()
	go func() {
		defer close(done)
		err := x.Watch(wctx, func(rep memory.SyncReport, err error) {
			if err != nil {
				log.Warn("memory index: update", "err", err)
			}
			if synced != nil {
				synced(rep, err)
			}
		})
		if err != nil {
			// Searches open the index themselves from now on.
			log.Warn("memory index: the watcher stopped; searches scan the files again", "err", err)
			h.mu.Lock()
			mine := h.idx == x
			if mine {
				h.idx, h.lock = nil, nil
			}
			h.mu.Unlock()
			if mine {
				x.Close()
				lk.Release()
			}
		}
	}()
	log.Info("memory index held", "workspace", ws, "indexed", rep.Indexed, "unchanged", rep.Unchanged, "removed", rep.Removed)
	return nil
}

// close stops the watcher and closes the index; searches fall back to
// opening it themselves. Idempotent.
func (h *heldMemory) close() {
	h.mu.Lock()
	x, lk, cancel, done := h.idx, h.lock, h.cancel, h.done
	h.idx, h.lock = nil, nil
	h.mu.Unlock()
	if x == nil {
		return
	}
	cancel()
	<-done
	x.Close()
	lk.Release()
}

// heldLockWait is how long the daemon waits at start for a command that
// holds the index's lock (a reindex) to finish.
const heldLockWait = 30 * time.Second

// reindex brings the held index up to date (full: rebuilds it in place,
// the lock and the watcher staying as they are); held is false when
// none is held, and the caller reindexes itself.
func (h *heldMemory) reindex(ctx context.Context, full bool) (rep memory.SyncReport, held bool, err error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.idx == nil {
		return memory.SyncReport{}, false, nil
	}
	if full {
		rep, err = h.idx.Rebuild(ctx)
	} else {
		rep, err = h.idx.Sync(ctx)
	}
	return rep, true, err
}

// registerMemoryReindex serves memory.MethodReindex: `fluffy memory
// reindex` asks the kernel that holds the index, so that the index has
// one writer and the daemon's copy is the one brought up to date.
func registerMemoryReindex(mux *ipc.Mux, h *heldMemory) error {
	return mux.Handle(memory.MethodReindex, func(ctx context.Context, r *ipc.Request) (any, error) {
		var p memory.ReindexParams
		if err := r.Bind(&p); err != nil {
			return nil, err
		}
		rep, held, err := h.reindex(ctx, p.Full)
		if err != nil {
			return nil, fmt.Errorf("memory reindex: %w", err)
		}
		return memory.ReindexResult{Held: held, PID: os.Getpid(), Report: rep}, nil
	})
}

// search searches the held index when it is root's; ok is false when
// none is held for root.
func (h *heldMemory) search(ctx context.Context, root string, q memory.Query) (res memory.Result, ok bool, err error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.idx == nil || h.idx.Root() != root {
		return memory.Result{}, false, nil
	}
	res, err = h.idx.Search(ctx, q)
	return res, true, err
}

// sessionMemory is a session's memory.search: the daemon's held index
// when there is one for root, else demand.
type sessionMemory struct {
	held   *heldMemory
	root   string
	demand memtool.Searcher
}

// Search implements memtool.Searcher.
func (s sessionMemory) Search(ctx context.Context, q memory.Query) (memory.Result, error) {
	if s.held != nil {
		if res, ok, err := s.held.search(ctx, s.root, q); ok {
			return res, err
		}
	}
	return s.demand.Search(ctx, q)
}

// files lists the held index's files when it is root's; ok is false
// when none is held for root.
func (h *heldMemory) files(ctx context.Context, root string) (files []string, ok bool, err error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.idx == nil || h.idx.Root() != root {
		return nil, false, nil
	}
	files, err = h.idx.Files(ctx)
	return files, true, err
}

// webMemory is the assistant's memory for the console's memory page: the
// daemon's held index, or without one the index opened and synced for
// each page, as a session's search does.
type webMemory struct {
	u    *userenv.Env
	ws   string
	held *heldMemory
}

// webMemoryHits bounds a search's hits on the page.
const webMemoryHits = 20

// options are the index's, without an embedder (full text; a search
// through the held index ranks with its embedder).
func (m webMemory) options() (memory.Options, []memory.Source, bool, error) {
	l, err := m.u.Config()
	if err != nil {
		return memory.Options{}, nil, false, err
	}
	home, _ := m.u.Getenv("HOME")
	sources := memory.SourcesFrom(l.Config.Memory.Sources, home)
	if m.ws == "" || !memory.HasMemory(m.ws) && len(sources) == 0 {
		return memory.Options{}, sources, false, nil
	}
	d, err := m.u.DataDir()
	if err != nil {
		return memory.Options{}, nil, false, err
	}
	return memory.Options{Root: m.ws, DB: memory.IndexPath(d), Logger: m.u.Logger(), Sources: sources}, sources, true, nil
}

func (m webMemory) Files(ctx context.Context) ([]web.MemoryFile, error) {
	o, sources, has, err := m.options()
	if err != nil || !has {
		return nil, err
	}
	paths, ok, err := m.held.files(ctx, m.ws)
	if !ok {
		paths, err = demandFiles(ctx, o)
	}
	if err != nil {
		return nil, err
	}
	out := make([]web.MemoryFile, 0, len(paths))
	for _, p := range paths {
		f := web.MemoryFile{Path: p}
		if fi, err := os.Lstat(memoryFilePath(m.ws, sources, p)); err == nil {
			f.Size, f.Modified = fi.Size(), fi.ModTime()
		}
		out = append(out, f)
	}
	return out, nil
}

// demandFiles opens and syncs the index for its list of files.
func demandFiles(ctx context.Context, o memory.Options) ([]string, error) {
	x, err := memory.OpenSynced(ctx, o)
	if err != nil {
		return nil, err
	}
	defer x.Close()
	return x.Files(ctx)
}

// memoryFilePath is where an indexed path is on disk: a source's
// sources/NAME/REL under that source's directory, the rest under the
// workspace.
func memoryFilePath(ws string, sources []memory.Source, p string) string {
	if memory.IsSourcePath(p) {
		name, rel, _ := strings.Cut(strings.TrimPrefix(p, memory.SourcesDir+"/"), "/")
		for _, s := range sources {
			if s.Name == name {
				return filepath.Join(s.Dir, filepath.FromSlash(rel))
			}
		}
	}
	return filepath.Join(ws, filepath.FromSlash(p))
}

func (m webMemory) Search(ctx context.Context, q string) (web.MemoryResult, error) {
	o, _, has, err := m.options()
	if err != nil || !has {
		return web.MemoryResult{}, err
	}
	idx := sessionMemory{held: m.held, root: m.ws, demand: memory.OnDemand{Options: o}}
	res, err := idx.Search(ctx, memory.Query{Text: q, K: webMemoryHits})
	if err != nil {
		return web.MemoryResult{}, err
	}
	out := web.MemoryResult{Note: res.Note}
	for _, h := range res.Hits {
		out.Hits = append(out.Hits, web.MemoryHit{Path: h.Path, Line: h.Line, EndLine: h.EndLine, Heading: h.Heading, Snippet: h.Snippet})
	}
	return out, nil
}
