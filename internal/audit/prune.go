package audit

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// PruneResult says what Prune removed.
type PruneResult struct {
	// Anchor is the new retention anchor: entries 1..Anchor are gone.
	Anchor uint64
	// Deleted is how many entries this call deleted.
	Deleted uint64
	// Seq is the audit.prune entry recording it (0 when nothing to prune).
	Seq uint64
}

// Prune deletes the entries older than before. It first signs a
// checkpoint at the cut (the anchor): its compact Merkle range and chain
// hash let what remains verify on its own. In the same transaction it
// records an audit.prune entry naming the anchor, so deleting entries
// without pruning stays detectable. The newest entry is never pruned.
func (l *Log) Prune(ctx context.Context, before time.Time) (PruneResult, error) {
	var res PruneResult
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.flushHeld(ctx, 0, false); err != nil {
		return res, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	// Hold mu from here: the audit.prune entry must be the last one in
	// its transaction so a failure can take it back.
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return res, ErrClosed
	}
	var cut sql.NullInt64
	if err := l.db.QueryRowContext(ctx, `SELECT max(seq) FROM entries WHERE json_extract(body, '$.time') < ? AND seq < ?`,
		before.UTC().Format(TimeFormat), int64(l.size)).Scan(&cut); err != nil {
		return res, fmt.Errorf("audit: prune: %w", err)
	}
	if !cut.Valid || uint64(cut.Int64) <= l.anchor {
		res.Anchor = l.anchor
		return res, nil
	}
	anchor := uint64(cut.Int64)
	// The compact range at the cut: from the newest checkpoint at or
	// before it, plus the leaves in between.
	var from uint64
	var packed []byte
	var note string
	err := l.db.QueryRowContext(ctx, `SELECT size, range, note FROM checkpoints WHERE size <= ? ORDER BY size DESC LIMIT 1`, int64(anchor)).Scan(&from, &packed, &note)
	chain := zeroHash
	rng := rangeFactory.NewEmptyRange(0)
	switch {
	case err == sql.ErrNoRows:
	case err != nil:
		return res, fmt.Errorf("audit: prune: %w", err)
	default:
		cp, err := ParseCheckpoint([]byte(note), l.key.Verifier)
		if err != nil {
			return res, fmt.Errorf("audit: prune: checkpoint %d: %w", from, err)
		}
		if rng, err = newRange(from, packed); err != nil {
			return res, err
		}
		chain = cp.Chain
	}
	r := l.Reader()
	err = r.rows(ctx, from+1, func(rw row) error {
		if rw.seq > anchor {
			return errStop
		}
		if h := chainHash(chain, rw.seq, rw.body); string(h) != string(rw.hash) {
			return fmt.Errorf("audit: prune: entry %d does not verify; run 'fluffy audit verify' before pruning", rw.seq)
		}
		chain = rw.hash
		return rng.Append(leafHash(rw.hash), nil)
	})
	if err != nil && err != errStop {
		return res, err
	}
	if rng.End() != anchor {
		return res, fmt.Errorf("audit: prune: entries missing before %d; run 'fluffy audit verify'", anchor)
	}
	acp, err := signCheckpoint(l.key.Signer, anchor, rootOf(rng), chain)
	if err != nil {
		return res, err
	}
	var deleted uint64
	payload, _ := json.Marshal(AuditPrune{
		Anchor: anchor, Root: b64(acp.Root), Chain: b64(acp.Chain),
		Before: before.UTC().Format(TimeFormat), Deleted: anchor - l.anchor,
	})
	// The audit.prune entry, written in the same transaction.
	e := Entry{Seq: l.size + 1, Time: l.opts.Now(), Kind: KindAuditPrune, Actor: ActorKernel, Payload: json.RawMessage(payload)}
	body, err := e.Encode()
	if err != nil {
		return res, err
	}
	prevSize, prevChain, prevRange := l.size, l.chain, cloneRange(l.rng)
	hash := chainHash(l.chain, e.Seq, body)
	if err := l.rng.Append(leafHash(hash), nil); err != nil {
		return res, err
	}
	l.size, l.chain = e.Seq, hash
	batch := append(l.pending, row{seq: e.Seq, body: body, hash: hash})
	now := l.opts.Now()
	cp, packedNow, err := l.dueCheckpoint(now, true)
	var head *Checkpoint
	if err == nil {
		head, err = l.signHead()
	}
	if err == nil {
		err = l.commit(ctx, batch, cp, packedNow, head, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO checkpoints (size, note, range) VALUES (?, ?, ?)`, int64(anchor), string(acp.Note), packRange(rng)); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO meta (key, value) VALUES ('anchor', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`, strconv.FormatUint(anchor, 10)); err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, `DELETE FROM entries WHERE seq <= ?`, int64(anchor))
			if err != nil {
				return err
			}
			n, _ := res.RowsAffected()
			deleted = uint64(n)
			_, err = tx.ExecContext(ctx, `DELETE FROM checkpoints WHERE size < ?`, int64(anchor))
			return err
		})
	}
	if err != nil {
		l.size, l.chain, l.rng = prevSize, prevChain, prevRange
		return res, fmt.Errorf("%w: prune: %w", ErrUnavailable, err)
	}
	l.pending, l.durable = nil, e.Seq
	l.mu.Unlock()
	l.checkpointed(cp, head, now)
	l.mu.Lock()
	l.anchor = anchor
	return PruneResult{Anchor: anchor, Deleted: deleted, Seq: e.Seq}, nil
}
