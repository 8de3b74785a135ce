package backup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/lockfile"
	"github.com/fluffy-agent/fluffy/internal/store"
)

// fixture is a data directory with an open fluffy.db and audit log.
type fixture struct {
	o   Options
	db  *store.DB
	log *audit.Log
	n   int // sessions created so far
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	d, err := datadir.New(filepath.Join(t.TempDir(), "home"))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Ensure(); err != nil {
		t.Fatal(err)
	}
	f := &fixture{o: Options{Data: d}}
	if f.db, err = store.OpenMain(t.Context(), d.Root); err != nil {
		t.Fatal(err)
	}
	f.openLog(t)
	t.Cleanup(func() {
		f.db.Close()
		if f.log != nil {
			f.log.Close()
		}
	})
	return f
}

func (f *fixture) openLog(t *testing.T) {
	t.Helper()
	var err error
	f.log, err = audit.Open(t.Context(), audit.Options{Path: f.o.Data.Path(datadir.AuditDB), KeyDir: f.o.Data.Path(datadir.Keys)})
	if err != nil {
		t.Fatal(err)
	}
}

// session creates a session row and its audit entry, as the kernel does.
func (f *fixture) session(ctx context.Context) (string, error) {
	f.n++
	id := fmt.Sprintf("s%04d", f.n)
	now := time.Now().UnixNano()
	if _, err := f.db.ExecContext(ctx, `INSERT INTO sessions (id, created_at, updated_at, kind, workspace, model, status) VALUES (?, ?, ?, 'coding', '/w', 'replay/x', 'running')`, id, now, now); err != nil {
		return "", err
	}
	if _, err := f.log.Append(ctx, audit.Entry{Session: id, Kind: "test.session", Actor: "kernel"}); err != nil {
		return "", err
	}
	return id, f.log.Flush(ctx)
}

// A backup taken while sessions are being written verifies, and holds a
// prefix of them in both databases.
func TestCreateUnderWriter(t *testing.T) {
	ctx := t.Context()
	f := newFixture(t)
	var done atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := f.session(context.WithoutCancel(ctx)); err != nil {
				t.Error(err)
				return
			}
			done.Add(1)
		}
	}()
	for done.Load() < 20 {
		time.Sleep(time.Millisecond)
	}
	b, err := Create(ctx, f.o)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(ctx, f.o, b.Name, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Audit == nil || rep.Audit.Size != b.AuditSize || b.AuditSize == 0 {
		t.Fatalf("audit copy: %+v, manifest size %d", rep.Audit, b.AuditSize)
	}
	if b.Sessions < 20 || b.Sessions > int(done.Load())+1 {
		t.Errorf("the copy holds %d sessions; %d were confirmed before and during", b.Sessions, done.Load())
	}
	c, err := store.OpenCopy(filepath.Join(b.Dir, datadir.StateDB))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var hi string
	if err := c.QueryRowContext(ctx, `SELECT max(id) FROM sessions`).Scan(&hi); err != nil || hi != fmt.Sprintf("s%04d", b.Sessions) {
		t.Errorf("the copy's sessions end at %q (%v), want a prefix of %d", hi, err, b.Sessions)
	}
	all, err := List(f.o)
	if err != nil || len(all) != 1 || all[0].Name != b.Name {
		t.Errorf("List = %+v, %v", all, err)
	}
}

// Verify catches a copy changed after it was taken and a saved checkpoint
// that is not the copy's.
func TestVerifyCatchesDamage(t *testing.T) {
	ctx := t.Context()
	f := newFixture(t)
	for range 3 {
		if _, err := f.session(ctx); err != nil {
			t.Fatal(err)
		}
	}
	b1, err := Create(ctx, f.o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.session(ctx); err != nil {
		t.Fatal(err)
	}
	f.o.Now = func() time.Time { return time.Now().Add(time.Minute) }
	b2, err := Create(ctx, f.o)
	if err != nil {
		t.Fatal(err)
	}
	// A byte of fluffy.db's copy flipped.
	p := filepath.Join(b1.Dir, datadir.StateDB)
	raw, _ := os.ReadFile(p)
	raw[len(raw)-10] ^= 1
	if err := os.WriteFile(p, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(ctx, f.o, b1.Name, true); err == nil {
		t.Error("a changed fluffy.db copy verified")
	}
	// The newer backup's checkpoint beside the older audit copy: the copy
	// ends before it.
	cp, _ := os.ReadFile(filepath.Join(b2.Dir, CheckpointFile))
	if err := os.WriteFile(filepath.Join(b1.Dir, CheckpointFile), cp, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := verifyAudit(ctx, f.o, b1); !errors.Is(err, audit.ErrDamaged) {
		t.Errorf("an audit copy shorter than its saved checkpoint: %v, want ErrDamaged", err)
	}
	// Newest skips the damaged one.
	nb, skipped, err := Newest(ctx, f.o, true)
	if err != nil || nb.Name != b2.Name || len(skipped) != 0 {
		t.Errorf("Newest = %s, %v, %v; want %s", nb.Name, skipped, err, b2.Name)
	}
}

// Restore refuses while a kernel holds the data directory, moves the files
// in use aside, and leaves a log that a writer continues.
func TestRestore(t *testing.T) {
	ctx := t.Context()
	f := newFixture(t)
	if _, err := f.session(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := Create(ctx, f.o)
	if err != nil {
		t.Fatal(err)
	}
	after, err := f.session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k, err := lockfile.Acquire(ctx, f.o.Data.Path(datadir.KernelLock), lockfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(ctx, f.o, b.Name, Parts{Main: true}); !errors.Is(err, ErrRunning) {
		t.Fatalf("restore beside a kernel: %v, want ErrRunning", err)
	}
	k.Release()
	if _, err := Restore(ctx, f.o, b.Name, Parts{Audit: true}); !errors.Is(err, ErrRunning) {
		t.Fatalf("restore beside an audit writer: %v, want ErrRunning", err)
	}
	f.log.Close()
	f.log = nil
	f.db.Close()
	rep, err := Restore(ctx, f.o, b.Name, Parts{Main: true, Audit: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.AuditLost == 0 || !slices.Equal(rep.Lost, []string{after}) {
		t.Errorf("report: %+v; want the session %s lost and audit entries lost", rep, after)
	}
	for _, a := range rep.Aside {
		if _, err := os.Stat(a); err != nil {
			t.Errorf("aside: %v", err)
		}
	}
	// The checkpoint file under keys/ describes the restored log, so a
	// later truncation of it is caught again.
	w, err := os.ReadFile(f.o.Data.Path(datadir.Keys, audit.CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	vkey, _ := verifier(f.o.Data)
	if cp, err := audit.ParseCheckpoint(w, vkey); err != nil || cp.Size != b.AuditSize {
		t.Fatalf("checkpoint file after restore: size %d, %v; want %d", cp.Size, err, b.AuditSize)
	}
	// The restored log verifies and takes new entries.
	f.openLog(t)
	if _, err := f.log.VerifyAtStart(ctx); err != nil {
		t.Fatalf("the restored log: %v", err)
	}
	if f.db, err = store.OpenMain(ctx, f.o.Data.Root); err != nil {
		t.Fatal(err)
	}
	if _, err := f.session(ctx); err != nil {
		t.Fatal(err)
	}
}

// A damaged fluffy.db is moved aside and the newest verified backup put
// back, naming the sessions lost; without a backup the start is refused
// and the file left in place.
func TestRecover(t *testing.T) {
	ctx := t.Context()
	f := newFixture(t)
	if _, err := f.session(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, err := Recover(ctx, f.o); err != nil || rec.Damage != nil {
		t.Fatalf("sound database: %+v, %v", rec, err)
	}
	damageDB(t, f)
	if _, err := Recover(ctx, f.o); !errors.Is(err, ErrNoBackup) || !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("no backup: %v, want ErrNoBackup and ErrCorrupt", err)
	}
	if _, err := os.Stat(f.o.Data.Path(datadir.StateDB)); err != nil {
		t.Fatal(err)
	}
	// Start again: a sound database, a backup, then a session after it.
	for _, ext := range []string{"", "-wal", "-shm"} {
		os.Remove(f.o.Data.Path(datadir.StateDB) + ext)
	}
	var err error
	if f.db, err = store.OpenMain(ctx, f.o.Data.Root); err != nil {
		t.Fatal(err)
	}
	kept, err := f.session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Create(ctx, f.o); err != nil {
		t.Fatal(err)
	}
	lost, err := f.session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.ExecContext(ctx, `UPDATE sessions SET status = 'closed' WHERE id = ?`, kept); err != nil {
		t.Fatal(err)
	}
	if _, err := f.log.Append(ctx, audit.Entry{Session: kept, Kind: "test.close", Actor: "kernel"}); err != nil {
		t.Fatal(err)
	}
	if err := f.log.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	damageDB(t, f)
	rec, err := Recover(ctx, f.o)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Damage == nil || !slices.Equal(rec.Report.Lost, []string{lost}) || !slices.Contains(rec.Report.RolledBack, kept) {
		t.Fatalf("recovery: %+v\n%s", rec.Report, rec.Message())
	}
	if err := store.QuickCheck(ctx, f.o.Data.Path(datadir.StateDB)); err != nil {
		t.Fatal(err)
	}
	notice, err := filepath.Glob(f.o.Data.Path(datadir.StateDB + ".damaged-*" + NoticeSuffix))
	if err != nil || len(notice) != 1 {
		t.Fatalf("notice files: %v %v", notice, err)
	}
	if b, _ := os.ReadFile(notice[0]); string(b) != rec.Message() {
		t.Errorf("notice %q, message %q", b, rec.Message())
	}
}

// damageDB closes fluffy.db, folds its WAL in and overwrites pages.
func damageDB(t *testing.T, f *fixture) {
	t.Helper()
	ctx := t.Context()
	if _, err := f.db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	f.db.Close()
	p := f.o.Data.Path(datadir.StateDB)
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for i := 4096; i < len(raw); i++ {
		raw[i] = 0x5A
	}
	if err := os.WriteFile(p, raw, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestPrune(t *testing.T) {
	ctx := t.Context()
	f := newFixture(t)
	base := time.Now()
	var names []string
	for i := range 4 {
		f.o.Now = func() time.Time { return base.Add(time.Duration(i) * time.Minute) }
		b, err := Create(ctx, f.o)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, b.Name)
	}
	if err := os.Mkdir(filepath.Join(f.o.dir(), tmpPrefix+"x"), 0o700); err != nil {
		t.Fatal(err)
	}
	removed, err := Prune(f.o, 2)
	if err != nil || !slices.Equal(removed, []string{names[1], names[0]}) {
		t.Fatalf("Prune = %v, %v", removed, err)
	}
	left, _ := os.ReadDir(f.o.dir())
	if len(left) != 2 {
		t.Errorf("left: %v", left)
	}
}

// A copy the checkpoint file under keys/ (the witness) does not describe
// is refused before use: after a restore of an older backup and a new
// entry, the log in use has forked from a newer backup, whose copy no
// longer holds what the witness signs. The older backup, a prefix of the
// log in use, still verifies.
func TestVerifyAgainstTheWitness(t *testing.T) {
	ctx := t.Context()
	f := newFixture(t)
	if _, err := f.session(ctx); err != nil {
		t.Fatal(err)
	}
	b0, err := Create(ctx, f.o)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := f.session(ctx); err != nil {
			t.Fatal(err)
		}
	}
	f.o.Now = func() time.Time { return time.Now().Add(time.Minute) }
	b1, err := Create(ctx, f.o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(ctx, f.o, b1.Name, false); err != nil {
		t.Fatalf("the newer backup before the fork: %v", err)
	}
	f.log.Close()
	f.log = nil
	f.db.Close()
	if _, err := Restore(ctx, f.o, b0.Name, Parts{Main: true, Audit: true}); err != nil {
		t.Fatal(err)
	}
	f.openLog(t)
	if f.db, err = store.OpenMain(ctx, f.o.Data.Root); err != nil {
		t.Fatal(err)
	}
	if _, err := f.session(ctx); err != nil {
		t.Fatal(err)
	}
	vkey, _ := verifier(f.o.Data)
	w, err := os.ReadFile(f.o.Data.Path(datadir.Keys, audit.CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	if cp, err := audit.ParseCheckpoint(w, vkey); err != nil || cp.Size <= b0.AuditSize || cp.Size > b1.AuditSize {
		t.Fatalf("the witness at %d (%v): want it past the older backup (%d), not past the newer (%d)", cp.Size, err, b0.AuditSize, b1.AuditSize)
	}
	if _, err := Verify(ctx, f.o, b1.Name, false); !errors.Is(err, audit.ErrDamaged) {
		t.Errorf("a backup the witness does not describe: %v, want ErrDamaged", err)
	}
	if _, err := Verify(ctx, f.o, b0.Name, false); err != nil {
		t.Errorf("the older backup, a prefix of the log in use: %v", err)
	}
	f.log.Close()
	f.log = nil
	if _, err := Restore(ctx, f.o, b1.Name, Parts{Audit: true}); !errors.Is(err, audit.ErrDamaged) {
		t.Errorf("restoring a backup the witness does not describe: %v, want ErrDamaged", err)
	}
}
