package userenv

import (
	"context"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/sandboxd"
)

// AuditPaths returns the audit database's path and the key directory.
func (e *Env) AuditPaths() (db, keys string, err error) {
	d, err := e.DataDir()
	if err != nil {
		return "", "", err
	}
	return d.Path(datadir.AuditDB), d.Path(datadir.Keys), nil
}

// AuditOptions are the options of the audit log of the data directory,
// from the configuration, logging to Logger. wait is how long Open
// waits for another process holding the writer's lock (a sandbox server
// between runs lets go when asked). keepWAL is for the writers that run
// often and briefly (a sandboxed command, the kernel between sessions):
// their Close leaves SQLite's write-ahead log for the next opener
// instead of copying it into audit.db (three fsyncs fewer after the
// command); one-off commands such as 'fluffy audit append' leave a
// self-contained audit.db.
func (e *Env) AuditOptions(wait time.Duration, keepWAL bool) (audit.Options, error) {
	l, err := e.Config()
	if err != nil {
		return audit.Options{}, err
	}
	db, keys, err := e.AuditPaths()
	if err != nil {
		return audit.Options{}, err
	}
	c := l.Config.Audit
	return audit.Options{
		Path: db, KeyDir: keys,
		FlushEntries: c.FlushEntries, FlushInterval: c.FlushInterval.Std(),
		CheckpointEvery: c.CheckpointEvery, CheckpointAfter: c.CheckpointAfter.Std(),
		WarnSize: int64(c.WarnSize), LockWait: wait, KeepWAL: keepWAL,
		OnLocked: sandboxd.AskToReleaseAudit, Logger: e.Logger(),
	}, nil
}

// OpenAudit opens the audit log for writing (see AuditOptions).
func (e *Env) OpenAudit(ctx context.Context, wait time.Duration, keepWAL bool) (*audit.Log, error) {
	opts, err := e.AuditOptions(wait, keepWAL)
	if err != nil {
		return nil, err
	}
	return audit.Open(ctx, opts)
}

// SharedAudit is the audit log held open only while it is written, closed
// after idle without an entry (audit.Shared): for the long-lived kernel
// and commands that write now and then.
func (e *Env) SharedAudit(idle time.Duration) *audit.Shared {
	return audit.NewShared(func(ctx context.Context) (*audit.Log, error) {
		return e.OpenAudit(ctx, 5*time.Second, true)
	}, idle, e.Logger())
}
