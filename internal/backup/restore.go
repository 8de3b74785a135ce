package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/lockfile"
	"github.com/fluffy-agent/fluffy/internal/store"
)

// Parts says what Restore puts back.
type Parts struct {
	Main  bool // fluffy.db
	Audit bool // audit.db, with the checkpoint file under keys/
}

// RestoreReport says what a restore did and what it cost.
type RestoreReport struct {
	Backup Backup
	// Aside lists where the files in use were moved (never deleted).
	Aside []string
	// Lost names the sessions fluffy.db's copy does not hold: created
	// after the backup, as the audit log records them.
	Lost []string
	// RolledBack names the sessions the copy holds that changed after
	// the backup: they are back to their state then.
	RolledBack []string
	// LostUnknown says why Lost could not be worked out (the audit log
	// did not read), "" when it was.
	LostUnknown string
	// AuditLost is how many audit entries the checkpoint file covered
	// past the copy: the restored log no longer holds them (the moved
	// aside files do).
	AuditLost uint64
}

// Restore puts the backup called name back in place of the files in use,
// after verifying it. It refuses (ErrRunning) while a kernel or an audit
// writer uses the data directory. The files in use are renamed with a
// ".replaced-TIME" suffix, never deleted: fluffy.db with its -wal and
// -shm; for the audit log also audit.db's, keys/audit.checkpoint (replaced
// by the checkpoint saved with the copy, so writers continue the restored
// log) and keys/audit.verified.
func Restore(ctx context.Context, o Options, name string, p Parts) (RestoreReport, error) {
	return restore(ctx, o, name, p, "replaced")
}

func restore(ctx context.Context, o Options, name string, p Parts, why string) (RestoreReport, error) {
	var rep RestoreReport
	if !p.Main && !p.Audit {
		return rep, errors.New("backup: nothing to restore")
	}
	release, err := lockAll(ctx, o.Data, p.Audit)
	if err != nil {
		return rep, err
	}
	defer release()
	vr, err := Verify(ctx, o, name, !p.Audit)
	if err != nil {
		return rep, fmt.Errorf("backup: not restored, the backup does not verify: %w", err)
	}
	rep.Backup = vr.Backup
	if _, ok := vr.Files[datadir.AuditDB]; p.Audit && !ok {
		return rep, fmt.Errorf("backup %s holds no audit log", name)
	}
	suffix := "." + why + "-" + o.now().UTC().Format(nameLayout)
	if p.Main {
		// Read from the log in use before it may be replaced.
		lostSessions(ctx, o, vr.Backup, &rep)
	}
	if p.Audit {
		if err := restoreAudit(o, vr, suffix, &rep); err != nil {
			return rep, err
		}
	}
	if p.Main {
		if err := putBack(o.Data, vr.Dir, datadir.StateDB, suffix, &rep); err != nil {
			return rep, err
		}
		if err := store.QuickCheck(ctx, o.Data.Path(datadir.StateDB)); err != nil {
			return rep, fmt.Errorf("backup: the restored %s: %w", datadir.StateDB, err)
		}
	}
	return rep, nil
}

func restoreAudit(o Options, vr Report, suffix string, rep *RestoreReport) error {
	keys := o.Data.Path(datadir.Keys)
	if err := putBack(o.Data, vr.Dir, datadir.AuditDB, suffix, rep); err != nil {
		return err
	}
	for _, f := range []string{audit.CheckpointFile, audit.VerifiedFile} {
		p := filepath.Join(keys, f)
		if err := os.Rename(p, p+suffix); err == nil {
			rep.Aside = append(rep.Aside, p+suffix)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("backup: move %s aside: %w", p, err)
		}
	}
	saved, err := os.ReadFile(filepath.Join(vr.Dir, CheckpointFile))
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if err := audit.WriteCheckpointFile(keys, saved); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if vr.Audit != nil {
		rep.AuditLost = vr.Audit.Behind
	}
	return nil
}

// lockAll takes the kernel's lock (and with withAudit the audit writer's)
// without waiting: holding them keeps a kernel from starting while files
// move.
func lockAll(ctx context.Context, d datadir.Dir, withAudit bool) (func(), error) {
	paths := []string{d.Path(datadir.KernelLock)}
	if withAudit {
		paths = append(paths, d.Path(datadir.AuditDB)+".lock")
	}
	var held []*lockfile.Lock
	release := func() {
		for _, l := range held {
			_ = l.Release()
		}
	}
	for _, p := range paths {
		l, err := lockfile.Acquire(ctx, p, lockfile.Options{})
		var busy *lockfile.BusyError
		if errors.As(err, &busy) {
			release()
			who := "a kernel ('fluffy kernel stop', or stop 'fluffy serve')"
			if p != d.Path(datadir.KernelLock) {
				who = "an audit log writer (a sandbox server or a fluffy command)"
				if busy.PID > 0 {
					who = fmt.Sprintf("an audit log writer, pid %d", busy.PID)
				}
			}
			return nil, fmt.Errorf("backup: %w: %s holds %s; stop it and run the command again", ErrRunning, who, p)
		}
		if err != nil {
			release()
			return nil, fmt.Errorf("backup: %w", err)
		}
		held = append(held, l)
	}
	return release, nil
}

// putBack moves name (and its -wal and -shm: a WAL left beside a restored
// file would be replayed into it) aside with suffix, then copies the
// backup's file in through a temporary file, synced and renamed.
func putBack(d datadir.Dir, from, name, suffix string, rep *RestoreReport) error {
	dst := d.Path(name)
	for _, ext := range []string{"", "-wal", "-shm"} {
		if err := os.Rename(dst+ext, dst+ext+suffix); err == nil {
			rep.Aside = append(rep.Aside, dst+ext+suffix)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("backup: move %s aside: %w", dst+ext, err)
		}
	}
	if err := copyFile(filepath.Join(from, name), dst); err != nil {
		return fmt.Errorf("backup: restore %s: %w", dst, err)
	}
	return syncDir(d.Root)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".restoring"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// lostSessions names the sessions the audit log in use shows active since
// the backup was taken: those the backup's fluffy.db lacks are lost, the
// others rolled back.
func lostSessions(ctx context.Context, o Options, b Backup, rep *RestoreReport) {
	r, err := audit.OpenReader(ctx, o.Data.Path(datadir.AuditDB))
	if errors.Is(err, audit.ErrNoLog) {
		return
	}
	if err != nil {
		rep.LostUnknown = err.Error()
		return
	}
	defer r.Close()
	var ids []string
	seen := map[string]bool{}
	// The backup's time was read before its copies began: a session
	// active around it is in the copy (rolled back) or not (lost).
	err = r.Entries(ctx, audit.Filter{Since: b.Time}, func(e audit.Entry) error {
		if e.Session != "" && !seen[e.Session] {
			seen[e.Session] = true
			ids = append(ids, e.Session)
		}
		return nil
	})
	if err != nil {
		rep.LostUnknown = err.Error()
		return
	}
	if len(ids) == 0 {
		return
	}
	db, err := store.OpenCopy(filepath.Join(b.Dir, datadir.StateDB))
	if err != nil {
		rep.LostUnknown = err.Error()
		return
	}
	defer db.Close()
	for _, id := range ids {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sessions WHERE id = ?`, id).Scan(&n); err != nil {
			rep.LostUnknown = err.Error()
			return
		}
		if n == 0 {
			rep.Lost = append(rep.Lost, id)
		} else {
			rep.RolledBack = append(rep.RolledBack, id)
		}
	}
}

// Recovery is what Recover did at a start.
type Recovery struct {
	// Damage is what the check found; nil when fluffy.db was sound (and
	// nothing else was done).
	Damage *store.CorruptError
	Report RestoreReport
}

// Message tells the person what happened and what was lost, in full.
func (r Recovery) Message() string {
	if r.Damage == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s was damaged (%s); it was moved aside and the backup %s (taken %s) restored.\n",
		datadir.StateDB, r.Damage.Detail, r.Report.Backup.Name, r.Report.Backup.Time.Format(time.RFC3339))
	for _, a := range r.Report.Aside {
		fmt.Fprintf(&b, "kept: %s\n", a)
	}
	switch {
	case r.Report.LostUnknown != "":
		fmt.Fprintf(&b, "the sessions since the backup could not be listed: %s\n", r.Report.LostUnknown)
	case len(r.Report.Lost) == 0 && len(r.Report.RolledBack) == 0:
		b.WriteString("no session was active since the backup: nothing was lost\n")
	}
	if len(r.Report.Lost) > 0 {
		fmt.Fprintf(&b, "lost (created after the backup): %s\n", strings.Join(r.Report.Lost, ", "))
	}
	if len(r.Report.RolledBack) > 0 {
		fmt.Fprintf(&b, "rolled back to their state at the backup: %s\n", strings.Join(r.Report.RolledBack, ", "))
	}
	return b.String()
}

// NoticeSuffix ends the name of the file Recover writes its message to,
// beside the damaged file it moved aside ('fluffy doctor' shows it).
const NoticeSuffix = ".txt"

// Recover checks fluffy.db (PRAGMA quick_check) before a kernel opens it.
// When it is damaged, it moves it aside (".damaged-TIME"), restores the
// newest backup whose fluffy.db verifies, and returns what was lost (also
// written beside the damaged file, NoticeSuffix). With no verified backup
// it returns an error wrapping ErrNoBackup and the damage, and leaves the
// file as it is: starting on an empty database would lose every session
// without a person deciding so.
func Recover(ctx context.Context, o Options) (Recovery, error) {
	err := store.QuickCheck(ctx, o.Data.Path(datadir.StateDB))
	var ce *store.CorruptError
	if !errors.As(err, &ce) {
		return Recovery{}, err
	}
	rec := Recovery{Damage: ce}
	b, skipped, err := Newest(ctx, o, true)
	if err != nil {
		for _, s := range skipped {
			err = fmt.Errorf("%w; %w", err, s)
		}
		p := o.Data.Path(datadir.StateDB)
		return rec, fmt.Errorf("%w; %w\nfix: to start with an empty database (every session is lost), move the damaged file aside: mv %s %s.damaged (and its -wal and -shm); or put a copy kept elsewhere in its place (docs/troubleshooting.md#a-damaged-database)", ce, err, p, p)
	}
	if rec.Report, err = restore(ctx, o, b.Name, Parts{Main: true}, "damaged"); err != nil {
		return rec, fmt.Errorf("%w; restoring %s: %w", ce, b.Name, err)
	}
	for _, a := range rec.Report.Aside {
		if filepath.Base(a) != datadir.StateDB && strings.HasPrefix(filepath.Base(a), datadir.StateDB+".damaged-") {
			_ = os.WriteFile(a+NoticeSuffix, []byte(rec.Message()), 0o600)
		}
	}
	return rec, nil
}
