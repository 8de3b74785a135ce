package gitview_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/gitview"
)

// bigRepo is a repository of dirs×files files (~2 KB each) with one
// commit, and a change set in which ten files are modified.
func bigRepo(b testing.TB, dirs, files int) *changeset.ChangeSet {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("change sets need root here")
	}
	base := b.TempDir()
	ws := filepath.Join(base, "ws")
	gitCmd(b, base, "init", "-q", "-b", "main", ws)
	body := strings.Repeat("some line of source text, for a benchmark\n", 48)
	for d := range dirs {
		for f := range files {
			write(b, filepath.Join(ws, fmt.Sprintf("d%03d/f%03d.txt", d, f)), fmt.Sprintf("%d %d\n%s", d, f, body))
		}
	}
	gitCmd(b, ws, "add", "-A")
	gitCmd(b, ws, "commit", "-q", "-m", "many files")
	cs, err := changeset.Begin(context.Background(), ws, filepath.Join(base, "cs"))
	must(b, err)
	for i := range 10 {
		must(b, cs.WriteFile(fmt.Sprintf("d%03d/f000.txt", i), []byte("changed\n"), 0o644))
	}
	return cs
}

// BenchmarkStatus: git.status's work on a 2,000-file repository (every
// tracked file is hashed: the merged view has no mtimes to trust).
func BenchmarkStatus(b *testing.B) {
	cs := bigRepo(b, 40, 50)
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		r, err := gitview.Open(ctx, cs)
		must(b, err)
		out, err := r.Status(ctx, gitview.StatusOptions{})
		must(b, err)
		r.Close()
		if strings.Count(out, " M ") != 10 {
			b.Fatalf("status:\n%s", out)
		}
	}
}

// BenchmarkDiffStat: git.diff --stat on the same repository.
func BenchmarkDiffStat(b *testing.B) {
	cs := bigRepo(b, 40, 50)
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		r, err := gitview.Open(ctx, cs)
		must(b, err)
		if _, err := r.Diff(ctx, gitview.DiffOptions{Stat: true}); err != nil {
			b.Fatal(err)
		}
		r.Close()
	}
}

func TestCancelledContextStopsTheLibrary(t *testing.T) {
	cs := bigRepo(t, 4, 10)
	ctx, cancel := context.WithCancel(context.Background())
	r, err := gitview.Open(ctx, cs)
	must(t, err)
	defer r.Close()
	cancel()
	if _, err := r.Status(ctx, gitview.StatusOptions{}); !errors.Is(err, context.Canceled) && err == nil {
		t.Fatalf("status after cancel: %v", err)
	}
}
