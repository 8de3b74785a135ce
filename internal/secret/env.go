package secret

import (
	"context"
	"os"
)

// Env resolves secret://env/VAR from an environment. The value lives in
// that environment for the life of the process, so this backend cannot
// zero it: it is for simple set-ups (docs/secrets.md).
type Env struct {
	// LookupEnv reads a variable; nil is os.LookupEnv.
	LookupEnv func(string) (string, bool)
}

var (
	_ Backend = Env{}
	_ Stater  = Env{}
)

// Lookup returns the variable's value; unset or empty is ErrNotFound.
func (e Env) Lookup(_ context.Context, name string) ([]byte, error) {
	look := e.LookupEnv
	if look == nil {
		look = os.LookupEnv
	}
	v, ok := look(name)
	if !ok {
		return nil, errorf(ErrNotFound, "environment variable %s is not set", name)
	}
	if v == "" {
		return nil, errorf(ErrNotFound, "environment variable %s is empty", name)
	}
	return []byte(v), nil
}

// State: the environment is always there.
func (Env) State(context.Context) (State, string) { return Unlocked, "the process environment" }
