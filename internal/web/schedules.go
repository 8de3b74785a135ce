package web

import (
	"context"
	"net/http"
	"time"

	"github.com/fluffy-agent/fluffy/internal/sched"
)

// CronJob is a scheduled job (serve.cron, the heartbeat) as `fluffy cron
// ls` shows it, with its newest runs.
type CronJob struct {
	Name, Schedule, TimeZone, Missed string
	// Next is the next slot, zero when none.
	Next time.Time
	// Runs are the newest runs first, manual ones included.
	Runs []CronRun
}

// CronRun is one run of a job: the slot it was for, why it ran, what
// became of it.
type CronRun struct {
	ID                        string
	ScheduledFor              time.Time
	Trigger, Outcome, Session string
	Detail                    string
	Missed                    int
}

// ScheduleView is the schedules page: the jobs, and the scheduler's
// status (nil when the kernel runs none).
type ScheduleView struct {
	Jobs      []CronJob
	Scheduler *sched.Status
}

// Schedules are the daemon's scheduled jobs and its scheduler.
type Schedules interface {
	Schedules(ctx context.Context) (ScheduleView, error)
}

// schedulesView is what the template gets.
type schedulesView struct {
	ScheduleView
	Now time.Time
}

func (s *Server) schedulesPage(w http.ResponseWriter, r *http.Request) {
	if s.o.Schedules == nil {
		s.renderStatus(w, r, http.StatusOK, "Schedules", "the schedules are not available on this console")
		return
	}
	v, err := s.o.Schedules.Schedules(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "schedules", "Schedules", schedulesView{ScheduleView: v, Now: s.o.Now()})
}
