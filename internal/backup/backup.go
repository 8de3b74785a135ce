// Package backup owns the data directory's backups (docs/operations.md):
// consistent copies of fluffy.db and audit.db taken while the daemon
// writes (SQLite's VACUUM INTO), each with the audit log's signed
// checkpoint recorded beside it; listing, verification, retention, and
// restore, which moves the current files aside (never deletes them). It
// also owns what happens when fluffy.db is found damaged at start: the
// damaged file is moved aside, the newest verified backup restored, and
// the sessions the backup does not hold are named (Recover).
//
// A backup is a directory backups/<time>/ holding fluffy.db, audit.db,
// audit.checkpoint (the copy's own head checkpoint, which signs exactly
// its entries) and manifest.json (sizes and SHA-256 of the files). It is
// written under a temporary name and renamed, so a crash never leaves a
// half backup that List would show.
package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/buildinfo"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/store"
)

// Files in a backup directory.
const (
	ManifestFile   = "manifest.json"
	CheckpointFile = "audit.checkpoint"
	manifestFormat = "fluffy-backup-v1"
	// nameLayout names a backup by its UTC time (no colons: a file
	// name everywhere).
	nameLayout = "20060102T150405.000Z"
	tmpPrefix  = ".tmp-"
)

// Errors callers branch on.
var (
	// ErrNotFound: no backup of that name.
	ErrNotFound = errors.New("no such backup")
	// ErrNoBackup: there is no verified backup to restore from.
	ErrNoBackup = errors.New("no verified backup")
	// ErrRunning: a kernel or another writer uses the data directory, so
	// it cannot be restored now.
	ErrRunning = errors.New("fluffy is running on this data directory")
)

// Manifest describes a backup; it is manifest.json.
type Manifest struct {
	Format string    `json:"format"`
	Time   time.Time `json:"time"`
	// Version is the fluffy that took it.
	Version string          `json:"version"`
	Files   map[string]File `json:"files"`
	// AuditSize is the number of the copy's last audit entry (the saved
	// checkpoint's size).
	AuditSize uint64 `json:"audit_size"`
	// Sessions is how many sessions the copy of fluffy.db holds.
	Sessions int `json:"sessions"`
}

// File is one copied database.
type File struct {
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// Backup is one backup as List finds it.
type Backup struct {
	Name string
	Dir  string
	Manifest
	// Err is why the manifest could not be read (the backup is then
	// unusable).
	Err error
}

// Options says which data directory to back up or restore.
type Options struct {
	// Data is the data directory (required).
	Data datadir.Dir
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (o Options) now() time.Time {
	if o.Now == nil {
		return time.Now()
	}
	return o.Now()
}

func (o Options) dir() string { return o.Data.Path(datadir.Backups) }

// verifier reads the audit log's verifier key (keys/audit.pub); "" when
// the log has no key yet.
func verifier(d datadir.Dir) (string, error) {
	b, err := os.ReadFile(d.Path(datadir.Keys, audit.PubFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("backup: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Create takes a backup now and returns it. The copies are consistent
// while a kernel writes both databases: each is one read transaction of
// its database. A data directory without an audit log yet gets a backup of
// fluffy.db alone.
func Create(ctx context.Context, o Options) (Backup, error) {
	if err := o.Data.Ensure(); err != nil {
		return Backup{}, fmt.Errorf("backup: %w", err)
	}
	t := o.now().UTC()
	name := t.Format(nameLayout)
	final := filepath.Join(o.dir(), name)
	if _, err := os.Stat(final); err == nil {
		return Backup{}, fmt.Errorf("backup: %s exists already", final)
	}
	tmp := filepath.Join(o.dir(), tmpPrefix+name)
	if err := os.RemoveAll(tmp); err != nil {
		return Backup{}, fmt.Errorf("backup: %w", err)
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return Backup{}, fmt.Errorf("backup: %w", err)
	}
	m := Manifest{Format: manifestFormat, Time: t, Version: buildinfo.Get().Version, Files: map[string]File{}}
	err := create(ctx, o, tmp, &m)
	if err == nil {
		err = writeManifest(tmp, m)
	}
	if err == nil {
		err = syncDir(tmp)
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err == nil {
		err = syncDir(o.dir())
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return Backup{}, fmt.Errorf("backup: %w", err)
	}
	return Backup{Name: name, Dir: final, Manifest: m}, nil
}

func create(ctx context.Context, o Options, tmp string, m *Manifest) error {
	// Without a key (no log yet) there is nothing to sign a copy with.
	vkey, err := verifier(o.Data)
	if err != nil {
		return err
	}
	r, err := audit.OpenReader(ctx, o.Data.Path(datadir.AuditDB))
	switch {
	case errors.Is(err, audit.ErrNoLog) || err == nil && vkey == "":
		if r != nil {
			r.Close()
		}
	case err != nil:
		return err
	default:
		cp, err := r.Copy(ctx, filepath.Join(tmp, datadir.AuditDB), vkey)
		r.Close()
		if err != nil {
			return err
		}
		if cp.Note == nil {
			// Nothing recorded yet: nothing to keep.
			return os.Remove(filepath.Join(tmp, datadir.AuditDB))
		}
		if err := writeSynced(filepath.Join(tmp, CheckpointFile), cp.Note); err != nil {
			return err
		}
		m.AuditSize = cp.Size
		if m.Files[datadir.AuditDB], err = describe(filepath.Join(tmp, datadir.AuditDB)); err != nil {
			return err
		}
	}
	db, err := store.OpenMain(ctx, o.Data.Root)
	if err != nil {
		return err
	}
	defer db.Close()
	dest := filepath.Join(tmp, datadir.StateDB)
	if err := db.VacuumInto(ctx, dest); err != nil {
		return err
	}
	if m.Sessions, err = countSessions(ctx, dest); err != nil {
		return err
	}
	m.Files[datadir.StateDB], err = describe(dest)
	return err
}

func countSessions(ctx context.Context, path string) (int, error) {
	db, err := store.OpenCopy(path)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sessions`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the sessions in %s: %w", path, err)
	}
	return n, nil
}

func describe(path string) (File, error) {
	f, err := os.Open(path)
	if err != nil {
		return File{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return File{}, fmt.Errorf("read %s: %w", path, err)
	}
	return File{Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

func writeManifest(dir string, m Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeSynced(filepath.Join(dir, ManifestFile), append(b, '\n'))
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// List returns the backups, newest first. A backup whose manifest does
// not read is listed with Err set; unfinished ones (a crash during
// Create) are not listed.
func List(o Options) ([]Backup, error) {
	ents, err := os.ReadDir(o.dir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	var out []Backup
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		out = append(out, read(o, e.Name()))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name > out[j].Name })
	return out, nil
}

// read loads the backup called name.
func read(o Options, name string) Backup {
	b := Backup{Name: name, Dir: filepath.Join(o.dir(), name)}
	raw, err := os.ReadFile(filepath.Join(b.Dir, ManifestFile))
	if err != nil {
		b.Err = err
		return b
	}
	if err := json.Unmarshal(raw, &b.Manifest); err != nil {
		b.Err = fmt.Errorf("%s: %w", ManifestFile, err)
		return b
	}
	if b.Format != manifestFormat {
		b.Err = fmt.Errorf("%s: format %q, want %q", ManifestFile, b.Format, manifestFormat)
	}
	return b
}

// Get returns the backup called name (ErrNotFound when there is none).
func Get(o Options, name string) (Backup, error) {
	if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") {
		return Backup{}, fmt.Errorf("backup: %w: %q", ErrNotFound, name)
	}
	if _, err := os.Stat(filepath.Join(o.dir(), name)); errors.Is(err, fs.ErrNotExist) {
		return Backup{}, fmt.Errorf("backup: %w: %q ('fluffy backup ls' lists them)", ErrNotFound, name)
	}
	b := read(o, name)
	if b.Err != nil {
		return b, fmt.Errorf("backup %s: %w", name, b.Err)
	}
	return b, nil
}

// Prune removes all but the newest keep backups (keep <= 0 keeps all) and
// what a crash during Create left. It returns the names it removed.
func Prune(o Options, keep int) ([]string, error) {
	ents, err := os.ReadDir(o.dir())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("backup: %w", err)
	}
	var removed []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			if err := os.RemoveAll(filepath.Join(o.dir(), e.Name())); err != nil {
				return removed, fmt.Errorf("backup: %w", err)
			}
		}
	}
	if keep <= 0 {
		return nil, nil
	}
	all, err := List(o)
	if err != nil {
		return nil, err
	}
	for _, b := range all[min(keep, len(all)):] {
		if err := os.RemoveAll(b.Dir); err != nil {
			return removed, fmt.Errorf("backup: %w", err)
		}
		removed = append(removed, b.Name)
	}
	return removed, nil
}
