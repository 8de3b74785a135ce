package tdd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/store"
	"github.com/fluffy-agent/fluffy/internal/tdd/testrun"
)

// hashDomain separates the journal's hashes from any other SHA-256 use.
const hashDomain = "fluffy/tdd-journal/v1\n"

// ErrConflict is returned when another writer appended to the session's
// journal since this Session last read it.
var ErrConflict = errors.New("tdd: the session's journal changed under us")

// Journal stores transitions in fluffy.db's tdd_transitions table. It is
// safe for concurrent use; appends to one session are serialized by the
// database's write lock and checked against the chain head.
type Journal struct {
	db  *store.DB
	now func() time.Time
}

// JournalOptions configures NewJournal.
type JournalOptions struct {
	// DB is fluffy.db opened with the main migrations; required.
	DB *store.DB
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// NewJournal returns a journal over an open main database.
func NewJournal(o JournalOptions) (*Journal, error) {
	if o.DB == nil {
		return nil, errors.New("tdd: JournalOptions.DB is required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Journal{db: o.DB, now: o.Now}, nil
}

// Record is one stored transition.
type Record struct {
	Seq   int64     `json:"seq"`
	At    time.Time `json:"at"`
	Kind  EventKind `json:"kind"`
	From  State     `json:"from"`
	To    State     `json:"to"`
	Mode  Mode      `json:"mode"`
	Event Event     `json:"event"`
	// Hash is the chain hash after this row, hex; the caller hands the
	// latest to the audit log so that even a history rewritten with
	// recomputed hashes is caught.
	Hash string `json:"hash"`
}

// TamperError says where the history stops verifying.
type TamperError struct {
	Session string
	Seq     int64
	Problem string
}

func (e *TamperError) Error() string {
	return fmt.Sprintf("tdd: journal of session %s altered at transition %d: %s", e.Session, e.Seq, e.Problem)
}

func (e *TamperError) Unwrap() error { return ErrTampered }

// canonical encodes v as the journal hashes it: encoding/json of fluffy's
// own types (fixed field order, sorted map keys, no HTML escaping
// differences since the encoder's defaults are fixed).
func canonical(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("tdd: encode: %w", err)
	}
	return b, nil
}

func statusHash(s Status) ([]byte, error) {
	b, err := canonical(s)
	if err != nil {
		return nil, err
	}
	h := sha256.Sum256(b)
	return h[:], nil
}

func chainHash(prev []byte, session string, seq int64, at int64, kind EventKind, from, to State, mode Mode, event, sh []byte) []byte {
	h := sha256.New()
	h.Write([]byte(hashDomain))
	h.Write(prev)
	field := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	var num [16]byte
	binary.BigEndian.PutUint64(num[:8], uint64(seq))
	binary.BigEndian.PutUint64(num[8:], uint64(at))
	field([]byte(session))
	field(num[:])
	field([]byte(kind))
	field([]byte(from))
	field([]byte(to))
	field([]byte(mode))
	field(event)
	field(sh)
	return h.Sum(nil)
}

// decodeEvent is the strict decoder: unknown fields are refused and the
// bytes must be the canonical encoding of what they decode to.
func decodeEvent(b []byte) (Event, error) {
	var ev Event
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil {
		return Event{}, err
	}
	if dec.More() {
		return Event{}, errors.New("trailing data")
	}
	again, err := canonical(ev)
	if err != nil {
		return Event{}, err
	}
	if !bytes.Equal(again, b) {
		return Event{}, errors.New("not in canonical form")
	}
	return ev, nil
}

// Load replays a session's journal and verifies it: the chain of hashes,
// the sequence numbers, each event's canonical form, each transition
// against the machine (Step must accept it and land where the row says)
// and the status hash. It returns the status after the last transition
// (Initial() for a session without transitions), the records, and the
// head hash. Any mismatch is a *TamperError wrapping ErrTampered.
func (j *Journal) Load(ctx context.Context, session string) (Status, []Record, []byte, error) {
	rows, err := j.db.QueryContext(ctx, `SELECT seq, at, kind, from_state, to_state, mode, event, status_hash, prev_hash, hash
		FROM tdd_transitions WHERE session_id = ? ORDER BY seq`, session)
	if err != nil {
		return Status{}, nil, nil, fmt.Errorf("tdd: load session %s: %w", session, err)
	}
	defer rows.Close()
	s := Initial()
	prev := make([]byte, sha256.Size)
	var recs []Record
	for rows.Next() {
		var (
			seq, at              int64
			kind, from, to, mode string
			event                string
			sh, prevHash, hash   []byte
		)
		if err := rows.Scan(&seq, &at, &kind, &from, &to, &mode, &event, &sh, &prevHash, &hash); err != nil {
			return Status{}, nil, nil, fmt.Errorf("tdd: load session %s: %w", session, err)
		}
		bad := func(problem string) error { return &TamperError{Session: session, Seq: seq, Problem: problem} }
		if seq != s.Seq+1 {
			return Status{}, nil, nil, bad(fmt.Sprintf("expected transition %d (a row was deleted or renumbered)", s.Seq+1))
		}
		if !bytes.Equal(prevHash, prev) {
			return Status{}, nil, nil, bad("previous-hash link broken")
		}
		want := chainHash(prev, session, seq, at, EventKind(kind), State(from), State(to), Mode(mode), []byte(event), sh)
		if !bytes.Equal(hash, want) {
			return Status{}, nil, nil, bad("row hash does not match its contents")
		}
		ev, err := decodeEvent([]byte(event))
		if err != nil {
			return Status{}, nil, nil, bad("event: " + err.Error())
		}
		if ev.Kind != EventKind(kind) {
			return Status{}, nil, nil, bad("event kind differs from its column")
		}
		tr, err := Step(s, ev)
		if err != nil {
			return Status{}, nil, nil, bad("replay refused: " + err.Error())
		}
		if tr.From != State(from) || tr.To != State(to) || tr.Mode != Mode(mode) {
			return Status{}, nil, nil, bad(fmt.Sprintf("replay gives %s→%s (%s), the row says %s→%s (%s)", tr.From, tr.To, tr.Mode, from, to, mode))
		}
		gotSH, err := statusHash(tr.Status)
		if err != nil {
			return Status{}, nil, nil, err
		}
		if !bytes.Equal(gotSH, sh) {
			return Status{}, nil, nil, bad("status after replay differs from the recorded one")
		}
		s, prev = tr.Status, hash
		recs = append(recs, Record{Seq: seq, At: time.Unix(0, at).UTC(), Kind: ev.Kind, From: tr.From, To: tr.To, Mode: tr.Mode, Event: ev, Hash: hex.EncodeToString(hash)})
	}
	if err := rows.Err(); err != nil {
		return Status{}, nil, nil, fmt.Errorf("tdd: load session %s: %w", session, err)
	}
	return s, recs, prev, nil
}

// append stores one transition computed from (s, head), in one write
// transaction that first checks the stored head is still head.
func (j *Journal) append(ctx context.Context, session string, s Status, head []byte, ev Event) (Transition, []byte, error) {
	tr, err := Step(s, ev)
	if err != nil {
		return Transition{}, nil, err
	}
	evJSON, err := canonical(ev)
	if err != nil {
		return Transition{}, nil, err
	}
	sh, err := statusHash(tr.Status)
	if err != nil {
		return Transition{}, nil, err
	}
	at := j.now().UnixNano()
	hash := chainHash(head, session, tr.Seq, at, ev.Kind, tr.From, tr.To, tr.Mode, evJSON, sh)
	err = j.db.Tx(ctx, func(tx *sql.Tx) error {
		var last int64
		var lastHash []byte
		err := tx.QueryRowContext(ctx, `SELECT seq, hash FROM tdd_transitions WHERE session_id = ? ORDER BY seq DESC LIMIT 1`, session).Scan(&last, &lastHash)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			last, lastHash = 0, make([]byte, sha256.Size)
		case err != nil:
			return fmt.Errorf("tdd: append to session %s: %w", session, err)
		}
		if last != s.Seq || !bytes.Equal(lastHash, head) {
			return fmt.Errorf("%w: session %s is at transition %d, expected %d", ErrConflict, session, last, s.Seq)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO tdd_transitions
			(session_id, seq, at, kind, from_state, to_state, mode, event, status_hash, prev_hash, hash)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			session, tr.Seq, at, string(ev.Kind), string(tr.From), string(tr.To), string(tr.Mode), string(evJSON), sh, head, hash)
		if err != nil {
			return fmt.Errorf("tdd: append to session %s: %w", session, err)
		}
		return nil
	})
	if err != nil {
		return Transition{}, nil, err
	}
	return tr, hash, nil
}

// Sessions lists the sessions that have a journal, most recently changed
// first.
func (j *Journal) Sessions(ctx context.Context) ([]string, error) {
	rows, err := j.db.QueryContext(ctx, `SELECT session_id FROM tdd_transitions GROUP BY session_id ORDER BY max(at) DESC, session_id`)
	if err != nil {
		return nil, fmt.Errorf("tdd: list sessions: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// Session is one session's machine: its rules, its verified status and
// its journal. Every successful event is stored before Apply returns, so
// a crash at any point resumes in the last acknowledged state.
type Session struct {
	ID      string
	machine *Machine
	journal *Journal

	mu     sync.Mutex // guards the fields below
	status Status
	head   []byte
}

// Resume opens a session: replays and verifies its journal, or starts it
// in mode when it has none.
func Resume(ctx context.Context, j *Journal, m *Machine, id string, mode Mode) (*Session, error) {
	if id == "" {
		return nil, errors.New("tdd: session id is empty")
	}
	s, _, head, err := j.Load(ctx, id)
	if err != nil {
		return nil, err
	}
	sess := &Session{ID: id, machine: m, journal: j, status: s, head: head}
	if s.Seq == 0 {
		if _, err := sess.Apply(ctx, Event{Kind: EventStart, Mode: mode}); err != nil {
			return nil, err
		}
	}
	return sess, nil
}

// Status returns a copy of the current status.
func (s *Session) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status.clone()
}

// Head returns the chain hash of the last transition, hex.
func (s *Session) Head() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return hex.EncodeToString(s.head)
}

// Allowed is Machine.Allowed on the session's current status. Only a
// write is judged on the whole status; every other action is decided on
// the mode and state alone (see Machine.Allowed), so the hot read path
// does not copy the status's lists.
func (s *Session) Allowed(op operation.Operation) Decision {
	if op.Action != operation.Write {
		s.mu.Lock()
		st := Status{Mode: s.status.Mode, State: s.status.State}
		s.mu.Unlock()
		return s.machine.Allowed(st, op)
	}
	return s.machine.Allowed(s.Status(), op)
}

// Apply steps the machine and stores the transition; on error nothing
// changes.
func (s *Session) Apply(ctx context.Context, ev Event) (Transition, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applyLocked(ctx, ev)
}

// SwitchMode is the user's mode switch. by says who asked: anyone but
// ActorUser is refused with ErrNotUser (and nothing is stored). A switch
// to strict mode while tech debt is open is refused (ErrGuard, code
// debt_unpaid or coverage_stale, naming the files) unless the debt is
// paid by the budget in force, as done would judge it: strict mode
// cannot be a way out of explore mode's debt. The returned transition's
// ModeSwitch is the auditable record, and Revert the instrumentation
// files the caller must revert.
func (s *Session) SwitchMode(ctx context.Context, to Mode, by Actor, reason string) (Transition, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ev := ModeEvent(to, by, reason)
	// The debt check is the session's, not Step's: journals that
	// recorded such a switch before it existed still replay.
	if by.Kind == ActorUser && to == Strict && s.status.Mode != Strict && len(s.status.Debt) > 0 {
		if err := debtPaid(&s.status, "switch mode", s.machine.rules.BudgetBP); err != nil {
			return Transition{}, err
		}
	}
	return s.applyLocked(ctx, ev)
}

// WantsCoverage reports whether test runs should measure coverage now:
// in explore mode, and in any mode while tech debt is open (done checks
// it against a measurement taken after the last change). A nil Session
// (no TDD machine) wants none.
func (s *Session) WantsCoverage() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status.Mode == Explore || len(s.status.Debt) > 0
}

// Wrote records that op's writes happened (after the gate allowed them,
// or as seen in a change set's diff after a command), classifying its
// paths against the current status under the session's lock. A write the
// gate would have refused is refused here too, and not stored: the caller
// reverts it.
func (s *Session) Wrote(ctx context.Context, op operation.Operation) (Transition, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applyLocked(ctx, s.machine.WriteEvent(&s.status, op))
}

// TestRun records a parsed test run, then the coverage it measured
// (res.Coverage), if any: taken while no tech debt is open it is the
// baseline (the coverage before untested changes), otherwise the current
// measurement that pays the debt. The returned transition is the run's,
// with the status after both and, when debt is open and coverage was
// measured, DebtCoverage filled.
func (s *Session) TestRun(ctx context.Context, res *testrun.Result) (Transition, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tr, err := s.applyLocked(ctx, Event{Kind: EventTestRun, Run: RunOf(res)})
	if err != nil || res.Coverage == nil {
		return tr, err
	}
	ct, err := s.applyLocked(ctx, Event{Kind: EventCoverage, Coverage: res.Coverage, Baseline: len(s.status.Debt) == 0})
	if err != nil {
		return tr, err
	}
	tr.Status, tr.Notes = ct.Status, append(tr.Notes, ct.Notes...)
	tr.DebtCoverage = DebtStatus(ct.Status, s.machine.rules.BudgetBP)
	return tr, nil
}

// Finish records that the agent says the cycle is done, with the budget
// in force; the guards decide.
func (s *Session) Finish(ctx context.Context) (Transition, error) {
	return s.Apply(ctx, s.machine.DoneEvent())
}

func (s *Session) applyLocked(ctx context.Context, ev Event) (Transition, error) {
	tr, head, err := s.journal.append(ctx, s.ID, s.status, s.head, ev)
	if err != nil {
		return Transition{}, err
	}
	s.status, s.head = tr.Status, head
	return tr, nil
}
