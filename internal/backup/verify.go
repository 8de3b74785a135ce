package backup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/store"
)

// Report is what Verify found in a backup that verified.
type Report struct {
	Backup
	// Audit is the audit copy's verification; nil when the backup has
	// no audit log or only fluffy.db was checked.
	Audit *audit.CopyReport
}

// Verify checks the backup called name: each file is the one recorded
// in its manifest (size and SHA-256), both databases pass
// integrity_check, and the audit copy verifies entry by entry, ends
// exactly at the checkpoint saved beside it, and agrees with the
// checkpoint file under keys/ (see audit.VerifyCopy). With mainOnly, only
// fluffy.db is checked (what a start needs to restore it).
func Verify(ctx context.Context, o Options, name string, mainOnly bool) (Report, error) {
	b, err := Get(o, name)
	if err != nil {
		return Report{Backup: b}, err
	}
	rep := Report{Backup: b}
	files := []string{datadir.StateDB}
	if !mainOnly {
		files = append(files, datadir.AuditDB)
	}
	for _, f := range files {
		want, ok := b.Files[f]
		if !ok {
			if f == datadir.StateDB {
				return rep, fmt.Errorf("backup %s: the manifest lists no %s", name, f)
			}
			continue
		}
		path := filepath.Join(b.Dir, f)
		got, err := describe(path)
		if err != nil {
			return rep, fmt.Errorf("backup %s: %w", name, err)
		}
		if got != want {
			return rep, fmt.Errorf("backup %s: %s changed since it was taken (%d bytes, sha256 %s; the manifest says %d, %s)", name, f, got.Bytes, got.SHA256, want.Bytes, want.SHA256)
		}
		if err := store.IntegrityCheck(ctx, path); err != nil {
			return rep, fmt.Errorf("backup %s: %w", name, err)
		}
	}
	if _, ok := b.Files[datadir.AuditDB]; mainOnly || !ok {
		return rep, nil
	}
	ar, err := verifyAudit(ctx, o, b)
	if err != nil {
		return rep, fmt.Errorf("backup %s: %s: %w", name, datadir.AuditDB, err)
	}
	rep.Audit = &ar
	return rep, nil
}

func verifyAudit(ctx context.Context, o Options, b Backup) (audit.CopyReport, error) {
	vkey, err := verifier(o.Data)
	if err != nil {
		return audit.CopyReport{}, err
	}
	if vkey == "" {
		return audit.CopyReport{}, fmt.Errorf("no verifier key in %s: the copy cannot be checked", o.Data.Path(datadir.Keys, audit.PubFile))
	}
	saved, err := os.ReadFile(filepath.Join(b.Dir, CheckpointFile))
	if err != nil {
		return audit.CopyReport{}, err
	}
	witness, err := os.ReadFile(o.Data.Path(datadir.Keys, audit.CheckpointFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return audit.CopyReport{}, err
	}
	c := audit.CopyCheck{Verifier: vkey, Saved: saved, Witness: witness}
	// The live log, when it reads, shows whether an older copy is its
	// prefix; a damaged live log is why one restores, so it is optional.
	if live, err := audit.OpenReader(ctx, o.Data.Path(datadir.AuditDB)); err == nil {
		defer live.Close()
		c.Live = live
	}
	return audit.VerifyCopy(ctx, filepath.Join(b.Dir, datadir.AuditDB), c)
}

// Newest returns the newest backup that verifies (only its fluffy.db with
// mainOnly), and the reasons the newer ones did not (ErrNoBackup when
// none does).
func Newest(ctx context.Context, o Options, mainOnly bool) (Backup, []error, error) {
	all, err := List(o)
	if err != nil {
		return Backup{}, nil, err
	}
	var skipped []error
	for _, b := range all {
		if b.Err != nil {
			skipped = append(skipped, fmt.Errorf("backup %s: %w", b.Name, b.Err))
			continue
		}
		if _, ok := b.Files[datadir.AuditDB]; !mainOnly && !ok {
			skipped = append(skipped, fmt.Errorf("backup %s holds no audit log", b.Name))
			continue
		}
		if _, err := Verify(ctx, o, b.Name, mainOnly); err != nil {
			skipped = append(skipped, err)
			continue
		}
		return b, skipped, nil
	}
	return Backup{}, skipped, fmt.Errorf("backup: %w in %s", ErrNoBackup, o.dir())
}
