package kernel

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ExpireResult says what Expire did.
type ExpireResult struct {
	// Removed are the sessions removed.
	Removed []string `json:"removed"`
	// Kept are old sessions left in place: running, or open with changes
	// nobody has reviewed (a person applies or discards them first).
	Kept []string `json:"kept,omitempty"`
}

// Expire removes the sessions not updated since before (sessions.retention,
// docs/sched.md#retention): their rows, transcripts and change sets, as
// Remove does; the audit log keeps every entry about them and gains a
// session.rm for each. A running session, or an open one whose change
// set holds changes, is kept.
func (k *Kernel) Expire(ctx context.Context, before time.Time) (ExpireResult, error) {
	rows, err := k.o.DB.QueryContext(ctx, `SELECT id, status FROM sessions WHERE updated_at < ? ORDER BY updated_at`, before.UnixNano())
	if err != nil {
		return ExpireResult{}, fmt.Errorf("find expired sessions: %w", err)
	}
	type old struct{ id, status string }
	var olds []old
	for rows.Next() {
		var o old
		if err := rows.Scan(&o.id, &o.status); err != nil {
			rows.Close()
			return ExpireResult{}, fmt.Errorf("find expired sessions: %w", err)
		}
		olds = append(olds, o)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return ExpireResult{}, fmt.Errorf("find expired sessions: %w", err)
	}
	var res ExpireResult
	for _, o := range olds {
		if Status(o.status) != StatusClosed {
			if _, changes, err := k.Diff(ctx, o.id); err != nil || len(changes) > 0 {
				res.Kept = append(res.Kept, o.id)
				continue
			}
		}
		_, err := k.Remove(ctx, RemoveParams{ID: o.id, Force: true})
		switch {
		case errors.Is(err, ErrBusy):
			res.Kept = append(res.Kept, o.id)
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return res, fmt.Errorf("expire session %s: %w", o.id, err)
		default:
			res.Removed = append(res.Removed, o.id)
		}
	}
	return res, nil
}
