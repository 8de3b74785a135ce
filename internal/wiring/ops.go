package wiring

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/fluffy-agent/fluffy/internal/backup"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/kernel"
)

// protectFromOOM lowers the kernel daemon's oom_score_adj
// (kernel.oom_protect): under memory pressure Linux then kills a
// sandboxed command (whose score every sandbox raises to the most,
// nsinit.OOMScoreAdj) long before the process that records it. Lowering
// needs CAP_SYS_RESOURCE; without it the score stays and the log says so
// once.
func protectFromOOM(c config.Kernel, log *slog.Logger) {
	if !c.OOMProtect {
		return
	}
	err := kernel.SetOOMScoreAdj(0, kernel.OOMScoreDaemon)
	switch {
	case err == nil:
		log.Info("oom_score_adj lowered", "oom_score_adj", kernel.OOMScoreDaemon)
	case errors.Is(err, os.ErrPermission):
		cur, _ := kernel.OOMScoreAdj(0)
		log.Debug("oom_score_adj left as it is: lowering it needs CAP_SYS_RESOURCE (sandboxes still raise theirs)", "oom_score_adj", cur)
	default:
		log.Warn("oom_score_adj", "err", err)
	}
}

// backupScheduler takes the daemon's scheduled backups (backup.interval,
// backup.keep): one when the newest is older than the interval (at start
// too, so a daemon that restarts often still takes them), then one per
// interval. It owns its goroutine: stop cancels it and waits.
type backupScheduler struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func startBackups(ctx context.Context, d datadir.Dir, c config.Backup, log *slog.Logger) *backupScheduler {
	ctx, cancel := context.WithCancel(ctx)
	s := &backupScheduler{cancel: cancel, done: make(chan struct{})}
	interval := c.Interval.Std()
	if interval <= 0 {
		close(s.done)
		return s
	}
	o := backup.Options{Data: d}
	go func() {
		defer close(s.done)
		for {
			wait := interval
			if all, err := backup.List(o); err == nil && len(all) > 0 && all[0].Err == nil {
				wait = time.Until(all[0].Time.Add(interval))
			} else if err == nil {
				wait = 0
			}
			t := time.NewTimer(max(wait, 0))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			b, err := backup.Create(ctx, o)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				log.Error("scheduled backup failed; retried in an interval", "err", err)
				// Never spin on a failure: the next try is an interval on.
				select {
				case <-ctx.Done():
					return
				case <-time.After(interval):
				}
				continue
			}
			removed, err := backup.Prune(o, c.Keep)
			log.Info("backup taken", "name", b.Name, "sessions", b.Sessions, "audit_entries", b.AuditSize, "removed", removed)
			if err != nil {
				log.Warn("remove old backups", "err", err)
			}
		}
	}()
	return s
}

func (s *backupScheduler) stop() {
	s.cancel()
	<-s.done
}
