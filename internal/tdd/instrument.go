package tdd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/regfile"
)

// MaxInstrumentedSize caps the size of a file declared as
// instrumentation: its original is kept in fluffy.db until debug mode
// ends.
const MaxInstrumentedSize = 16 << 20

// Instrument declares files of the workspace as instrumentation (debug
// mode only): it saves each file's original content (or its absence)
// before the declaration is applied, so that RevertInstrumentation can
// put it back. A file declared twice keeps its first original.
func (s *Session) Instrument(ctx context.Context, workspace string, paths []operation.Path) (Transition, error) {
	st := s.Status()
	ev := s.machine.InstrumentEvent(&st, workspace, paths)
	// Refuse early (wrong mode, exempt files) before touching anything.
	if _, err := Step(st, ev); err != nil {
		return Transition{}, err
	}
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return Transition{}, fmt.Errorf("tdd: instrument: %w", err)
	}
	defer root.Close()
	var saved []string
	for _, f := range ev.Files {
		content, existed, perm, err := readOriginal(root, f.Path)
		if err != nil {
			s.dropSnapshots(ctx, saved)
			return Transition{}, err
		}
		res, err := s.journal.db.ExecContext(ctx, `INSERT OR IGNORE INTO tdd_instrumentation
			(session_id, path, workspace, existed, perm, content) VALUES (?, ?, ?, ?, ?, ?)`,
			s.ID, f.Path, workspace, existed, int64(perm), content)
		if err != nil {
			s.dropSnapshots(ctx, saved)
			return Transition{}, fmt.Errorf("tdd: instrument %s: %w", f.Path, err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			saved = append(saved, f.Path)
		}
	}
	tr, err := s.Apply(ctx, ev)
	if err != nil {
		s.dropSnapshots(ctx, saved)
		return Transition{}, err
	}
	return tr, nil
}

func readOriginal(root *os.Root, rel string) (content []byte, existed bool, perm fs.FileMode, err error) {
	name := filepath.FromSlash(rel)
	fi, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return []byte{}, false, 0o644, nil
	}
	if err != nil {
		return nil, false, 0, fmt.Errorf("tdd: instrument %s: %w", rel, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, false, 0, fmt.Errorf("tdd: instrument %s: not a regular file", rel)
	}
	if fi.Size() > MaxInstrumentedSize {
		return nil, false, 0, fmt.Errorf("tdd: instrument %s: larger than %d bytes", rel, MaxInstrumentedSize)
	}
	// Read through regfile: the Lstat above judged a path that may have
	// become a FIFO since (a plain open would wait for a writer for ever).
	b, err := regfile.ReadFileIn(root, name, MaxInstrumentedSize)
	if err != nil {
		return nil, false, 0, fmt.Errorf("tdd: instrument %s: %w", rel, err)
	}
	return b, true, fi.Mode().Perm(), nil
}

func (s *Session) dropSnapshots(ctx context.Context, paths []string) {
	for _, p := range paths {
		_, _ = s.journal.db.ExecContext(ctx, `DELETE FROM tdd_instrumentation WHERE session_id = ? AND path = ?`, s.ID, p)
	}
}

// RevertInstrumentation puts back every file saved by Instrument for this
// session — the original content, or no file when there was none — and
// forgets the snapshots it restored. Writes go through os.Root, so a
// symlink planted during debugging cannot redirect them outside the
// workspace. Call it with a transition's Revert list (leaving debug mode,
// done in debug mode) or at session end; files that fail keep their
// snapshot for a retry and are reported together. It returns the paths
// restored.
func (s *Session) RevertInstrumentation(ctx context.Context) ([]string, error) {
	rows, err := s.journal.db.QueryContext(ctx, `SELECT path, workspace, existed, perm, content
		FROM tdd_instrumentation WHERE session_id = ? ORDER BY path`, s.ID)
	if err != nil {
		return nil, fmt.Errorf("tdd: revert instrumentation: %w", err)
	}
	type snap struct {
		path, workspace string
		existed         bool
		perm            int64
		content         []byte
	}
	var snaps []snap
	for rows.Next() {
		var x snap
		if err := rows.Scan(&x.path, &x.workspace, &x.existed, &x.perm, &x.content); err != nil {
			rows.Close()
			return nil, fmt.Errorf("tdd: revert instrumentation: %w", err)
		}
		snaps = append(snaps, x)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("tdd: revert instrumentation: %w", err)
	}
	var done []string
	var errs []error
	for _, x := range snaps {
		if err := restore(x.workspace, x.path, x.existed, fs.FileMode(x.perm)&fs.ModePerm, x.content); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := s.journal.db.ExecContext(ctx, `DELETE FROM tdd_instrumentation WHERE session_id = ? AND path = ?`, s.ID, x.path); err != nil {
			errs = append(errs, fmt.Errorf("tdd: revert %s: %w", x.path, err))
			continue
		}
		done = append(done, x.path)
	}
	return done, errors.Join(errs...)
}

func restore(workspace, rel string, existed bool, perm fs.FileMode, content []byte) error {
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return fmt.Errorf("tdd: revert %s: %w", rel, err)
	}
	defer root.Close()
	name := filepath.FromSlash(rel)
	// A symlink put in the file's place is removed, never followed.
	if fi, err := root.Lstat(name); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		if err := root.Remove(name); err != nil {
			return fmt.Errorf("tdd: revert %s: %w", rel, err)
		}
	}
	if !existed {
		if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("tdd: revert %s: %w", rel, err)
		}
		return nil
	}
	if err := root.WriteFile(name, content, perm); err != nil {
		return fmt.Errorf("tdd: revert %s: %w", rel, err)
	}
	return root.Chmod(name, perm)
}
