package kernel

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/ipc"
)

// MethodRemove removes sessions (RemoveParams → RemoveResult).
const MethodRemove = "session.rm"

// RemoveParams name the session to remove. An open session is refused
// unless Force: then its pending change set is discarded first, as a
// close would.
type RemoveParams struct {
	ID    string `json:"id"`
	Force bool   `json:"force,omitempty"`
}

// RemoveResult says what the removal dropped.
type RemoveResult struct {
	ID string `json:"id"`
	// Discarded is set when an open session's pending changes were
	// discarded (Force).
	Discarded bool `json:"discarded,omitempty"`
}

// Remove deletes a session from fluffy.db (its row, its TDD transitions
// and debug-instrumentation records) and its change set directory. The
// audit log keeps every entry about it — it is append-only — and gains a
// session.rm entry. A running session is refused (ErrBusy); an open one
// needs Force, which closes it first, discarding its change set. Its
// sub-agents are removed first, under the same rules.
func (k *Kernel) Remove(ctx context.Context, p RemoveParams) (RemoveResult, error) {
	info, err := k.Get(ctx, p.ID)
	if err != nil {
		return RemoveResult{}, err
	}
	if info.Status == StatusRunning {
		return RemoveResult{}, fmt.Errorf("%w: %s (cancel it first)", ErrBusy, p.ID)
	}
	// Its sub-agents go first, under the same rules: a running one
	// refuses the removal, an open one needs Force.
	kids, err := k.Children(ctx, p.ID)
	if err != nil {
		return RemoveResult{}, err
	}
	for _, c := range kids {
		if _, err := k.Remove(ctx, RemoveParams{ID: c.ID, Force: p.Force}); err != nil {
			return RemoveResult{}, fmt.Errorf("kernel: remove sub-agent %s first: %w", c.ID, err)
		}
	}
	release, err := k.reserveChanges(p.ID)
	if err != nil {
		return RemoveResult{}, err
	}
	defer release()
	res := RemoveResult{ID: info.ID}
	if info.Status != StatusClosed {
		if !p.Force {
			return res, fmt.Errorf("%w: session %s is %s; close it first (fluffy session close [--apply] %s) or remove it with --force, which discards its pending changes",
				ErrOpen, info.ID, info.Status, info.ID)
		}
		res.Discarded = true
	}
	// The log first: a crash after it leaves a session whose removal is
	// recorded and can be repeated; the other way round would leave a
	// removal nobody can prove.
	if _, err := k.o.Audit.Append(ctx, audit.Entry{Session: info.ID, Kind: audit.KindSessionRemove, Actor: "user", Payload: audit.SessionRemove{
		Status: string(info.Status), Workspace: info.Workspace, Discarded: res.Discarded}}); err != nil {
		return res, fmt.Errorf("kernel: audit session.rm: %w", err)
	}
	if err := k.o.Audit.Flush(ctx); err != nil {
		return res, fmt.Errorf("kernel: audit session.rm: %w", err)
	}
	// What was granted to it goes with it, also when it was open
	// (--force) and the rest of the removal fails.
	k.revoke(info.ID)
	err = k.o.DB.Tx(ctx, func(tx *sql.Tx) error {
		for _, q := range []string{
			`DELETE FROM tdd_transitions WHERE session_id = ?`,
			`DELETE FROM tdd_instrumentation WHERE session_id = ?`,
			`DELETE FROM sessions WHERE id = ?`,
		} {
			if _, err := tx.ExecContext(ctx, q, info.ID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("kernel: remove session %s from fluffy.db: %w", info.ID, err)
	}
	// The change set goes last: with the row gone nothing refers to it,
	// and a crash in between leaves only a directory the orphan sweep
	// does not need to understand.
	if info.ChangeSet != "" {
		if err := os.RemoveAll(info.ChangeSet); err != nil {
			return res, fmt.Errorf("kernel: session %s removed, but not its change set %s: %w", info.ID, info.ChangeSet, err)
		}
	}
	return res, nil
}

func (k *Kernel) removeHandler() ipc.Handler {
	return func(ctx context.Context, r *ipc.Request) (any, error) {
		var p RemoveParams
		if err := r.Bind(&p); err != nil {
			return nil, err
		}
		res, err := k.Remove(ctx, p)
		if err != nil {
			return nil, wireError(err)
		}
		return res, nil
	}
}
