package cli

import "github.com/fluffy-agent/fluffy/internal/datadir"

// cacheDir is where the sessions' sandboxes keep their persistent build
// caches (data directory's cache/, one directory per workspace; see
// sandbox.Template.ApplyCaches). Empty when the data directory is not
// usable: sandboxes then run without caches.
func (a *App) cacheDir() string {
	d, err := a.DataDir()
	if err != nil {
		return ""
	}
	return d.Path(datadir.Cache)
}
