package webhook

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/regfile"
)

// ErrSecret is matched by every error resolving a hook's secret.
var ErrSecret = errors.New("webhook: secret")

// maxSecretFile bounds a secret file: a key, not a document.
const maxSecretFile = 4096

// minSecret is the shortest secret accepted without a warning.
const minSecret = 16

// ResolveSecret reads the key a secret reference names: "env:VAR" (the
// variable, which must be set and not empty) or "file:PATH" (a regular
// file no one but its owner may read or write; one trailing newline is
// not part of the key). Errors never contain the key.
func ResolveSecret(ref string, lookupEnv func(string) (string, bool)) ([]byte, error) {
	kind, arg, ok := strings.Cut(ref, ":")
	if !ok || arg == "" {
		return nil, fmt.Errorf("%w: want env:VAR or file:PATH, got %q", ErrSecret, redactRef(ref))
	}
	switch kind {
	case "env":
		v, ok := lookupEnv(arg)
		if !ok {
			return nil, fmt.Errorf("%w: environment variable %s is not set", ErrSecret, arg)
		}
		if v == "" {
			return nil, fmt.Errorf("%w: environment variable %s is empty", ErrSecret, arg)
		}
		return []byte(v), nil
	case "file":
		return readSecretFile(arg)
	}
	return nil, fmt.Errorf("%w: want env:VAR or file:PATH, got %q", ErrSecret, redactRef(ref))
}

// redactRef shows a malformed reference only when it looks like one: a
// key pasted where its reference belongs must not reach the logs.
func redactRef(ref string) string {
	if strings.HasPrefix(ref, "env") || strings.HasPrefix(ref, "file") {
		return ref
	}
	return "<" + fmt.Sprint(len(ref)) + " characters, not shown>"
}

func readSecretFile(path string) ([]byte, error) {
	f, err := regfile.Open(path, false)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSecret, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSecret, err)
	}
	if m := fi.Mode().Perm(); m&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %04o: others than its owner may read or write it (chmod 600 %s)", ErrSecret, path, m, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrSecret, path, err)
	}
	if len(b) > maxSecretFile {
		return nil, fmt.Errorf("%w: %s is longer than %d bytes", ErrSecret, path, maxSecretFile)
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: %s is empty", ErrSecret, path)
	}
	return b, nil
}
