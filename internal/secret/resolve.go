package secret

import (
	"context"
	"errors"
	"fmt"
)

// ErrDaemonOnly: a reference names a backend only the daemon's broker
// reaches (age, bitwarden), where no resolver of them was given.
var ErrDaemonOnly = errors.New("secret: only the daemon resolves")

// Resolve reads the value the reference s names, for a caller outside a
// session (a channel's key or token): env and file references directly,
// any other backend's through other (the daemon's configured backends).
// A nil other refuses those with ErrDaemonOnly. The caller owns the
// result and zeroes it when done.
func Resolve(ctx context.Context, s string, lookupEnv func(string) (string, bool), other func(context.Context, Ref) ([]byte, error)) ([]byte, error) {
	ref, err := ParseRef(s)
	if err != nil {
		return nil, err
	}
	switch ref.Backend {
	case "env":
		return Env{LookupEnv: lookupEnv}.Lookup(ctx, ref.Path)
	case "file":
		return File{}.Lookup(ctx, ref.Path)
	}
	if other == nil {
		return nil, fmt.Errorf("%w %s references (%s; env: and file: resolve anywhere)", ErrDaemonOnly, ref.Backend, ref)
	}
	return other(ctx, ref)
}
