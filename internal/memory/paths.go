package memory

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/datadir"
)

// Workspace is the assistant workspace as configured (serve.workspace):
// a leading "~/" means home, and empty means ~/.fluffy/workspace.
func Workspace(configured, home string) string {
	switch {
	case configured == "" && home != "":
		return filepath.Join(home, ".fluffy", "workspace")
	case strings.HasPrefix(configured, "~/") && home != "":
		return filepath.Join(home, configured[2:])
	}
	return configured
}

// IndexPath is the index's database in a data directory.
func IndexPath(d datadir.Dir) string { return d.Path("memory", "index.db") }

// HasMemory reports whether root holds memory files to index: CoreFile
// or the Dir directory.
func HasMemory(root string) bool {
	for _, p := range []string{CoreFile, Dir} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			return true
		}
	}
	return false
}

// OnDemand is a Searcher that opens the index for each search, brings it
// up to date with Sync and closes it: for a process that holds no index
// open (a session without the assistant daemon's watcher).
type OnDemand struct {
	// Options are the index's; their Embedder is replaced by
	// NewEmbedder's at each search.
	Options Options
	// NewEmbedder makes each search's embedder (a Local learns in
	// place, so searches do not share one); nil means full text only.
	NewEmbedder func() Embedder
}

// Search opens, syncs and searches the index. When another process
// holds it (the daemon, kept current by its watcher; another search
// syncing), it searches the index as that process keeps it, without a
// second writer.
func (d OnDemand) Search(ctx context.Context, q Query) (Result, error) {
	o := d.Options
	o.Embedder = nil
	if d.NewEmbedder != nil {
		o.Embedder = d.NewEmbedder()
	}
	x, err := OpenSynced(ctx, o)
	if err != nil {
		return Result{}, err
	}
	defer x.Close()
	return x.Search(ctx, q)
}

// OpenSynced opens the index and brings it up to date with Sync, or,
// when another process holds it, opens it to read as that process keeps
// it (OpenReader): what a one-off reader (a search, a listing, stats)
// wants.
func OpenSynced(ctx context.Context, o Options) (*Index, error) {
	x, err := Open(ctx, o)
	if errors.Is(err, ErrHeld) {
		return OpenReader(ctx, o)
	}
	if err != nil {
		return nil, err
	}
	if _, err := x.Sync(ctx); err != nil {
		x.Close()
		return nil, err
	}
	return x, nil
}
