package wiring

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/backup"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/units"
)

// The scheduler takes a backup at once when there is none, then one per
// interval, keeping backup.keep; stop ends it.
func TestBackupScheduler(t *testing.T) {
	d, err := datadir.New(filepath.Join(t.TempDir(), "home"))
	if err != nil {
		t.Fatal(err)
	}
	s := startBackups(t.Context(), d, config.Backup{Interval: units.Duration(20 * time.Millisecond), Keep: 2}, slog.New(slog.DiscardHandler))
	var names map[string]bool = map[string]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for len(names) < 4 && time.Now().Before(deadline) {
		all, err := backup.List(backup.Options{Data: d})
		if err != nil {
			t.Fatal(err)
		}
		if len(all) > 2 {
			// Create, then Prune: a third is there only between the two.
			all = all[:2]
		}
		for _, b := range all {
			names[b.Name] = true
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.stop()
	if len(names) < 4 {
		t.Fatalf("backups seen: %v", names)
	}
	all, _ := backup.List(backup.Options{Data: d})
	if len(all) > 2 {
		t.Errorf("backup.keep 2, found %d", len(all))
	}
	// Interval 0 takes none and stops at once.
	startBackups(t.Context(), d, config.Backup{}, slog.New(slog.DiscardHandler)).stop()
}
