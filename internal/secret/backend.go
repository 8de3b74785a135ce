package secret

import (
	"context"
	"errors"
	"fmt"
)

// The errors a backend's Lookup wraps where they apply; callers branch on
// them with errors.Is.
var (
	// ErrNotFound: the backend has no such secret.
	ErrNotFound = errors.New("secret: not found")
	// ErrLocked: the backend holds the secret but must be unlocked first
	// (a passphrase or master password not yet given).
	ErrLocked = errors.New("secret: backend locked")
	// ErrUnreachable: the backend cannot be asked at all (no bw binary,
	// no server, a store that cannot be read).
	ErrUnreachable = errors.New("secret: backend unreachable")
	// ErrUnknownBackend: a reference names a backend not configured.
	ErrUnknownBackend = errors.New("secret: unknown backend")
)

// Backend resolves the paths of one kind of reference.
//
// Lookup returns the value path names; the caller owns the slice and
// zeroes it when done, so an implementation returns a slice no one else
// holds. Errors wrap ErrNotFound, ErrLocked or ErrUnreachable where those
// apply and never contain the value. Lookup is safe for concurrent use.
type Backend interface {
	Lookup(ctx context.Context, path string) ([]byte, error)
}

// State is a backend's readiness as fluffy doctor shows it.
type State string

// The states.
const (
	Unlocked    State = "unlocked"
	Locked      State = "locked"
	Unreachable State = "unreachable"
)

// Stater is a backend that can say its state without resolving anything.
// The detail says why, never a value.
type Stater interface {
	State(ctx context.Context) (State, string)
}

// Locker is a backend that can forget what unlocks it (a session key, a
// decrypted store): the broker calls Lock when the last session using it
// ends or its TTL passes.
type Locker interface {
	Lock(ctx context.Context) error
}

// wipe zeroes b.
func wipe(b []byte) { clear(b) }

// kindError is a backend error whose message is the reason alone (what a
// person reads in a configuration check) and which matches its kind
// (ErrNotFound, ...) and its cause with errors.Is.
type kindError struct {
	kind  error
	msg   string
	cause error
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.cause}
}

// errorf returns a kindError; a %w in format is the cause.
func errorf(kind error, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &kindError{kind: kind, msg: err.Error(), cause: errors.Unwrap(err)}
}
