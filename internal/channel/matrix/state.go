//go:build goolm

package matrix

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	_ "modernc.org/sqlite" // the "sqlite" driver
)

// state is the channel's own SQLite file (state.db): the events it has
// handled, the sync token it resumes from, the encrypted events of saved
// batches still waiting for their key, and the approval requests it
// posted with the steps a person's reactions selected. mautrix's crypto
// and room state live beside it in crypto.db.
type state struct{ db *sql.DB }

// openSQLite opens path with modernc's driver: WAL, a busy timeout,
// foreign keys, transactions that take the write lock at BEGIN.
func openSQLite(path string) (*sql.DB, error) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("matrix: open %s: %w", path, err)
	}
	return db, nil
}

func openState(ctx context.Context, dir string) (*state, error) {
	db, err := openSQLite(filepath.Join(dir, "state.db"))
	if err != nil {
		return nil, err
	}
	_, err = db.ExecContext(ctx, `
CREATE TABLE IF NOT EXISTS handled (event_id TEXT PRIMARY KEY, at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS sync (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS pending (event_id TEXT PRIMARY KEY, room TEXT NOT NULL, at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS requests (
	request_id TEXT PRIMARY KEY,
	room TEXT NOT NULL,
	thread TEXT NOT NULL DEFAULT '',
	event_id TEXT NOT NULL UNIQUE,
	steps INTEGER NOT NULL,
	body TEXT NOT NULL,
	selected TEXT NOT NULL DEFAULT '',
	answered TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS toggles (event_id TEXT PRIMARY KEY, request_id TEXT NOT NULL, step INTEGER NOT NULL);`)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("matrix: state database: %w", err)
	}
	return &state{db: db}, nil
}

func (s *state) close() error { return s.db.Close() }

// handled reports whether event id was already delivered or answered.
func (s *state) handled(ctx context.Context, id string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM handled WHERE event_id = ?`, id).Scan(&n)
	return n > 0, err
}

func (s *state) markHandled(ctx context.Context, id string, at int64) error {
	_, err := s.db.ExecContext(ctx, `INSERT OR IGNORE INTO handled (event_id, at) VALUES (?, ?)`, id, at)
	return err
}

// prune forgets handled events older than before (UnixNano).
func (s *state) prune(ctx context.Context, before int64) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM handled WHERE at < ?`, before)
	return err
}

func (s *state) get(ctx context.Context, k string) (string, error) {
	var v string
	err := s.db.QueryRowContext(ctx, `SELECT v FROM sync WHERE k = ?`, k).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return v, err
}

func (s *state) put(ctx context.Context, k, v string) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO sync (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v`, k, v)
	return err
}

// pendingEvent is an encrypted event of a saved batch whose key had not
// come: the next start fetches it again.
type pendingEvent struct{ room, eventID string }

// saveBatch saves a batch's sync token together with the events of the
// batch still waiting for their key, so that a crash after the token is
// saved cannot lose them.
func (s *state) saveBatch(ctx context.Context, token string, pend []pendingEvent, at int64) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, p := range pend {
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO pending (event_id, room, at) VALUES (?, ?, ?)`, p.eventID, p.room, at); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO sync (k, v) VALUES ('next_batch', ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v`, token); err != nil {
		return err
	}
	return tx.Commit()
}

// pending lists the events waiting for their key, oldest first.
func (s *state) pending(ctx context.Context) ([]pendingEvent, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT room, event_id FROM pending ORDER BY at, rowid`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []pendingEvent
	for rows.Next() {
		var p pendingEvent
		if err := rows.Scan(&p.room, &p.eventID); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// unpend forgets a pending event: it was handled or finally refused.
func (s *state) unpend(ctx context.Context, eventID string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM pending WHERE event_id = ?`, eventID)
	return err
}

// posted is an approval request the channel showed.
type posted struct {
	requestID, room, thread, eventID, body string
	steps                                  int
	selected                               []int
	answered                               string
}

var errNoRequest = errors.New("matrix: no approval request posted as that event")

func (s *state) addRequest(ctx context.Context, p posted) error {
	_, err := s.db.ExecContext(ctx, `INSERT OR REPLACE INTO requests (request_id, room, thread, event_id, steps, body) VALUES (?, ?, ?, ?, ?, ?)`,
		p.requestID, p.room, p.thread, p.eventID, p.steps, p.body)
	return err
}

func (s *state) requestByEvent(ctx context.Context, eventID string) (posted, error) {
	return s.scanRequest(s.db.QueryRowContext(ctx, `SELECT request_id, room, thread, event_id, steps, body, selected, answered FROM requests WHERE event_id = ?`, eventID))
}

func (s *state) requestByID(ctx context.Context, id string) (posted, error) {
	return s.scanRequest(s.db.QueryRowContext(ctx, `SELECT request_id, room, thread, event_id, steps, body, selected, answered FROM requests WHERE request_id = ?`, id))
}

// openRequests are the unanswered requests shown in room, newest first.
func (s *state) openRequests(ctx context.Context, room string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT event_id FROM requests WHERE room = ? AND answered = '' ORDER BY rowid DESC`, room)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var e string
		if err := rows.Scan(&e); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

func (s *state) scanRequest(row *sql.Row) (posted, error) {
	var p posted
	var sel string
	err := row.Scan(&p.requestID, &p.room, &p.thread, &p.eventID, &p.steps, &p.body, &sel, &p.answered)
	if errors.Is(err, sql.ErrNoRows) {
		return p, errNoRequest
	}
	if err != nil {
		return p, err
	}
	for f := range strings.SplitSeq(sel, ",") {
		if n, err := strconv.Atoi(f); err == nil {
			p.selected = append(p.selected, n)
		}
	}
	return p, nil
}

// toggle flips step n of a request's selection and remembers which
// reaction did it (its redaction flips it back); it returns the new
// selection.
func (s *state) toggle(ctx context.Context, requestID string, n int, reaction string) ([]int, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	var sel string
	if err := tx.QueryRowContext(ctx, `SELECT selected FROM requests WHERE request_id = ?`, requestID).Scan(&sel); err != nil {
		return nil, err
	}
	var out []int
	for f := range strings.SplitSeq(sel, ",") {
		if v, err := strconv.Atoi(f); err == nil {
			out = append(out, v)
		}
	}
	if i := slices.Index(out, n); i >= 0 {
		out = slices.Delete(out, i, i+1)
	} else {
		out = append(out, n)
		slices.Sort(out)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE requests SET selected = ? WHERE request_id = ?`, joinInts(out, ","), requestID); err != nil {
		return nil, err
	}
	if reaction != "" {
		if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO toggles (event_id, request_id, step) VALUES (?, ?, ?)`, reaction, requestID, n); err != nil {
			return nil, err
		}
	}
	return out, tx.Commit()
}

// toggleByReaction is the request and step a reaction event toggled.
func (s *state) toggleByReaction(ctx context.Context, reaction string) (string, int, error) {
	var req string
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT request_id, step FROM toggles WHERE event_id = ?`, reaction).Scan(&req, &n)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, errNoRequest
	}
	if err == nil {
		_, err = s.db.ExecContext(ctx, `DELETE FROM toggles WHERE event_id = ?`, reaction)
	}
	return req, n, err
}

func (s *state) answered(ctx context.Context, requestID, text string) error {
	_, err := s.db.ExecContext(ctx, `UPDATE requests SET answered = ? WHERE request_id = ?`, text, requestID)
	return err
}

func joinInts(v []int, sep string) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, sep)
}
