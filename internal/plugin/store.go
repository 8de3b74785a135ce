package plugin

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is returned by a Store for a plugin it does not hold.
var ErrNotFound = errors.New("plugin: no such plugin")

// Record is what fluffy keeps about one installed (or imported) plugin.
type Record struct {
	Manifest Manifest
	// Dir is the plugin's folder: the command runs there, the digest
	// covers its files.
	Dir string
	// Digest is "sha256:<hex>" of the folder (Digest) or the image
	// digest, as approved at install or the last enable.
	Digest string
	// Signer is the principal whose SSH signature verified at install;
	// empty when the plugin is unsigned.
	Signer string
	State  State
	// Reason says why the plugin is in State (who disabled it, the
	// crash, the changed digest).
	Reason string
	// Source is where it came from: the folder installed, or the
	// configuration file imported.
	Source  string
	Created time.Time
	Updated time.Time
}

// Store keeps plugins, their states and their pinned tools. The runtime
// (which starts plugins) uses it; internal/plugin's SQLite implementation
// (DB) keeps it in fluffy.db.
//
// Every method returns ErrNotFound (wrapped) for an unknown name. SetState
// records the state and reason whatever the previous state was: the
// lifecycle's allowed steps are checked by the callers that know the
// action. PinTools replaces the whole set of pins of a
// plugin; Pins returns them sorted by name, empty when none were pinned.
type Store interface {
	List(ctx context.Context) ([]Record, error)
	Get(ctx context.Context, name string) (Record, error)
	SetState(ctx context.Context, name string, s State, reason string) error
	PinTools(ctx context.Context, name string, pins []ToolPin) error
	Pins(ctx context.Context, name string) ([]ToolPin, error)
}

// LogName is the file under a plugin's data folder
// (<data>/plugins/<name>/) where the runtime appends the server's
// stderr; `fluffy plugin logs` reads it.
const LogName = "log"
