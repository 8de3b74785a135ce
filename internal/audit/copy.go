package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/fluffy-agent/fluffy/internal/store"
)

// Copies of the log: backups (internal/backup), checked before use.

// Copy writes a consistent copy of the database r reads to dest (which
// must not exist), as of one read transaction, while a writer goes on,
// and returns the copy's newest checkpoint verified with vkey. Every
// write transaction replaces the head checkpoint with its entries, so the
// checkpoint returned signs exactly the entries in the copy. A log with
// no entries yet has none: the Checkpoint is then zero (Note nil).
func (r *Reader) Copy(ctx context.Context, dest, vkey string) (Checkpoint, error) {
	db, ok := r.db.(*store.DB)
	if !ok {
		return Checkpoint{}, errors.New("audit: this reader cannot copy its database")
	}
	if err := db.VacuumInto(ctx, dest); err != nil {
		return Checkpoint{}, fmt.Errorf("audit: %w", err)
	}
	c, err := OpenCopy(dest)
	if err != nil {
		return Checkpoint{}, err
	}
	defer c.Close()
	cps, err := c.storedCheckpoints(ctx)
	if err != nil || len(cps) == 0 {
		return Checkpoint{}, err
	}
	return ParseCheckpoint(cps[len(cps)-1].note, vkey)
}

// OpenCopy opens a copy of the log (a backup) read-only and immutable:
// reading it changes none of its bytes.
func OpenCopy(path string) (*Reader, error) {
	db, err := store.OpenCopy(path)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return &Reader{db: db, path: path}, nil
}

// CopyCheck says what VerifyCopy checks a copy against.
type CopyCheck struct {
	// Verifier is the log's verifier key (required).
	Verifier string
	// Saved is the signed checkpoint recorded beside the copy when it
	// was taken (required): the copy must end exactly there.
	Saved []byte
	// Witness is the content of the checkpoint file kept under keys/
	// (CheckpointFile); nil when there is none.
	Witness []byte
	// Live, when set, is the log in use: a copy older than the witness
	// must then be a prefix of it (the same chain hash at the copy's
	// size).
	Live *Reader
}

// CopyReport describes a copy that verified.
type CopyReport struct {
	Report
	Saved Checkpoint
	// Witness is the checkpoint kept under keys/ (Size 0 when none).
	Witness Checkpoint
	// Behind is how many entries the witness covers past the copy: a
	// restore of the copy loses them.
	Behind uint64
	// PrefixChecked is true when the copy was compared with the live
	// log (CopyCheck.Live, when Behind > 0); Diverges, that the live
	// log's chain hash at the copy's size differs: one of the two was
	// rewritten since, and the copy is the one that verified.
	PrefixChecked, Diverges bool
}

// VerifyCopy checks a copy of the log at path: every entry from its
// anchor (a full verification), that it ends exactly at the saved
// checkpoint, that the witness under keys/ is signed by the same key and,
// when the witness is no newer than the copy, that the copy contains it;
// when it is newer, whether the copy is a prefix of the live log. It returns
// a *DamageError for a damaged copy, other errors when it cannot be read.
func VerifyCopy(ctx context.Context, path string, c CopyCheck) (CopyReport, error) {
	var rep CopyReport
	saved, err := ParseCheckpoint(c.Saved, c.Verifier)
	if err != nil {
		return rep, fmt.Errorf("audit: the checkpoint saved with %s: %w", path, err)
	}
	rep.Saved = saved
	trusted := [][]byte{c.Saved}
	if len(bytes.TrimSpace(c.Witness)) > 0 {
		w, err := ParseCheckpoint(c.Witness, c.Verifier)
		if err != nil {
			return rep, damage(0, DamageCheckpoint, "the checkpoint file under keys/: %v", err)
		}
		rep.Witness = w
		if w.Size <= saved.Size {
			trusted = append(trusted, c.Witness)
		} else {
			rep.Behind = w.Size - saved.Size
		}
	}
	r, err := OpenCopy(path)
	if err != nil {
		return rep, err
	}
	defer r.Close()
	if rep.Report, err = r.Verify(ctx, VerifyOptions{Verifier: c.Verifier, Full: true, Trusted: trusted}); err != nil {
		return rep, err
	}
	if rep.Size != saved.Size {
		return rep, damage(min(rep.Size, saved.Size)+1, DamageTruncated, "%s holds %d entries, the checkpoint saved with it %d", filepath.Base(path), rep.Size, saved.Size)
	}
	if rep.Behind > 0 && c.Live != nil && saved.Size > 0 {
		rw, ok, err := dbSource{c.Live}.row(ctx, saved.Size)
		if err != nil {
			return rep, err
		}
		if ok {
			// A difference is no fault of the copy, which verified on
			// its own: the live log may be the damaged one.
			rep.PrefixChecked, rep.Diverges = true, !bytes.Equal(rw.hash, saved.Chain)
		}
	}
	return rep, nil
}

// WriteCheckpointFile replaces the checkpoint file under keyDir with one
// holding note alone (written to a temporary file, synced, renamed). It
// is for a restore: the file then describes the restored log, so writers
// continue it. The caller keeps the old file.
func WriteCheckpointFile(keyDir string, note []byte) error {
	slot, err := encodeWitnessSlot(note)
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(keyDir, CheckpointFile), slot, 0o600)
}
