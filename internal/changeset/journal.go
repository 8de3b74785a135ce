package changeset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

const journalFile = "apply.journal"

// Step kinds of an apply.
const (
	stepDelete = "delete" // rename Path aside to Bak
	stepChmod  = "chmod"  // directory mode OldPerm -> NewPerm
	stepMkdir  = "mkdir"
	stepPut    = "put" // stage Tmp, then (Bak: hard link of the old) rename Tmp to Path
)

// step is one mutation of the real tree, with every name it uses chosen
// before the first mutation so that a crash can be undone from the
// journal alone.
type step struct {
	Kind    string `json:"kind"`
	Path    string `json:"path"`
	Tmp     string `json:"tmp,omitempty"`
	Bak     string `json:"bak,omitempty"`
	Replace bool   `json:"replace,omitempty"` // put over an existing entry
	OldPerm uint32 `json:"old_perm,omitempty"`
	NewPerm uint32 `json:"new_perm,omitempty"`
	Change  Change `json:"change"`
}

// journal is an apply in progress, written to the change set directory
// (and synced) before the real tree is touched. Committed is set once
// every rename is done: from then on recovery rolls forward, before it
// rolls back.
type journal struct {
	// Staged: every put's temporary was written and synced; no rename
	// of a put happens before this is in the journal.
	Staged    bool     `json:"staged"`
	Committed bool     `json:"committed"`
	Steps     []step   `json:"steps"`
	Plan      []Change `json:"plan"`
}

// newJournal orders the plan into steps: deletions (a directory renamed
// aside carries its deleted descendants), then directories parents first,
// then files and symlinks.
func newJournal(plan []Change) *journal {
	j := &journal{Plan: plan}
	deleted := map[string]bool{}
	for _, c := range plan {
		if c.Op == Deleted && !coveredBy(c.Path, deleted) {
			j.Steps = append(j.Steps, step{Kind: stepDelete, Path: c.Path, Bak: randomName(c.Path, "bak"), Change: c})
			deleted[c.Path] = true
		}
	}
	for _, c := range plan {
		if c.Op == Deleted || c.Kind != KindDir {
			continue
		}
		if c.Op == Modified {
			j.Steps = append(j.Steps, step{Kind: stepChmod, Path: c.Path, OldPerm: unixPerm(c.OldMode), NewPerm: unixPerm(c.NewMode), Change: c})
		} else {
			j.Steps = append(j.Steps, step{Kind: stepMkdir, Path: c.Path, NewPerm: unixPerm(c.NewMode), Change: c})
		}
	}
	for _, c := range plan {
		if c.Op == Deleted || c.Kind == KindDir {
			continue
		}
		st := step{Kind: stepPut, Path: c.Path, Tmp: randomName(c.Path, "tmp"), Replace: c.Op == Modified, NewPerm: unixPerm(c.NewMode), Change: c}
		if st.Replace {
			st.Bak = randomName(c.Path, "bak")
		}
		j.Steps = append(j.Steps, st)
	}
	return j
}

func (cs *ChangeSet) journalPath() string { return filepath.Join(cs.dir, journalFile) }

// Interrupted reports whether the change set in dir holds the journal of
// an apply a crash interrupted: its workspace may be half changed until
// Open finishes or rolls the apply back.
func Interrupted(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, journalFile))
	return err == nil
}

func (cs *ChangeSet) writeJournal(j *journal) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	return writeSynced(cs.journalPath(), b)
}

// writeSynced replaces p with data durably.
func writeSynced(p string, data []byte) error {
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	serr := f.Sync()
	if err := errors.Join(werr, serr, f.Close()); err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(p))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// errCrash, returned by a test's file system, stops execute as a crash
// would: no rollback, the journal left behind.
var errCrash = errors.New("simulated crash")

// execute runs the journal's steps. On failure it rolls every step back
// and returns an *ApplyError.
func (cs *ChangeSet) execute(ctx context.Context, j *journal) (err error) {
	if err := cs.writeJournal(j); err != nil {
		return fmt.Errorf("changeset: write the apply journal: %w", err)
	}
	failPath := ""
	defer func() {
		if err == nil || errors.Is(err, errCrash) {
			return
		}
		rb := cs.rollback(j)
		err = &ApplyError{Path: failPath, Err: err, Rollback: rb}
	}()
	fs := cs.real
	synced := false
	for i := range j.Steps {
		st := &j.Steps[i]
		failPath = st.Path
		if err := ctx.Err(); err != nil {
			return err
		}
		if st.Kind == stepPut && !synced {
			// Stage every file and symlink; one sync makes them durable
			// before the first rename.
			for k := i; k < len(j.Steps); k++ {
				failPath = j.Steps[k].Path
				if err := cs.stage(&j.Steps[k]); err != nil {
					return err
				}
			}
			failPath = "(sync)"
			if err := fs.Sync(); err != nil {
				return err
			}
			j.Staged = true
			if err := cs.writeJournal(j); err != nil {
				return err
			}
			synced = true
			failPath = st.Path
		}
		switch st.Kind {
		case stepDelete:
			err = fs.Rename(st.Path, st.Bak)
		case stepChmod:
			err = fs.Chmod(st.Path, st.NewPerm)
		case stepMkdir:
			err = fs.Mkdir(st.Path, st.NewPerm)
		case stepPut:
			if st.Replace {
				if err = fs.Link(st.Path, st.Bak); err != nil {
					break
				}
			}
			err = fs.Rename(st.Tmp, st.Path)
		}
		if err != nil {
			return err
		}
	}
	j.Committed = true
	failPath = "(journal)"
	if err := cs.writeJournal(j); err != nil {
		return err
	}
	return nil
}

func (cs *ChangeSet) stage(st *step) error {
	if st.Kind != stepPut {
		return nil
	}
	if st.Change.Kind == KindSymlink {
		return cs.real.Symlink(st.Change.NewTarget, st.Tmp)
	}
	f, err := openFile(cs.upper, st.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	return cs.real.WriteTemp(st.Tmp, f, st.NewPerm)
}

// exists reports whether the real tree has an entry at rel.
func (cs *ChangeSet) exists(rel string) bool {
	n, err := cs.real.Lstat(rel)
	return err == nil && n.kind != KindNone
}

// rollback undoes an uncommitted journal's steps, newest first, judging
// from the tree what was done. It is idempotent, so an interrupted
// rollback can be run again; on success the journal is removed.
func (cs *ChangeSet) rollback(j *journal) error {
	fs := cs.real
	var errs []error
	for i := len(j.Steps) - 1; i >= 0; i-- {
		st := j.Steps[i]
		var err error
		switch st.Kind {
		case stepPut:
			switch {
			case cs.exists(st.Tmp):
				// not renamed: drop the staged copy (and a backup link)
				err = fs.Remove(st.Tmp)
				if err == nil && st.Replace && cs.exists(st.Bak) {
					err = fs.Remove(st.Bak)
				}
			case !j.Staged:
				// no put was renamed before staging finished
			case st.Replace && cs.exists(st.Bak):
				err = fs.Rename(st.Bak, st.Path) // renamed: restore the old
			case !st.Replace && cs.exists(st.Path):
				err = fs.Remove(st.Path) // renamed into a free place
			}
		case stepMkdir:
			if n, e := fs.Lstat(st.Path); e == nil && n.kind == KindDir {
				err = fs.Remove(st.Path)
			}
		case stepChmod:
			if n, e := fs.Lstat(st.Path); e == nil && n.kind == KindDir {
				err = fs.Chmod(st.Path, st.OldPerm)
			}
		case stepDelete:
			if cs.exists(st.Bak) {
				err = fs.Rename(st.Bak, st.Path)
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := os.Remove(cs.journalPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// finish completes a committed journal: backups removed, the new state
// recorded as the base, applied entries dropped from the upper layer, the
// journal removed.
func (cs *ChangeSet) finish(j *journal) error {
	for _, st := range j.Steps {
		if st.Bak != "" && cs.exists(st.Bak) {
			_ = cs.real.RemoveAll(st.Bak)
		}
		if st.Tmp != "" && cs.exists(st.Tmp) {
			_ = cs.real.RemoveAll(st.Tmp)
		}
	}
	_ = cs.real.Sync()
	if err := cs.rebase(j.Plan); err != nil {
		return err
	}
	if err := cs.cleanupUpper(j.Plan); err != nil {
		return err
	}
	if err := os.Remove(cs.journalPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// recoverJournal finishes or undoes an apply a crash interrupted. Open
// calls it.
func (cs *ChangeSet) recoverJournal() error {
	b, err := os.ReadFile(cs.journalPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	j := &journal{}
	if err := json.Unmarshal(b, j); err != nil {
		return fmt.Errorf("changeset: unreadable apply journal %s: %w", cs.journalPath(), err)
	}
	if j.Committed {
		return cs.finish(j)
	}
	if err := cs.rollback(j); err != nil {
		return fmt.Errorf("changeset: roll back an interrupted apply: %w", err)
	}
	return nil
}
