package secret

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// Scheme starts every secret reference.
const Scheme = "secret://"

// ErrRef is matched by every error parsing a reference.
var ErrRef = errors.New("secret: bad reference")

// Ref names a secret without holding it: a backend and a path within it.
type Ref struct {
	// Backend is the backend's name: env, file, age, bitwarden.
	Backend string
	// Path is the name within the backend: a variable, an absolute file
	// path, an age entry, or "item/field" for Bitwarden.
	Path string
}

// String is the canonical form, secret://BACKEND/PATH.
func (r Ref) String() string {
	if r.Backend == "file" {
		if strings.HasPrefix(r.Path, "/") {
			return Scheme + "file" + r.Path
		}
		return "file:" + r.Path // relative, or ~/: only the alias writes it
	}
	return Scheme + r.Backend + "/" + r.Path
}

// ParseRef reads a reference: secret://BACKEND/PATH, or one of the
// aliases env:VAR (secret://env/VAR) and file:PATH (secret://file/PATH).
// In secret://file/PATH the path is absolute (secret://file/etc/x and
// secret://file//etc/x are one file) or starts with ~/ (the person's
// home); file:PATH may also be relative (to the working directory of the
// process resolving it), as it always was. Errors never show
// a string that does not look like a reference: a value pasted where its
// reference belongs must not reach a log.
func ParseRef(s string) (Ref, error) {
	var r Ref
	switch {
	case strings.HasPrefix(s, Scheme):
		rest := strings.TrimPrefix(s, Scheme)
		b, p, ok := strings.Cut(rest, "/")
		if !ok {
			return Ref{}, fmt.Errorf("%w: %q has no path after the backend", ErrRef, shown(s))
		}
		r = Ref{Backend: b, Path: p}
	case strings.HasPrefix(s, "env:"):
		r = Ref{Backend: "env", Path: strings.TrimPrefix(s, "env:")}
	case strings.HasPrefix(s, "file:"):
		r = Ref{Backend: "file", Path: strings.TrimPrefix(s, "file:")}
	default:
		return Ref{}, fmt.Errorf("%w: want secret://BACKEND/PATH, env:VAR or file:PATH, got %s", ErrRef, shown(s))
	}
	if !validName(r.Backend) {
		return Ref{}, fmt.Errorf("%w: %s: backend %q is not a name (a-z, 0-9, -)", ErrRef, shown(s), r.Backend)
	}
	if r.Path == "" {
		return Ref{}, fmt.Errorf("%w: %s: empty path", ErrRef, shown(s))
	}
	for _, c := range r.Path {
		if c < 0x20 || c == 0x7f {
			return Ref{}, fmt.Errorf("%w: %s: control character in the path", ErrRef, shown(s))
		}
	}
	if r.Backend == "file" {
		switch {
		case strings.HasPrefix(r.Path, "~/"):
		case strings.HasPrefix(s, "file:") && !strings.HasPrefix(r.Path, "/"):
			r.Path = path.Clean(r.Path)
		default:
			r.Path = path.Clean("/" + r.Path)
		}
	}
	return r, nil
}

// MustParseRef is ParseRef for references written in code and tests.
func MustParseRef(s string) Ref {
	r, err := ParseRef(s)
	if err != nil {
		panic(err)
	}
	return r
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// shown quotes s when it looks like a reference, and otherwise says only
// how long it is.
func shown(s string) string {
	if strings.HasPrefix(s, Scheme) || strings.HasPrefix(s, "env:") || strings.HasPrefix(s, "file:") {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("<%d characters, not shown>", len(s))
}
