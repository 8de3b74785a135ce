package plugin

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrOfferChanged: the tool changes waiting for approval are not the
// ones the person reviewed (the server offered others since).
var ErrOfferChanged = errors.New("plugin: the offered tools changed since they were reviewed")

// ApproveSeen makes the offered descriptions of plugin name its pins, as
// ApproveTools does, only when they are exactly the ones the person
// reviewed: seen maps each held tool's name to the PinSHA256 of the
// description they saw. Anything else (a tool more or less, another
// description) is ErrOfferChanged and nothing is approved. The check and
// the update are one transaction, so an offer recorded meanwhile cannot
// slip in.
func (d *DB) ApproveSeen(ctx context.Context, name string, seen map[string]string) ([]ToolChange, error) {
	if _, err := d.Get(ctx, name); err != nil {
		return nil, err
	}
	var done []ToolChange
	err := d.tx(ctx, func(tx *sql.Tx) error {
		var err error
		if done, err = offeredIn(ctx, tx, name); err != nil {
			return err
		}
		if len(done) != len(seen) {
			return ErrOfferChanged
		}
		for _, c := range done {
			if h, ok := seen[c.Name]; !ok || h != PinSHA256(*c.Offered) {
				return ErrOfferChanged
			}
		}
		for _, c := range done {
			if _, err := tx.ExecContext(ctx, `UPDATE plugin_tools SET pinned = offered, offered = NULL WHERE plugin = ? AND name = ?`, name, c.Name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return done, nil
}

// offeredIn reads the held tool changes of plugin name within tx.
func offeredIn(ctx context.Context, tx *sql.Tx, name string) ([]ToolChange, error) {
	rows, err := tx.QueryContext(ctx, `SELECT name, pinned, offered FROM plugin_tools WHERE plugin = ? AND offered IS NOT NULL ORDER BY name`, name)
	if err != nil {
		return nil, fmt.Errorf("tools of %s: %w", name, err)
	}
	defer rows.Close()
	var out []ToolChange
	for rows.Next() {
		var c ToolChange
		var pinned sql.NullString
		var offered string
		if err := rows.Scan(&c.Name, &pinned, &offered); err != nil {
			return nil, fmt.Errorf("tools of %s: %w", name, err)
		}
		c.Offered = &ToolPin{}
		if err := json.Unmarshal([]byte(offered), c.Offered); err != nil {
			return nil, fmt.Errorf("tools of %s: %w", name, err)
		}
		if pinned.Valid {
			c.Pinned = &ToolPin{}
			if err := json.Unmarshal([]byte(pinned.String), c.Pinned); err != nil {
				return nil, fmt.Errorf("tools of %s: %w", name, err)
			}
		}
		out = append(out, c)
	}
	return out, rows.Err()
}
