package webhook

import (
	"context"
	"errors"
	"fmt"

	"github.com/fluffy-agent/fluffy/internal/secret"
)

// ErrSecret is matched by every error resolving a hook's secret.
var ErrSecret = errors.New("webhook: secret")

// maxSecretFile bounds a secret file: a key, not a document.
const maxSecretFile = secret.MaxFileSecret

// minSecret is the shortest secret accepted without a warning.
const minSecret = 16

// ResolveSecret reads the key a secret reference names, in
// internal/secret's syntax: secret://env/VAR or its alias env:VAR (the
// variable, which must be set and not empty), secret://file/PATH or
// file:PATH (a regular file no one but its owner may read or write; one
// trailing newline is not part of the key). A reference to another
// backend (secret://age/..., secret://bitwarden/...) needs the daemon's
// broker: resolve, nil refuses it. Errors never contain the key.
func ResolveSecret(ref string, lookupEnv func(string) (string, bool)) ([]byte, error) {
	return resolveSecret(context.Background(), ref, lookupEnv, nil)
}

// Resolver resolves references of the backends a hook cannot reach by
// itself (the daemon's secret broker). The caller owns the result.
type Resolver func(ctx context.Context, ref secret.Ref) ([]byte, error)

func resolveSecret(ctx context.Context, s string, lookupEnv func(string) (string, bool), resolve Resolver) ([]byte, error) {
	var other func(context.Context, secret.Ref) ([]byte, error)
	if resolve != nil {
		other = resolve
	}
	v, err := secret.Resolve(ctx, s, lookupEnv, other)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSecret, err)
	}
	return v, nil
}

// checkSecret is ResolveSecret for a configuration check: a reference to
// a backend only the daemon reaches is checked for its form only (the
// daemon resolves it when it starts the hook).
func checkSecret(s string, lookupEnv func(string) (string, bool)) ([]byte, error) {
	ref, err := secret.ParseRef(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSecret, err)
	}
	if ref.Backend != "env" && ref.Backend != "file" {
		return nil, nil
	}
	return ResolveSecret(s, lookupEnv)
}
