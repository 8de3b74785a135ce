package cron

import (
	"time"
)

// JobStatus is one job as `fluffy cron ls` shows it.
type JobStatus struct {
	Name string `json:"name"`
	// Schedule is the cron expression or "every D".
	Schedule string `json:"schedule"`
	TimeZone string `json:"timezone"`
	// Next is the next slot in the job's zone: the one after the last
	// recorded slot, or after now when that one has passed (it is then
	// handled by the missed policy when the daemon starts). An interval
	// with no history is anchored at the daemon's start, so its Next is
	// an estimate from now.
	Next   time.Time `json:"next,omitzero"`
	Missed string    `json:"missed"`
	// Last is the newest scheduled run (manual runs excluded), if any.
	Last *Run `json:"last,omitempty"`
}

// Status lists the jobs with their next and last runs, from the history
// in the state directory; it needs no running schedule.
func (c *Cron) Status(now time.Time) ([]JobStatus, error) {
	recs, err := ReadHistory(c.opts.StateDir)
	if err != nil {
		return nil, err
	}
	last := LastSlots(recs)
	runs := Runs(recs, "")
	out := make([]JobStatus, 0, len(c.jobs))
	for _, j := range c.jobs {
		st := JobStatus{Name: j.cfg.Name, TimeZone: j.loc.String(), Missed: j.cfg.Missed}
		if st.Missed == "" {
			st.Missed = MissedSkip
		}
		if j.expr != nil {
			st.Schedule = j.expr.String()
		} else {
			st.Schedule = "every " + j.every.String()
		}
		s := j.schedule(last[j.cfg.Name], now)
		from := last[j.cfg.Name]
		if from.IsZero() || !s.Next(from).After(now) {
			from = now
		}
		if n := s.Next(from); !n.IsZero() {
			st.Next = n.In(j.loc)
		}
		for i := len(runs) - 1; i >= 0; i-- {
			if runs[i].Job == j.cfg.Name && runs[i].Trigger != TriggerManual {
				r := runs[i]
				st.Last = &r
				break
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// Jobs lists the configured job names, the heartbeat last when on.
func (c *Cron) Jobs() []string {
	out := make([]string, 0, len(c.jobs))
	for _, j := range c.jobs {
		out = append(out, j.cfg.Name)
	}
	return out
}
