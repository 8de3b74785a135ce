// Package cron owns the assistant daemon's schedules: the jobs of
// serve.cron and the heartbeat (HEARTBEAT.md every serve.heartbeat). It is
// a channel (channel.Channel) whose only sender is the person's own
// configuration: each slot becomes one trusted Inbound message delivered to
// the job's conversation, and every slot's fate (started, delivered,
// failed, skipped) is appended to a history file in the channel's state
// directory, which `fluffy cron ls|history` read without a daemon.
//
// The scheduler is written here rather than taken from gocron: missed runs
// are decided from the persisted history when the daemon starts (skip, or
// run once however many slots passed), which gocron has no notion of, and
// a hand-written loop over a small parser keeps the daylight-saving rules
// (Expr) and the fake clock of the tests (Options.Wait) exact. See
// docs/cron.md.
package cron

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/datadir"
)

// Name is the channel's name: conversations are {Channel: "cron", Room:
// JOB, Principal: "cron:JOB"}.
const Name = "cron"

// HeartbeatJob is the heartbeat's job name (reserved: no serve.cron job
// may take it) and HeartbeatFile the checklist it reads from the
// workspace.
const (
	HeartbeatJob  = "heartbeat"
	HeartbeatFile = "HEARTBEAT.md"
)

// Triggers: why a run happened.
const (
	TriggerSchedule = "schedule"
	TriggerMissed   = "missed" // run_once after the daemon was down
	TriggerManual   = "manual" // fluffy cron run
)

// Missed-run policies (serve.cron[].missed).
const (
	MissedSkip    = "skip"
	MissedRunOnce = "run_once"
)

// Meta keys of a delivered Inbound. The budget and report keys are what
// the daemon bounds and routes the run with; absent when not configured.
const (
	MetaJob           = "job"
	MetaRun           = "run"
	MetaScheduledFor  = "scheduled_for" // RFC 3339, in the job's zone
	MetaTrigger       = "trigger"
	MetaMissed        = "missed" // slots missed before this one, when any
	MetaSkill         = "skill"
	MetaMaxCost       = "max_cost"  // US dollars
	MetaMaxTurns      = "max_turns" // model turns
	MetaReportChannel = "report_channel"
	MetaReportRoom    = "report_room"
	// MetaQuietReply is the reply that means "nothing to report" (the
	// heartbeat's NothingToReport): the daemon sends a final reply equal
	// to it nowhere.
	MetaQuietReply = "quiet_reply"
)

// deliverTimeout bounds one Deliver (which returns once the message is
// queued), so one stuck delivery cannot hold every other job back; it is
// then recorded as failed.
const deliverTimeout = time.Minute

// minEvery bounds intervals and the heartbeat from below, so a typo
// ("every: 1s") cannot make the daemon spin.
const minEvery = time.Minute

// Errors callers branch on.
var (
	ErrUnknownJob = errors.New("cron: no such job")
	// ErrNotRunning: a manual run was asked of a channel whose Run has
	// not started (or has returned).
	ErrNotRunning = errors.New("cron: the schedule is not running")
)

// Config is what the channel is built from: serve.cron, serve.heartbeat,
// serve.heartbeat_report and serve.workspace.
type Config struct {
	Jobs            []config.CronJob
	Heartbeat       time.Duration // 0: no heartbeat
	HeartbeatReport config.Route
	// Workspace holds HEARTBEAT.md; required when Heartbeat > 0.
	Workspace string
	// File is the configuration file serve.cron came from, for located
	// errors (with each job's Line).
	File string
}

// ConfigFrom takes the channel's configuration from a loaded one. home
// is the user's home directory: serve.workspace defaults to
// ~/.fluffy/workspace, and a leading "~/" in it means home.
func ConfigFrom(l *config.Loaded, home string) Config {
	s := l.Config.Serve
	ws := s.Workspace
	switch {
	case ws == "" && home != "":
		ws = filepath.Join(home, ".fluffy", "workspace")
	case strings.HasPrefix(ws, "~/") && home != "":
		ws = filepath.Join(home, ws[2:])
	}
	return Config{
		Jobs: s.Cron, Heartbeat: s.Heartbeat.Std(), HeartbeatReport: s.HeartbeatReport,
		Workspace: ws, File: l.Origins["serve.cron"].File,
	}
}

// StateDir is the channel's state directory in a data directory (the
// daemon's Options.StateDir; `fluffy cron ls|history` read it).
func StateDir(d datadir.Dir) string { return d.Path("serve", Name) }

// Options are the channel's dependencies.
type Options struct {
	// Logger may be nil (discard).
	Logger *slog.Logger
	// StateDir is the directory the channel owns (its history); required.
	StateDir string
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Wait blocks until the clock reaches until or ctx ends (then it
	// returns ctx's error); default a timer. Tests give a fake clock.
	Wait func(ctx context.Context, until time.Time) error
}

// Cron is the channel. Build it with New. Run may be called again after
// it returned (the daemon restarts a failed channel), never twice at once.
type Cron struct {
	cfg  Config
	opts Options
	log  *slog.Logger
	jobs []*job // serve.cron order, the heartbeat last

	// mu serializes firings (the loop's and manual ones) and guards the
	// fields below.
	mu   sync.Mutex
	sink channel.Sink
	hist *history
}

type job struct {
	cfg       config.CronJob
	loc       *time.Location
	expr      *Expr         // nil for an interval
	every     time.Duration // 0 for an expression
	heartbeat bool
	sched     Schedule // set when Run starts (an interval's anchor)
	next      time.Time
}

var _ channel.Channel = (*Cron)(nil)

// New builds the channel; cfg must pass Check.
func New(cfg Config, opts Options) (*Cron, error) {
	if errs := Check(cfg); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if opts.StateDir == "" {
		return nil, errors.New("cron: no state directory")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Wait == nil {
		now := opts.Now
		opts.Wait = func(ctx context.Context, until time.Time) error {
			t := time.NewTimer(until.Sub(now()))
			defer t.Stop()
			select {
			case <-t.C:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	c := &Cron{cfg: cfg, opts: opts, log: opts.Logger.With("channel", Name)}
	for _, jc := range cfg.Jobs {
		c.jobs = append(c.jobs, buildJob(jc))
	}
	if cfg.Heartbeat > 0 {
		c.jobs = append(c.jobs, &job{
			cfg: config.CronJob{Name: HeartbeatJob, Every: 0, Report: cfg.HeartbeatReport, Missed: MissedSkip},
			loc: time.Local, every: cfg.Heartbeat, heartbeat: true,
		})
	}
	return c, nil
}

// buildJob makes a checked job's runtime form.
func buildJob(jc config.CronJob) *job {
	loc, _ := loadZone(jc.TimeZone)
	j := &job{cfg: jc, loc: loc, every: jc.Every.Std()}
	if jc.Schedule != "" {
		j.expr, _ = Parse(jc.Schedule, loc)
	}
	return j
}

func loadZone(name string) (*time.Location, error) {
	if name == "" {
		return time.Local, nil
	}
	return time.LoadLocation(name)
}

// Name is "cron".
func (c *Cron) Name() string { return Name }

// Send: the schedule has no one to send to; a job reports through its
// report route.
func (c *Cron) Send(context.Context, channel.Conversation, channel.Outbound) error {
	return channel.ErrCannotSend
}

// SendApproval: likewise, a job's approvals go to approval.route.
func (c *Cron) SendApproval(context.Context, channel.Conversation, approval.Request) error {
	return channel.ErrCannotSend
}

// schedule is j's schedule given its last slot (zero: none recorded)
// and the start time an interval is anchored at when it has none.
func (j *job) schedule(last, start time.Time) Schedule {
	if j.expr != nil {
		return j.expr
	}
	anchor := last
	if anchor.IsZero() {
		anchor = start
	}
	return Interval{Every: j.every, Anchor: anchor}
}

// catchUp says what passed between a job's last slot and now: the latest
// slot at or before now and how many slots that is (0: none passed).
func catchUp(s Schedule, last, now time.Time) (latest time.Time, n int) {
	if iv, ok := s.(Interval); ok {
		first := iv.Next(last)
		if first.IsZero() || first.After(now) {
			return time.Time{}, 0
		}
		k := now.Sub(first) / iv.Every
		return first.Add(k * iv.Every), int(k) + 1
	}
	for t := s.Next(last); !t.IsZero() && !t.After(now); t = s.Next(t) {
		latest, n = t, n+1
	}
	return latest, n
}

// Run schedules the jobs until ctx ends. At start, slots that passed
// while the daemon was down follow each job's missed policy.
func (c *Cron) Run(ctx context.Context, sink channel.Sink) error {
	h, err := openHistory(c.opts.StateDir)
	if err != nil {
		return err
	}
	recs, err := ReadHistory(c.opts.StateDir)
	if err != nil {
		return err
	}
	last := LastSlots(recs)
	c.mu.Lock()
	c.sink, c.hist = sink, h
	now := c.opts.Now()
	for _, j := range c.jobs {
		j.sched = j.schedule(last[j.cfg.Name], now)
		if last[j.cfg.Name].IsZero() {
			j.next = j.sched.Next(now) // a new job has missed nothing
			continue
		}
		latest, n := catchUp(j.sched, last[j.cfg.Name], now)
		if n == 0 {
			j.next = j.sched.Next(last[j.cfg.Name])
			continue
		}
		if j.cfg.Missed == MissedRunOnce {
			err = c.fire(ctx, j, latest, TriggerMissed, n-1)
		} else {
			err = c.record(Record{Run: newRunID(), Job: j.cfg.Name, ScheduledFor: latest.In(j.loc), At: now, Outcome: Skipped,
				Trigger: TriggerMissed, Missed: n - 1, Detail: "missed while the daemon was down"})
		}
		if err != nil {
			c.mu.Unlock()
			return err
		}
		j.next = j.sched.Next(latest)
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.sink = nil
		c.mu.Unlock()
	}()
	sink.Ready(Name, true, nil)
	for {
		due := c.earliest()
		if due.IsZero() {
			<-ctx.Done()
			return nil
		}
		if err := c.opts.Wait(ctx, due); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("cron: wait: %w", err)
		}
		if err := c.fireDue(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

func (c *Cron) earliest() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var t time.Time
	for _, j := range c.jobs {
		if !j.next.IsZero() && (t.IsZero() || j.next.Before(t)) {
			t = j.next
		}
	}
	return t
}

// fireDue fires every job whose next slot has come, once each: slots
// that passed meanwhile (the machine slept) are counted in the run's
// record, not fired one by one.
func (c *Cron) fireDue(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.opts.Now()
	due := make([]*job, 0, len(c.jobs))
	for _, j := range c.jobs {
		if !j.next.IsZero() && !j.next.After(now) {
			due = append(due, j)
		}
	}
	sort.SliceStable(due, func(a, b int) bool { return due[a].next.Before(due[b].next) })
	for _, j := range due {
		latest, n := j.next, 1
		if l, more := catchUp(j.sched, j.next, now); more > 0 {
			latest, n = l, n+more
		}
		// The next slot follows this one whatever its outcome: a job
		// whose delivery failed is retried at its next slot, not now.
		j.next = j.sched.Next(latest)
		if err := c.fire(ctx, j, latest, TriggerSchedule, n-1); err != nil {
			return err
		}
	}
	return nil
}

// fire delivers one run of j for slot. Only a history that cannot be
// written is an error (the channel then fails, loudly): a failed delivery
// is recorded and the job waits for its next slot.
func (c *Cron) fire(ctx context.Context, j *job, slot time.Time, trigger string, missed int) error {
	run := Record{Run: newRunID(), Job: j.cfg.Name, ScheduledFor: slot.In(j.loc), Trigger: trigger, Missed: missed}
	text := j.cfg.Prompt
	if j.heartbeat {
		list, err := c.readHeartbeat()
		if err != nil || list == "" {
			run.At, run.Outcome, run.Detail = c.opts.Now(), Skipped, HeartbeatFile+" is absent or lists nothing"
			if err != nil {
				run.Detail = err.Error()
			}
			return c.record(run)
		}
		text = HeartbeatPrompt(list)
	} else if j.cfg.Skill != "" {
		text = fmt.Sprintf("Run the skill %q.", j.cfg.Skill)
	}
	run.At, run.Outcome = c.opts.Now(), Started
	if err := c.record(run); err != nil {
		return err
	}
	in := channel.Inbound{
		Conversation: channel.Conversation{Channel: Name, Room: j.cfg.Name, Principal: Name + ":" + j.cfg.Name},
		Text:         text,
		Source:       "cron " + j.cfg.Name,
		Meta:         j.meta(run),
		Received:     run.At,
	}
	dctx, cancel := context.WithTimeout(ctx, deliverTimeout)
	session, err := c.sink.Deliver(dctx, in)
	cancel()
	run.At = c.opts.Now()
	if err != nil {
		c.log.Warn("cron: delivery failed; the job waits for its next slot", "job", j.cfg.Name, "run", run.Run, "err", err)
		run.Outcome, run.Detail = Failed, err.Error()
	} else {
		c.log.Info("cron: delivered", "job", j.cfg.Name, "run", run.Run, "session", session, "trigger", trigger)
		run.Outcome, run.Session = Delivered, session
	}
	return c.record(run)
}

func (j *job) meta(r Record) map[string]string {
	m := map[string]string{
		MetaJob: j.cfg.Name, MetaRun: r.Run, MetaTrigger: r.Trigger,
		MetaScheduledFor: r.ScheduledFor.Format(time.RFC3339),
	}
	if r.Missed > 0 {
		m[MetaMissed] = strconv.Itoa(r.Missed)
	}
	if j.cfg.Skill != "" {
		m[MetaSkill] = j.cfg.Skill
	}
	if j.cfg.MaxCost > 0 {
		m[MetaMaxCost] = strconv.FormatFloat(j.cfg.MaxCost, 'f', -1, 64)
	}
	if j.cfg.MaxTurns > 0 {
		m[MetaMaxTurns] = strconv.Itoa(j.cfg.MaxTurns)
	}
	if j.cfg.Report.Channel != "" {
		m[MetaReportChannel] = j.cfg.Report.Channel
		if j.cfg.Report.Room != "" {
			m[MetaReportRoom] = j.cfg.Report.Room
		}
	}
	if j.heartbeat {
		m[MetaQuietReply] = NothingToReport
	}
	return m
}

func (c *Cron) record(r Record) error {
	if err := c.hist.append(r); err != nil {
		c.log.Error("cron: cannot record a run", "job", r.Job, "run", r.Run, "err", err)
		return err
	}
	return nil
}

// readHeartbeat reads HEARTBEAT.md afresh (the person edits it between
// runs); absent, or holding no item (checklistEmpty), is "", not an
// error.
func (c *Cron) readHeartbeat() (string, error) {
	b, err := os.ReadFile(filepath.Join(c.cfg.Workspace, HeartbeatFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("cron: read %s: %w", HeartbeatFile, err)
	}
	text := strings.TrimSpace(string(b))
	if checklistEmpty(text) {
		return "", nil
	}
	return text, nil
}

// checklistEmpty reports whether a checklist has nothing to work
// through: only white space, HTML comments (the commented examples a new
// workspace starts with) and Markdown headings. A run for it would spend
// a model call on nothing.
func checklistEmpty(text string) bool {
	for {
		i := strings.Index(text, "<!--")
		if i < 0 {
			break
		}
		j := strings.Index(text[i:], "-->")
		if j < 0 {
			text = text[:i] // an unclosed comment runs to the end
			break
		}
		text = text[:i] + text[i+j+len("-->"):]
	}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			return false
		}
	}
	return true
}

// RunNow fires job name at once (fluffy cron run), outside its schedule:
// its slots are unchanged. It is ErrUnknownJob for a name not configured
// and ErrNotRunning when Run is not running.
func (c *Cron) RunNow(ctx context.Context, name string) (Run, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var j *job
	for _, x := range c.jobs {
		if x.cfg.Name == name {
			j = x
		}
	}
	if j == nil {
		return Run{}, fmt.Errorf("%w: %q", ErrUnknownJob, name)
	}
	if c.sink == nil {
		return Run{}, ErrNotRunning
	}
	before := c.hist.lines
	if err := c.fire(ctx, j, c.opts.Now(), TriggerManual, 0); err != nil {
		return Run{}, err
	}
	recs, err := ReadHistory(c.opts.StateDir)
	if err != nil {
		return Run{}, err
	}
	if before > len(recs) {
		before = 0 // compacted meanwhile
	}
	runs := Runs(recs[before:], name)
	if len(runs) == 0 {
		return Run{}, fmt.Errorf("cron: the run of %q left no record", name)
	}
	return runs[len(runs)-1], nil
}

func newRunID() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail
	return "run_" + hex.EncodeToString(b[:])
}

var jobName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Check validates cfg for `fluffy serve --check` and New: every problem,
// each a *config.Error naming the job's key and, when the file is known,
// the job's line.
func Check(cfg Config) []error {
	var errs []error
	seen := map[string]int{}
	for i, j := range cfg.Jobs {
		bad := func(key, format string, args ...any) {
			k := fmt.Sprintf("serve.cron[%d]", i)
			if key != "" {
				k += "." + key
			}
			msg := fmt.Sprintf(format, args...)
			if j.Name != "" {
				msg = fmt.Sprintf("job %q: %s", j.Name, msg)
			}
			e := &config.Error{File: cfg.File, Key: k, Msg: msg}
			if cfg.File != "" {
				e.Line, e.Column = j.Line, j.Column
			}
			errs = append(errs, e)
		}
		switch prev, dup := seen[j.Name]; {
		case j.Name == "":
			bad("name", "a job needs a name")
		case !jobName.MatchString(j.Name):
			bad("name", "a name is letters, digits, '.', '_' and '-' (at most 64), starting with a letter or digit")
		case j.Name == HeartbeatJob:
			bad("name", "%q is the heartbeat's own name (serve.heartbeat)", HeartbeatJob)
		case dup:
			bad("name", "the name is taken by serve.cron[%d]", prev)
		default:
			seen[j.Name] = i
		}
		loc, zerr := loadZone(j.TimeZone)
		if zerr != nil {
			bad("timezone", "unknown time zone %q (an IANA name such as Europe/Berlin)", j.TimeZone)
			loc = time.UTC
		}
		switch {
		case j.Schedule != "" && j.Every != 0:
			bad("", "set schedule or every, not both")
		case j.Schedule == "" && j.Every == 0:
			bad("", "set schedule (a cron expression) or every (an interval)")
		case j.Schedule != "":
			if _, err := Parse(j.Schedule, loc); err != nil {
				bad("schedule", "%v", err)
			}
		case j.Every.Std() < minEvery:
			bad("every", "%s is shorter than %s", j.Every.Std(), minEvery)
		}
		switch {
		case j.Prompt != "" && j.Skill != "":
			bad("", "set prompt or skill, not both")
		case strings.TrimSpace(j.Prompt) == "" && j.Skill == "":
			bad("", "set prompt (what to ask) or skill (what to run)")
		}
		if j.Missed != "" && j.Missed != MissedSkip && j.Missed != MissedRunOnce {
			bad("missed", "%q is not one of %s, %s", j.Missed, MissedSkip, MissedRunOnce)
		}
		if j.MaxCost < 0 {
			bad("max_cost", "must not be negative")
		}
		if j.MaxTurns < 0 {
			bad("max_turns", "must not be negative")
		}
		if j.Report.Room != "" && j.Report.Channel == "" {
			bad("report", "a room needs its channel")
		}
	}
	switch {
	case cfg.Heartbeat < 0:
		errs = append(errs, &config.Error{Key: "serve.heartbeat", Msg: "must not be negative (0 turns the heartbeat off)"})
	case cfg.Heartbeat > 0 && cfg.Heartbeat < minEvery:
		errs = append(errs, &config.Error{Key: "serve.heartbeat", Msg: fmt.Sprintf("%s is shorter than %s (0 turns the heartbeat off)", cfg.Heartbeat, minEvery)})
	case cfg.Heartbeat > 0 && cfg.Workspace == "":
		errs = append(errs, &config.Error{Key: "serve.workspace", Msg: "the heartbeat reads " + HeartbeatFile + " from the workspace, and none is set"})
	}
	if cfg.HeartbeatReport.Room != "" && cfg.HeartbeatReport.Channel == "" {
		errs = append(errs, &config.Error{Key: "serve.heartbeat_report", Msg: "a room needs its channel"})
	}
	return errs
}
