package cron

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/units"
)

// fakeClock drives the schedule step by step: the channel's Wait hands
// the instant it waits for to the test (so the test knows the channel is
// idle, and when it means to wake), and returns when the test moves the
// clock there.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waits   chan time.Time
	release chan struct{}
}

func newClock(now time.Time) *fakeClock {
	return &fakeClock{now: now, waits: make(chan time.Time), release: make(chan struct{})}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

func (c *fakeClock) Wait(ctx context.Context, until time.Time) error {
	select {
	case c.waits <- until:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-c.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// next returns the instant the channel now waits for (once it has
// finished what it was doing).
func (c *fakeClock) next(t *testing.T) time.Time {
	t.Helper()
	select {
	case u := <-c.waits:
		return u
	case <-time.After(10 * time.Second): // a hang guard, not a timing assertion
		t.Fatal("the channel never waited")
		return time.Time{}
	}
}

// advance moves the clock to to and wakes the waiting channel.
func (c *fakeClock) advance(to time.Time) {
	c.set(to)
	c.release <- struct{}{}
}

// step waits for the channel to wait, moves the clock to the instant it
// waits for, and returns that instant.
func (c *fakeClock) step(t *testing.T) time.Time {
	t.Helper()
	u := c.next(t)
	c.advance(u)
	return u
}

// sink records what the channel delivers; fail, when set, decides a
// delivery's error.
type sink struct {
	mu    sync.Mutex
	got   []channel.Inbound
	ready []bool
	fail  func(channel.Inbound) error
}

func (s *sink) Deliver(_ context.Context, in channel.Inbound) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		if err := s.fail(in); err != nil {
			return "", err
		}
	}
	s.got = append(s.got, in)
	return fmt.Sprintf("s%d", len(s.got)), nil
}

func (s *sink) Answer(context.Context, channel.Answer) error  { return nil }
func (s *sink) Record(context.Context, channel.Refusal) error { return nil }
func (s *sink) Ready(_ string, ok bool, _ error) {
	s.mu.Lock()
	s.ready = append(s.ready, ok)
	s.mu.Unlock()
}

func (s *sink) delivered() []channel.Inbound {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]channel.Inbound(nil), s.got...)
}

// started runs c until the test ends (or stop is called) and returns
// stop, which cancels Run and returns its error.
func started(t *testing.T, c *Cron, s channel.Sink) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, s) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func newCron(t *testing.T, cfg Config, dir string, clk *fakeClock) *Cron {
	t.Helper()
	c, err := New(cfg, Options{StateDir: dir, Now: clk.Now, Wait: clk.Wait})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func utc(ts ...time.Time) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.UTC().Format(time.RFC3339))
	}
	return out
}

func runsOf(t *testing.T, dir, job string) []Run {
	t.Helper()
	recs, err := ReadHistory(dir)
	if err != nil {
		t.Fatal(err)
	}
	return Runs(recs, job)
}

// outcomes renders runs as "slot outcome" lines in UTC.
func outcomes(runs []Run) string {
	var b strings.Builder
	for _, r := range runs {
		fmt.Fprintf(&b, "%s %s %s\n", r.ScheduledFor.UTC().Format(time.RFC3339), r.Trigger, r.Outcome)
	}
	return b.String()
}

func TestFiresAtItsSlotsAcrossDaylightSaving(t *testing.T) {
	ny := zone(t, "America/New_York")
	clk := newClock(time.Date(2026, 3, 7, 12, 0, 0, 0, ny))
	dir := t.TempDir()
	c := newCron(t, Config{Jobs: []config.CronJob{{
		Name: "night", Schedule: "30 2 * * *", TimeZone: "America/New_York", Prompt: "tidy up",
		MaxCost: 0.5, MaxTurns: 7, Report: config.Route{Channel: "matrix", Room: "!me"},
	}}}, dir, clk)
	s := &sink{}
	started(t, c, s)
	var woke []time.Time
	for range 3 {
		woke = append(woke, clk.step(t))
	}
	clk.next(t) // the third firing is done
	// 02:30 does not exist on 8 March: the run comes at the jump, 03:00 EDT.
	want := []string{"2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z"}
	if got := utc(woke...); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("woke at %v, want %v", got, want)
	}
	got := s.delivered()
	if len(got) != 3 {
		t.Fatalf("delivered %d messages, want 3", len(got))
	}
	in := got[0]
	wantConv := channel.Conversation{Channel: "cron", Room: "night", Principal: "cron:night"}
	if in.Conversation != wantConv || in.Text != "tidy up" || in.Untrusted || in.Source != "cron night" {
		t.Errorf("inbound = %+v", in)
	}
	for k, v := range map[string]string{
		MetaJob: "night", MetaTrigger: TriggerSchedule, MetaScheduledFor: "2026-03-08T03:00:00-04:00",
		MetaMaxCost: "0.5", MetaMaxTurns: "7", MetaReportChannel: "matrix", MetaReportRoom: "!me",
	} {
		if in.Meta[k] != v {
			t.Errorf("meta %s = %q, want %q", k, in.Meta[k], v)
		}
	}
	if in.Meta[MetaRun] == "" || in.Meta[MetaQuietReply] != "" {
		t.Errorf("meta = %v", in.Meta)
	}
	runs := runsOf(t, dir, "night")
	if len(runs) != 3 || runs[0].Outcome != Delivered || runs[0].Session != "s1" || runs[0].ID != in.Meta[MetaRun] {
		t.Errorf("history = %+v", runs)
	}
}

func TestIntervalJob(t *testing.T) {
	start := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)
	clk := newClock(start)
	c := newCron(t, Config{Jobs: []config.CronJob{{Name: "poll", Every: units.Duration(20 * time.Minute), Prompt: "check"}}}, t.TempDir(), clk)
	started(t, c, &sink{})
	var woke []time.Time
	for range 3 {
		woke = append(woke, clk.step(t))
	}
	want := utc(start.Add(20*time.Minute), start.Add(40*time.Minute), start.Add(60*time.Minute))
	if got := utc(woke...); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("woke at %v, want %v", got, want)
	}
}

// A daemon down across several slots: skip records the latest one as
// skipped and waits for the next; run_once fires once, not once per
// missed slot. Either way the schedule resumes at its own slots.
func TestMissedRunsAfterDowntime(t *testing.T) {
	for _, tc := range []struct {
		missed  string
		deliver int
		want    string
	}{
		{MissedSkip, 0, "2026-06-01T11:00:00Z schedule delivered\n2026-06-01T15:00:00Z missed skipped\n"},
		{MissedRunOnce, 1, "2026-06-01T11:00:00Z schedule delivered\n2026-06-01T15:00:00Z missed delivered\n"},
	} {
		t.Run(tc.missed, func(t *testing.T) {
			dir := t.TempDir()
			cfg := Config{Jobs: []config.CronJob{{Name: "hourly", Schedule: "0 * * * *", Prompt: "p", Missed: tc.missed, TimeZone: "UTC"}}}
			clk := newClock(time.Date(2026, 6, 1, 10, 30, 0, 0, time.UTC))
			stop := started(t, newCron(t, cfg, dir, clk), &sink{})
			clk.step(t) // 11:00
			clk.next(t)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			// Down from 11:00 to 15:20: the 12:00 to 15:00 slots passed.
			clk2 := newClock(time.Date(2026, 6, 1, 15, 20, 0, 0, time.UTC))
			s := &sink{}
			started(t, newCron(t, cfg, dir, clk2), s)
			if u := clk2.next(t); !u.Equal(time.Date(2026, 6, 1, 16, 0, 0, 0, time.UTC)) {
				t.Errorf("next wake %v, want 16:00", u)
			}
			if got := outcomes(runsOf(t, dir, "hourly")); got != tc.want {
				t.Errorf("history:\n%s\nwant:\n%s", got, tc.want)
			}
			got := s.delivered()
			if len(got) != tc.deliver {
				t.Fatalf("delivered %d, want %d", len(got), tc.deliver)
			}
			if tc.deliver == 1 && (got[0].Meta[MetaTrigger] != TriggerMissed || got[0].Meta[MetaMissed] != "3") {
				t.Errorf("meta = %v, want trigger missed and 3 more missed", got[0].Meta)
			}
			runs := runsOf(t, dir, "hourly")
			if runs[1].Missed != 3 {
				t.Errorf("missed = %d, want 3 (12:00, 13:00, 14:00 beside 15:00)", runs[1].Missed)
			}
		})
	}
}

// A run recorded as started whose end never was (the daemon was killed
// while delivering) is not fired again at restart, even under run_once.
func TestStartedRunIsNotRepeated(t *testing.T) {
	dir := t.TempDir()
	slot := time.Date(2026, 6, 1, 11, 0, 0, 0, time.UTC)
	h, err := openHistory(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []Record{
		{Run: "run_w", Job: "hourly", ScheduledFor: slot.Add(-time.Hour), At: slot.Add(-time.Hour), Outcome: Delivered, Trigger: TriggerSchedule},
		{Run: "run_x", Job: "hourly", ScheduledFor: slot, At: slot, Outcome: Started, Trigger: TriggerSchedule},
	} {
		if err := h.append(r); err != nil {
			t.Fatal(err)
		}
	}
	clk := newClock(slot.Add(10 * time.Minute))
	s := &sink{}
	started(t, newCron(t, Config{Jobs: []config.CronJob{{Name: "hourly", Schedule: "0 * * * *", Prompt: "p", Missed: MissedRunOnce, TimeZone: "UTC"}}}, dir, clk), s)
	if u := clk.next(t); !u.Equal(slot.Add(time.Hour)) {
		t.Errorf("next wake %v, want %v", u, slot.Add(time.Hour))
	}
	if n := len(s.delivered()); n != 0 {
		t.Errorf("delivered %d at restart, want 0", n)
	}
	if runs := runsOf(t, dir, "hourly"); len(runs) != 2 || runs[1].Outcome != Started {
		t.Errorf("history = %+v", runs)
	}
}

// A delivery that fails is recorded as failed and the job waits for its
// next slot: the channel does not retry at once (no hot loop).
func TestFailedDeliveryWaitsForNextSlot(t *testing.T) {
	start := time.Date(2026, 6, 1, 10, 30, 0, 0, time.UTC)
	clk := newClock(start)
	dir := t.TempDir()
	calls := 0
	s := &sink{fail: func(channel.Inbound) error {
		calls++
		if calls == 1 {
			return errors.New("router is down")
		}
		return nil
	}}
	started(t, newCron(t, Config{Jobs: []config.CronJob{{Name: "hourly", Schedule: "0 * * * *", Prompt: "p", TimeZone: "UTC"}}}, dir, clk), s)
	first := clk.step(t)
	second := clk.next(t)
	if !first.Equal(start.Add(30*time.Minute)) || !second.Equal(first.Add(time.Hour)) {
		t.Fatalf("woke at %v then waits for %v, want 11:00 then 12:00", first, second)
	}
	clk.advance(second)
	clk.next(t)
	runs := runsOf(t, dir, "hourly")
	if len(runs) != 2 || runs[0].Outcome != Failed || runs[0].Detail != "router is down" || runs[1].Outcome != Delivered {
		t.Errorf("history = %+v", runs)
	}
	if calls != 2 {
		t.Errorf("Deliver called %d times, want 2", calls)
	}
}

// The machine slept across several slots: the job fires once when it
// wakes, the skipped slots counted in the run.
func TestOverslept(t *testing.T) {
	start := time.Date(2026, 6, 1, 10, 30, 0, 0, time.UTC)
	clk := newClock(start)
	dir := t.TempDir()
	s := &sink{}
	started(t, newCron(t, Config{Jobs: []config.CronJob{{Name: "q", Schedule: "*/10 * * * *", Prompt: "p", TimeZone: "UTC"}}}, dir, clk), s)
	clk.next(t)
	clk.advance(start.Add(35 * time.Minute)) // 10:40, 10:50, 11:00 passed
	if u := clk.next(t); !u.Equal(start.Add(40 * time.Minute)) {
		t.Errorf("next wake %v, want 11:10", u)
	}
	got := s.delivered()
	if len(got) != 1 || got[0].Meta[MetaScheduledFor] != "2026-06-01T11:00:00Z" || got[0].Meta[MetaMissed] != "2" {
		t.Errorf("delivered %+v", got)
	}
}

func TestHeartbeat(t *testing.T) {
	ws := t.TempDir()
	start := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)
	clk := newClock(start)
	dir := t.TempDir()
	cfg := Config{Heartbeat: 30 * time.Minute, Workspace: ws, HeartbeatReport: config.Route{Channel: "mail"}}
	s := &sink{}
	started(t, newCron(t, cfg, dir, clk), s)
	write := func(text string) {
		if err := os.WriteFile(filepath.Join(ws, HeartbeatFile), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Each file is written while the channel waits, between two runs.
	clk.step(t) // 10:30: no HEARTBEAT.md
	u := clk.next(t)
	write("- check the backups\n")
	clk.advance(u) // 11:00
	u = clk.next(t)
	write("- water the plants\n")
	clk.advance(u) // 11:30: edited since
	u = clk.next(t)
	write("# Heartbeat\n\n<!-- - check the backups\n- water the plants -->\n \n")
	clk.advance(u) // 12:00: a heading and a comment only
	clk.next(t)
	got := s.delivered()
	if len(got) != 2 {
		t.Fatalf("delivered %d, want 2", len(got))
	}
	if !strings.Contains(got[0].Text, "- check the backups") || !strings.Contains(got[1].Text, "- water the plants") || strings.Contains(got[1].Text, "backups") {
		t.Errorf("texts:\n%s\n---\n%s", got[0].Text, got[1].Text)
	}
	if !strings.Contains(got[0].Text, NothingToReport) || got[0].Meta[MetaQuietReply] != NothingToReport || got[0].Meta[MetaReportChannel] != "mail" {
		t.Errorf("heartbeat inbound: %+v", got[0])
	}
	if got[0].Conversation != (channel.Conversation{Channel: "cron", Room: HeartbeatJob, Principal: "cron:heartbeat"}) {
		t.Errorf("conversation %+v", got[0].Conversation)
	}
	want := "2026-06-01T10:30:00Z schedule skipped\n2026-06-01T11:00:00Z schedule delivered\n2026-06-01T11:30:00Z schedule delivered\n2026-06-01T12:00:00Z schedule skipped\n"
	if h := outcomes(runsOf(t, dir, HeartbeatJob)); h != want {
		t.Errorf("history:\n%s\nwant:\n%s", h, want)
	}
}

func TestChecklistEmpty(t *testing.T) {
	for text, want := range map[string]bool{
		"":                                   true,
		"# Heartbeat\n\n## Daily\n":          true,
		"<!-- - example -->":                 true,
		"# H\n<!--\n- a\n-->\n<!-- b":        true,
		"- check mail":                       false,
		"# H\n<!-- x -->\nlook at the queue": false,
		"<!-- a --> - b":                     false,
	} {
		if got := checklistEmpty(text); got != want {
			t.Errorf("checklistEmpty(%q) = %v, want %v", text, got, want)
		}
	}
}

func TestIsNothingToReport(t *testing.T) {
	for s, want := range map[string]bool{"HEARTBEAT_OK": true, " HEARTBEAT_OK.\n": true, "HEARTBEAT_OK but": false, "": false} {
		if IsNothingToReport(s) != want {
			t.Errorf("IsNothingToReport(%q) != %v", s, want)
		}
	}
}

func TestRunNow(t *testing.T) {
	start := time.Date(2026, 6, 1, 10, 30, 0, 0, time.UTC)
	clk := newClock(start)
	dir := t.TempDir()
	c := newCron(t, Config{Jobs: []config.CronJob{{Name: "daily", Schedule: "0 9 * * *", Prompt: "p", TimeZone: "UTC"}}}, dir, clk)
	if _, err := c.RunNow(t.Context(), "daily"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("before Run: %v, want ErrNotRunning", err)
	}
	s := &sink{}
	started(t, c, s)
	next := clk.next(t)
	if _, err := c.RunNow(t.Context(), "nope"); !errors.Is(err, ErrUnknownJob) {
		t.Errorf("unknown job: %v", err)
	}
	run, err := c.RunNow(t.Context(), "daily")
	if err != nil {
		t.Fatal(err)
	}
	if run.Outcome != Delivered || run.Trigger != TriggerManual || run.Session != "s1" || !run.ScheduledFor.Equal(start) {
		t.Errorf("run = %+v", run)
	}
	// The schedule is unchanged, and the manual run is no slot of it.
	st, err := c.Status(clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !st[0].Next.Equal(next) || st[0].Last != nil {
		t.Errorf("status = %+v, want next %v and no last scheduled run", st[0], next)
	}
}

func TestStatus(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2026, 6, 1, 10, 30, 0, 0, time.UTC)
	clk := newClock(start)
	cfg := Config{Jobs: []config.CronJob{
		{Name: "a", Schedule: "0 9 * * *", Prompt: "p", TimeZone: "Europe/Berlin"},
		{Name: "b", Every: units.Duration(time.Hour), Prompt: "p", Missed: MissedRunOnce},
	}}
	stop := started(t, newCron(t, cfg, dir, clk), &sink{})
	clk.step(t) // b at 11:30
	clk.next(t)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	c := newCron(t, cfg, dir, clk)
	st, err := c.Status(start.Add(2 * time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if st[0].Next.String() != "2026-06-02 09:00:00 +0200 CEST" || st[0].Last != nil || st[0].Missed != MissedSkip || st[0].TimeZone != "Europe/Berlin" {
		t.Errorf("a: %+v", st[0])
	}
	// b's 11:30 ran; at 12:30 the next is 13:30 (12:30 itself was
	// missed if the daemon is down, and is the missed policy's).
	if !st[1].Next.Equal(start.Add(3*time.Hour)) || st[1].Last == nil || st[1].Last.Outcome != Delivered || st[1].Schedule != "every 1h0m0s" {
		t.Errorf("b: %+v (last %+v)", st[1], st[1].Last)
	}
}

func TestCheck(t *testing.T) {
	ok := config.CronJob{Name: "ok", Schedule: "0 9 * * *", Prompt: "p"}
	with := func(f func(*config.CronJob)) config.CronJob {
		j := ok
		j.Name = "j"
		j.Line, j.Column = 7, 5
		f(&j)
		return j
	}
	for _, tc := range []struct {
		job  config.CronJob
		want string
	}{
		{with(func(j *config.CronJob) { j.Schedule = "0 25 * * *" }), `cron.yaml:7:5: serve.cron[1].schedule: job "j": hour field "25"`},
		{with(func(j *config.CronJob) { j.Every = units.Duration(time.Hour) }), `serve.cron[1]: job "j": set schedule or every, not both`},
		{with(func(j *config.CronJob) { j.Schedule = "" }), `serve.cron[1]: job "j": set schedule (a cron expression) or every`},
		{with(func(j *config.CronJob) { j.Schedule, j.Every = "", units.Duration(time.Second) }), `serve.cron[1].every: job "j": 1s is shorter than 1m0s`},
		{with(func(j *config.CronJob) { j.TimeZone = "Mars/Olympus" }), `serve.cron[1].timezone: job "j": unknown time zone "Mars/Olympus"`},
		{with(func(j *config.CronJob) { j.Skill = "s" }), `job "j": set prompt or skill, not both`},
		{with(func(j *config.CronJob) { j.Prompt = " " }), `job "j": set prompt (what to ask) or skill`},
		{with(func(j *config.CronJob) { j.Name = "ok" }), `serve.cron[1].name: job "ok": the name is taken by serve.cron[0]`},
		{with(func(j *config.CronJob) { j.Name = "" }), `serve.cron[1].name: a job needs a name`},
		{with(func(j *config.CronJob) { j.Name = "a b" }), `serve.cron[1].name: job "a b": a name is letters`},
		{with(func(j *config.CronJob) { j.Name = HeartbeatJob }), `is the heartbeat's own name`},
		{with(func(j *config.CronJob) { j.Missed = "twice" }), `serve.cron[1].missed: job "j": "twice" is not one of skip, run_once`},
		{with(func(j *config.CronJob) { j.MaxTurns = -1 }), `serve.cron[1].max_turns`},
		{with(func(j *config.CronJob) { j.Report.Room = "r" }), `serve.cron[1].report: job "j": a room needs its channel`},
	} {
		errs := Check(Config{Jobs: []config.CronJob{ok, tc.job}, File: "cron.yaml"})
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want) {
			t.Errorf("got %v, want one error containing %q", errs, tc.want)
		}
	}
	if errs := Check(Config{Jobs: []config.CronJob{ok}, Heartbeat: 30 * time.Minute}); len(errs) != 1 || !strings.Contains(errs[0].Error(), "serve.workspace") {
		t.Errorf("heartbeat without workspace: %v", errs)
	}
	if errs := Check(Config{Jobs: []config.CronJob{ok}, Heartbeat: 30 * time.Minute, Workspace: "/w"}); len(errs) != 0 {
		t.Errorf("valid: %v", errs)
	}
	if _, err := New(Config{Jobs: []config.CronJob{with(func(j *config.CronJob) { j.Schedule = "x" })}}, Options{StateDir: t.TempDir()}); err == nil {
		t.Error("New accepted a bad job")
	}
}

func TestHistoryTornLineAndCompaction(t *testing.T) {
	dir := t.TempDir()
	h, err := openHistory(dir)
	if err != nil {
		t.Fatal(err)
	}
	const compactAt = 3 * keepPerJob
	h.compactAt = compactAt
	at := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	for i := range compactAt - 1 {
		job := "a"
		if i%2 == 0 {
			job = "b"
		}
		if err := h.append(Record{Run: fmt.Sprint(i), Job: job, ScheduledFor: at.Add(time.Duration(i) * time.Minute), Outcome: Skipped}); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, HistoryFile), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"run":"torn","jo`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	recs, err := ReadHistory(dir)
	if err != nil || len(recs) != compactAt-1 {
		t.Fatalf("with a torn last line: %d records, %v", len(recs), err)
	}
	// The torn line is not followed by a newline, so the next append
	// would glue onto it: reopening ends the torn line first.
	h, err = openHistory(dir)
	if err != nil {
		t.Fatal(err)
	}
	h.compactAt = compactAt
	if err := h.append(Record{Run: "last", Job: "a", ScheduledFor: at.Add(24 * time.Hour), Outcome: Skipped}); err != nil {
		t.Fatal(err)
	}
	recs, err = ReadHistory(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(Runs(recs, "a")); n != keepPerJob {
		t.Errorf("after compaction a has %d records, want %d", n, keepPerJob)
	}
	if n := len(Runs(recs, "b")); n != keepPerJob {
		t.Errorf("after compaction b has %d records, want %d", n, keepPerJob)
	}
	if recs[len(recs)-1].Run != "last" || !LastSlots(recs)["a"].Equal(at.Add(24*time.Hour)) {
		t.Errorf("the newest record was lost: %+v", recs[len(recs)-1])
	}
}
