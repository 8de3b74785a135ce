package wiring

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/fluffy-agent/fluffy/internal/web"
)

// webPasskeys keep the console's passkeys in fluffy.db (table passkeys,
// migration 0007): beside the sessions, in the database backups cover.
type webPasskeys struct{ db *sql.DB }

var _ web.Passkeys = webPasskeys{}

func (p webPasskeys) Add(ctx context.Context, k web.Passkey) error {
	_, err := p.db.ExecContext(ctx, `INSERT INTO passkeys (id, principal, user_handle, public_key, flags, sign_count, created)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, k.ID, k.Principal, k.UserHandle, k.PublicKey, int64(k.Flags), int64(k.SignCount), k.Created.UnixMilli())
	if err != nil {
		return fmt.Errorf("passkeys: add: %w", err)
	}
	return nil
}

const passkeyColumns = `id, principal, user_handle, public_key, flags, sign_count, created, last_used`

func scanPasskey(row interface{ Scan(...any) error }) (web.Passkey, error) {
	var k web.Passkey
	var flags, count, created, used int64
	if err := row.Scan(&k.ID, &k.Principal, &k.UserHandle, &k.PublicKey, &flags, &count, &created, &used); err != nil {
		return web.Passkey{}, err
	}
	k.Flags, k.SignCount, k.Created = byte(flags), uint32(count), time.UnixMilli(created)
	if used != 0 {
		k.LastUsed = time.UnixMilli(used)
	}
	return k, nil
}

func (p webPasskeys) List(ctx context.Context, principal string) ([]web.Passkey, error) {
	rows, err := p.db.QueryContext(ctx, `SELECT `+passkeyColumns+` FROM passkeys WHERE principal = ? ORDER BY created, id`, principal)
	if err != nil {
		return nil, fmt.Errorf("passkeys: list: %w", err)
	}
	defer rows.Close()
	var out []web.Passkey
	for rows.Next() {
		k, err := scanPasskey(rows)
		if err != nil {
			return nil, fmt.Errorf("passkeys: list: %w", err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

func (p webPasskeys) ByID(ctx context.Context, id []byte) (web.Passkey, error) {
	k, err := scanPasskey(p.db.QueryRowContext(ctx, `SELECT `+passkeyColumns+` FROM passkeys WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return web.Passkey{}, fmt.Errorf("%w: passkey", web.ErrNotFound)
	}
	if err != nil {
		return web.Passkey{}, fmt.Errorf("passkeys: %w", err)
	}
	return k, nil
}

// Used raises the counter in the same statement that checks it, so two
// logins with one assertion's counter cannot both pass.
func (p webPasskeys) Used(ctx context.Context, id []byte, signCount uint32, flags byte, at time.Time) error {
	res, err := p.db.ExecContext(ctx, `UPDATE passkeys SET sign_count = ?, flags = ?, last_used = ?
		WHERE id = ? AND (sign_count < ? OR (sign_count = 0 AND ? = 0))`,
		int64(signCount), int64(flags), at.UnixMilli(), id, int64(signCount), int64(signCount))
	if err != nil {
		return fmt.Errorf("passkeys: used: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return web.ErrSignCount
	}
	return nil
}

func (p webPasskeys) Remove(ctx context.Context, principal string, id []byte) error {
	res, err := p.db.ExecContext(ctx, `DELETE FROM passkeys WHERE id = ? AND principal = ?`, id, principal)
	if err != nil {
		return fmt.Errorf("passkeys: remove: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("%w: passkey", web.ErrNotFound)
	}
	return nil
}
