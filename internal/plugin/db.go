package plugin

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"
)

// DB is the Store in fluffy.db (tables plugins and plugin_tools,
// migration 0008). SQL must be an open fluffy.db; Now defaults to
// time.Now.
type DB struct {
	SQL *sql.DB
	Now func() time.Time
}

var (
	_ Store       = (*DB)(nil)
	_ ToolOfferer = (*DB)(nil)
)

// ErrExists is returned by Add for a name already taken.
var ErrExists = errors.New("plugin: a plugin of this name exists")

// Folder is a plugin's data folder under fluffy's data directory
// (<data>/plugins/<name>): its log (LogName) and, for an imported
// plugin, its generated folder (ImportedDir).
func Folder(data, name string) string { return filepath.Join(data, "plugins", name) }

// ImportedDir is where 'fluffy plugin import' writes an imported
// plugin's manifest, below its data folder.
const ImportedDir = "src"

func (d *DB) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

// Add records a new plugin (ErrExists when the name is taken).
func (d *DB) Add(ctx context.Context, r Record) error {
	mj, err := json.Marshal(r.Manifest)
	if err != nil {
		return fmt.Errorf("plugin: %w", err)
	}
	now := d.now().UnixMilli()
	var exists bool
	err = d.tx(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM plugins WHERE name = ?)`, r.Manifest.Name).Scan(&exists); err != nil || exists {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO plugins (name, manifest, dir, digest, signer, state, reason, source, created, updated)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			r.Manifest.Name, string(mj), r.Dir, r.Digest, r.Signer, string(r.State), r.Reason, r.Source, now, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("plugin: add %s: %w", r.Manifest.Name, err)
	}
	if exists {
		return fmt.Errorf("%w: %s", ErrExists, r.Manifest.Name)
	}
	return nil
}

const recordCols = `name, manifest, dir, digest, signer, state, reason, source, created, updated`

func scanRecord(s interface{ Scan(...any) error }) (Record, error) {
	var r Record
	var name, mj, state string
	var created, updated int64
	if err := s.Scan(&name, &mj, &r.Dir, &r.Digest, &r.Signer, &state, &r.Reason, &r.Source, &created, &updated); err != nil {
		return r, err
	}
	if err := json.Unmarshal([]byte(mj), &r.Manifest); err != nil {
		return r, fmt.Errorf("plugin %s: stored manifest: %w", name, err)
	}
	r.State = State(state)
	r.Created, r.Updated = time.UnixMilli(created), time.UnixMilli(updated)
	return r, nil
}

// List returns every plugin, by name.
func (d *DB) List(ctx context.Context) ([]Record, error) {
	rows, err := d.SQL.QueryContext(ctx, `SELECT `+recordCols+` FROM plugins ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("plugin: list: %w", err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("plugin: list: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Get returns one plugin.
func (d *DB) Get(ctx context.Context, name string) (Record, error) {
	r, err := scanRecord(d.SQL.QueryRowContext(ctx, `SELECT `+recordCols+` FROM plugins WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil {
		return r, fmt.Errorf("plugin: get %s: %w", name, err)
	}
	return r, nil
}

func (d *DB) exec(ctx context.Context, name, what, q string, args ...any) error {
	res, err := d.SQL.ExecContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("plugin: %s %s: %w", what, name, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return nil
}

// SetState records a state and its reason.
func (d *DB) SetState(ctx context.Context, name string, s State, reason string) error {
	return d.exec(ctx, name, "set state of", `UPDATE plugins SET state = ?, reason = ?, updated = ? WHERE name = ?`,
		string(s), reason, d.now().UnixMilli(), name)
}

// Approve records a person's approval of the folder as it is now: its
// digest, signer and manifest, and the state (Enabled, after 'fluffy
// plugin enable' showed a changed digest).
func (d *DB) Approve(ctx context.Context, name string, m Manifest, digest, signer string, s State, reason string) error {
	mj, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("plugin: %w", err)
	}
	return d.exec(ctx, name, "approve", `UPDATE plugins SET manifest = ?, digest = ?, signer = ?, state = ?, reason = ?, updated = ? WHERE name = ?`,
		string(mj), digest, signer, string(s), reason, d.now().UnixMilli(), name)
}

// Remove forgets a plugin and its pins.
func (d *DB) Remove(ctx context.Context, name string) error {
	return d.exec(ctx, name, "remove", `DELETE FROM plugins WHERE name = ?`, name)
}

// PinTools replaces the plugin's approved tools with pins.
func (d *DB) PinTools(ctx context.Context, name string, pins []ToolPin) error {
	if _, err := d.Get(ctx, name); err != nil {
		return err
	}
	return d.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM plugin_tools WHERE plugin = ?`, name); err != nil {
			return err
		}
		for _, p := range pins {
			j, err := json.Marshal(p)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO plugin_tools (plugin, name, pinned) VALUES (?, ?, ?)`, name, p.Name, string(j)); err != nil {
				return err
			}
		}
		return nil
	})
}

func (d *DB) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := d.SQL.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("plugin: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return fmt.Errorf("plugin: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("plugin: %w", err)
	}
	return nil
}

// Pins returns the approved tools, by name.
func (d *DB) Pins(ctx context.Context, name string) ([]ToolPin, error) {
	cs, err := d.tools(ctx, name)
	if err != nil {
		return nil, err
	}
	var out []ToolPin
	for _, c := range cs {
		if c.Pinned != nil {
			out = append(out, *c.Pinned)
		}
	}
	return out, nil
}

// ToolChange is a tool whose description as the server offers it differs
// from its pin: Pinned nil for a tool never approved, Offered the
// description now.
type ToolChange struct {
	Name    string
	Pinned  *ToolPin
	Offered *ToolPin
}

// ToolOfferer is the store side of tool pinning beyond Store: the
// runtime reports what a server offers, a person approves the changes.
//
// OfferTools records tools as the server describes them now and returns
// the ones that differ from their pins (a new tool, or a changed name's
// description, schema or annotations): those stay disabled. Offered
// returns the changes waiting for a person. ApproveTools makes them the
// pins.
type ToolOfferer interface {
	OfferTools(ctx context.Context, name string, tools []ToolPin) ([]ToolChange, error)
	Offered(ctx context.Context, name string) ([]ToolChange, error)
	ApproveTools(ctx context.Context, name string) ([]ToolChange, error)
}

func (d *DB) tools(ctx context.Context, name string) ([]ToolChange, error) {
	if _, err := d.Get(ctx, name); err != nil {
		return nil, err
	}
	rows, err := d.SQL.QueryContext(ctx, `SELECT name, pinned, offered FROM plugin_tools WHERE plugin = ? ORDER BY name`, name)
	if err != nil {
		return nil, fmt.Errorf("plugin: tools of %s: %w", name, err)
	}
	defer rows.Close()
	var out []ToolChange
	for rows.Next() {
		var c ToolChange
		var pinned, offered sql.NullString
		if err := rows.Scan(&c.Name, &pinned, &offered); err != nil {
			return nil, fmt.Errorf("plugin: tools of %s: %w", name, err)
		}
		for _, x := range []struct {
			s  sql.NullString
			to **ToolPin
		}{{pinned, &c.Pinned}, {offered, &c.Offered}} {
			if x.s.Valid {
				var p ToolPin
				if err := json.Unmarshal([]byte(x.s.String), &p); err != nil {
					return nil, fmt.Errorf("plugin: tools of %s: %w", name, err)
				}
				*x.to = &p
			}
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// PinSHA256 is the hex SHA-256 of a pin's JSON (members in declaration
// order, annotations by key): what plugin.approve entries record of it.
func PinSHA256(p ToolPin) string {
	b, _ := json.Marshal(p)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// SamePin reports whether two descriptions of a tool are the one
// approved: name, description, schema and annotations alike.
func SamePin(a, b ToolPin) bool {
	return a.Name == b.Name && a.Description == b.Description && a.Schema == b.Schema &&
		(len(a.Annotations) == 0 && len(b.Annotations) == 0 || reflect.DeepEqual(a.Annotations, b.Annotations))
}

// OfferTools implements ToolOfferer.
func (d *DB) OfferTools(ctx context.Context, name string, tools []ToolPin) ([]ToolChange, error) {
	cur, err := d.tools(ctx, name)
	if err != nil {
		return nil, err
	}
	byName := map[string]ToolChange{}
	for _, c := range cur {
		byName[c.Name] = c
	}
	var changed []ToolChange
	err = d.tx(ctx, func(tx *sql.Tx) error {
		for _, t := range tools {
			c := byName[t.Name]
			var offered any // NULL when the pin agrees
			if c.Pinned == nil || !SamePin(*c.Pinned, t) {
				j, err := json.Marshal(t)
				if err != nil {
					return err
				}
				offered = string(j)
				changed = append(changed, ToolChange{Name: t.Name, Pinned: c.Pinned, Offered: &t})
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO plugin_tools (plugin, name, offered) VALUES (?, ?, ?)
				ON CONFLICT (plugin, name) DO UPDATE SET offered = excluded.offered`, name, t.Name, offered); err != nil {
				return err
			}
		}
		return nil
	})
	slices.SortFunc(changed, func(a, b ToolChange) int { return strings.Compare(a.Name, b.Name) })
	return changed, err
}

// Offered implements ToolOfferer.
func (d *DB) Offered(ctx context.Context, name string) ([]ToolChange, error) {
	cs, err := d.tools(ctx, name)
	if err != nil {
		return nil, err
	}
	var out []ToolChange
	for _, c := range cs {
		if c.Offered != nil {
			out = append(out, c)
		}
	}
	return out, nil
}

// ApproveTools implements ToolOfferer: every offered description becomes
// the pin; it returns the changes approved.
func (d *DB) ApproveTools(ctx context.Context, name string) ([]ToolChange, error) {
	cs, err := d.Offered(ctx, name)
	if err != nil {
		return nil, err
	}
	err = d.tx(ctx, func(tx *sql.Tx) error {
		for _, c := range cs {
			if _, err := tx.ExecContext(ctx, `UPDATE plugin_tools SET pinned = offered, offered = NULL WHERE plugin = ? AND name = ? AND offered IS NOT NULL`, name, c.Name); err != nil {
				return err
			}
		}
		return nil
	})
	return cs, err
}
