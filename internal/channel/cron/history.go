package cron

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// HistoryFile is the run history in the channel's state directory: one
// JSON Record per line, appended as runs start and end.
const HistoryFile = "history.jsonl"

// keepPerJob is how many records of each job survive a compaction.
const keepPerJob = 200

// compactAt: the file is rewritten (keeping keepPerJob records a job)
// once it holds this many lines.
const compactAt = 32 * keepPerJob

// Outcome is what became of one slot of a job.
type Outcome string

// Outcomes. A run is first recorded Started, before it is delivered, so a
// daemon killed while delivering neither loses the slot nor fires it
// again on restart; the record that follows says how it ended.
const (
	Started   Outcome = "started"
	Delivered Outcome = "delivered" // the daemon queued it to a session
	Failed    Outcome = "failed"    // Deliver returned an error; retried at the next slot
	Skipped   Outcome = "skipped"   // missed while the daemon was down, or nothing to do
)

// Record is one line of the history.
type Record struct {
	Run          string    `json:"run"`
	Job          string    `json:"job"`
	ScheduledFor time.Time `json:"scheduled_for"`
	At           time.Time `json:"at"`
	Outcome      Outcome   `json:"outcome"`
	// Trigger is "schedule", "missed" (run_once after downtime) or
	// "manual" (fluffy cron run).
	Trigger string `json:"trigger,omitempty"`
	Session string `json:"session,omitempty"`
	// Missed counts the slots this record stands for beyond its own
	// (missed while down, or while the machine slept).
	Missed int    `json:"missed,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// Run is one run as the history knows it: its first record's slot and
// trigger, its last record's outcome.
type Run struct {
	ID           string    `json:"run"`
	Job          string    `json:"job"`
	ScheduledFor time.Time `json:"scheduled_for"`
	Started      time.Time `json:"started"`
	Ended        time.Time `json:"ended,omitzero"`
	// Outcome is Started while no end is recorded (running, or the
	// daemon stopped before it knew).
	Outcome Outcome `json:"outcome"`
	Trigger string  `json:"trigger,omitempty"`
	Session string  `json:"session,omitempty"`
	Missed  int     `json:"missed,omitempty"`
	Detail  string  `json:"detail,omitempty"`
}

// history appends to and reads the history file. It is used by one
// goroutine at a time (the channel's mu).
type history struct {
	path      string
	lines     int
	compactAt int
}

func openHistory(dir string) (*history, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cron: state directory: %w", err)
	}
	h := &history{path: filepath.Join(dir, HistoryFile), compactAt: compactAt}
	// A line torn by a crash would swallow the next record appended to
	// it: cut it off (it was never whole, so nothing relied on it).
	b, err := os.ReadFile(h.path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("cron: history: %w", err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		if err := os.Truncate(h.path, int64(bytes.LastIndexByte(b, '\n')+1)); err != nil {
			return nil, fmt.Errorf("cron: history: %w", err)
		}
	}
	recs, err := ReadHistory(dir)
	if err != nil {
		return nil, err
	}
	h.lines = len(recs)
	return h, nil
}

// append writes r and syncs it: the record must survive a crash that
// follows, or a restart would fire the slot again.
func (h *history) append(r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("cron: history: %w", err)
	}
	f, err := os.OpenFile(h.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("cron: history: %w", err)
	}
	_, werr := f.Write(append(b, '\n'))
	serr := f.Sync()
	if cerr := f.Close(); werr == nil && serr == nil {
		werr = cerr
	}
	if err := errors.Join(werr, serr); err != nil {
		return fmt.Errorf("cron: history: %w", err)
	}
	h.lines++
	if h.lines >= h.compactAt {
		return h.compact()
	}
	return nil
}

// compact rewrites the file with the newest keepPerJob records of each
// job, through a temporary file and a rename so a reader never sees half.
func (h *history) compact() error {
	recs, err := ReadHistory(filepath.Dir(h.path))
	if err != nil {
		return err
	}
	count := map[string]int{}
	var keep []Record
	for i := len(recs) - 1; i >= 0; i-- {
		if count[recs[i].Job] < keepPerJob {
			count[recs[i].Job]++
			keep = append(keep, recs[i])
		}
	}
	var buf bytes.Buffer
	for i := len(keep) - 1; i >= 0; i-- {
		b, err := json.Marshal(keep[i])
		if err != nil {
			return fmt.Errorf("cron: history: %w", err)
		}
		buf.Write(append(b, '\n'))
	}
	tmp := h.path + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o600); err != nil {
		return fmt.Errorf("cron: history: %w", err)
	}
	if err := os.Rename(tmp, h.path); err != nil {
		return fmt.Errorf("cron: history: %w", err)
	}
	h.lines = len(keep)
	return nil
}

// ReadHistory reads the history in dir, oldest first; a missing file is
// an empty history. A torn last line (a write cut short by a crash) is
// ignored; a malformed line elsewhere is an error.
func ReadHistory(dir string) ([]Record, error) {
	b, err := os.ReadFile(filepath.Join(dir, HistoryFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cron: history: %w", err)
	}
	lines := bytes.Split(b, []byte("\n"))
	var out []Record
	for i, line := range lines {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var r Record
		if err := json.Unmarshal(line, &r); err != nil {
			if i == len(lines)-1 {
				break // a torn final line: the file does not end in a newline
			}
			return nil, fmt.Errorf("cron: %s line %d: %w", HistoryFile, i+1, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// Runs folds records into runs, oldest first; job "" keeps every job.
func Runs(recs []Record, job string) []Run {
	var out []Run
	idx := map[string]int{}
	for _, r := range recs {
		if job != "" && r.Job != job {
			continue
		}
		i, ok := idx[r.Run]
		if !ok {
			idx[r.Run] = len(out)
			out = append(out, Run{ID: r.Run, Job: r.Job, ScheduledFor: r.ScheduledFor, Started: r.At, Outcome: r.Outcome,
				Trigger: r.Trigger, Session: r.Session, Missed: r.Missed, Detail: r.Detail})
			if r.Outcome != Started {
				out[len(out)-1].Ended = r.At
			}
			continue
		}
		run := &out[i]
		run.Outcome, run.Ended = r.Outcome, r.At
		if r.Session != "" {
			run.Session = r.Session
		}
		if r.Detail != "" {
			run.Detail = r.Detail
		}
	}
	return out
}

// LastSlots returns each job's latest recorded slot (started, ended or
// skipped): the point its schedule resumes from.
func LastSlots(recs []Record) map[string]time.Time {
	out := map[string]time.Time{}
	for _, r := range recs {
		if r.Trigger == TriggerManual {
			continue // a manual run is no slot of the schedule
		}
		if r.ScheduledFor.After(out[r.Job]) {
			out[r.Job] = r.ScheduledFor
		}
	}
	return out
}
