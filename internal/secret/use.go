package secret

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
)

// Mode is how a secret enters a sandbox.
type Mode string

// The modes (docs/secrets.md says what each protects against).
const (
	// AsEnv sets an environment variable of the sandboxed command.
	AsEnv Mode = "env"
	// AsFile writes a file in a tmpfs mounted into the sandbox.
	AsFile Mode = "file"
	// AsStdin feeds the value to the command's standard input.
	AsStdin Mode = "stdin"
	// AsProxy gives the sandbox a placeholder (in an environment
	// variable) that the egress proxy swaps for the value in requests to
	// the bound hosts only.
	AsProxy Mode = "proxy"
)

// ErrUse is matched by every error validating a declaration.
var ErrUse = errors.New("secret: bad declaration")

// Use is one declared use of a secret: which secret, how it enters a
// sandbox, and the commands and templates it applies to. Only a person's
// configuration declares uses; no tool takes a reference.
type Use struct {
	Ref Ref
	As  Mode
	// Name is the environment variable (env, proxy) or the file's name
	// in the secrets tmpfs (file).
	Name string
	// Bind are the hosts the proxy swaps the placeholder for (proxy).
	Bind []string
	// Commands are the programs (the base name of a simple command's
	// first word) whose command lines get the secret.
	Commands []string
	// Templates are the sandbox templates it applies to; empty means
	// any template.
	Templates []string
	// TLS lets the egress proxy terminate HTTPS to the Bind hosts to
	// swap the value in (proxy; opt-in: the sandbox then trusts a CA of
	// its own, docs/network.md).
	TLS bool
}

// NewUse checks and builds a declaration as configuration states it.
func NewUse(ref, as, name string, bind, commands, templates []string) (Use, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return Use{}, err
	}
	u := Use{Ref: r, As: Mode(as), Name: name, Bind: bind, Commands: commands, Templates: templates}
	switch u.As {
	case AsEnv, AsProxy:
		if !envName(name) {
			return Use{}, fmt.Errorf("%w: %s: as %s needs name: an environment variable name, got %q", ErrUse, r, as, name)
		}
	case AsFile:
		if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
			return Use{}, fmt.Errorf("%w: %s: as file needs name: a file name without /, got %q", ErrUse, r, name)
		}
	case AsStdin:
	default:
		return Use{}, fmt.Errorf("%w: %s: as must be env, file, stdin or proxy, got %q", ErrUse, r, as)
	}
	if (u.As == AsProxy) != (len(bind) > 0) {
		return Use{}, fmt.Errorf("%w: %s: bind: lists the hosts of a proxy use, and only of one", ErrUse, r)
	}
	if len(commands) == 0 {
		return Use{}, fmt.Errorf("%w: %s: commands: names the programs that get it (a use for every command is not declared use)", ErrUse, r)
	}
	return u, nil
}

func envName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, c := range s {
		if (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// Applies reports whether the use is in effect for a command line of
// these programs (as written: a path's base name counts) in a sandbox of
// this template. One matching program is enough: the whole line runs in
// the one sandbox.
func (u Use) Applies(template string, programs []string) bool {
	if len(u.Templates) > 0 && !slices.Contains(u.Templates, template) {
		return false
	}
	for _, p := range programs {
		if slices.Contains(u.Commands, path.Base(p)) {
			return true
		}
	}
	return false
}

// Swap is what a sandbox's egress proxy needs to put a secret back in:
// the placeholder the sandbox holds, the value, and the only hosts the
// value may go to. The holder zeroes Value (Wipe) when the sandbox ends.
type Swap struct {
	Placeholder string
	Value       []byte
	Hosts       []string
	// TLS is the use's TLS (terminate HTTPS to Hosts to swap inside).
	TLS bool
	// Ref names the secret in the proxy's records; never the value.
	Ref Ref
}

// Wipe zeroes the swap's value.
func (s *Swap) Wipe() { wipe(s.Value) }

// PlaceholderPrefix starts every placeholder.
const PlaceholderPrefix = "fluffy-secret-"

// NewPlaceholder returns a fresh placeholder: the prefix and 128 random
// bits in hex.
func NewPlaceholder() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("secret: placeholder: %w", err)
	}
	return PlaceholderPrefix + hex.EncodeToString(b), nil
}
