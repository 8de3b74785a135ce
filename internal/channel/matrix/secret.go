package matrix

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/regfile"
	"github.com/fluffy-agent/fluffy/internal/secret"
)

// maxSecretFile bounds a token file: a token, not a document.
const maxSecretFile = 4096

// ReadSecret reads an account's access token (or its password, with
// password: true) from token_env or token_file. A file must be a regular
// file no one but its owner may read or write (0600); one trailing
// newline is not part of the secret; a leading ~/ is $HOME. Errors never
// contain the secret.
func ReadSecret(m config.Matrix, lookupEnv func(string) (string, bool)) (string, error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	if m.TokenEnv != "" {
		v, ok := lookupEnv(m.TokenEnv)
		if !ok {
			return "", fmt.Errorf("%w: environment variable %s is not set", ErrSecret, m.TokenEnv)
		}
		if v == "" {
			return "", fmt.Errorf("%w: environment variable %s is empty", ErrSecret, m.TokenEnv)
		}
		return v, nil
	}
	if m.TokenFile == "" {
		return "", fmt.Errorf("%w: neither token_env nor token_file is set", ErrSecret)
	}
	path := m.TokenFile
	if rest, ok := strings.CutPrefix(path, "~/"); ok {
		home, ok := lookupEnv("HOME")
		if !ok || home == "" {
			return "", fmt.Errorf("%w: token_file %s: $HOME is not set", ErrSecret, path)
		}
		path = filepath.Join(home, rest)
	}
	f, err := regfile.Open(path, false)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrSecret, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrSecret, err)
	}
	if p := fi.Mode().Perm(); p&0o077 != 0 {
		return "", fmt.Errorf("%w: %s has mode %04o: others than its owner may read or write it (chmod 600 %s)", ErrSecret, path, p, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrSecret, path, err)
	}
	if len(b) > maxSecretFile {
		return "", fmt.Errorf("%w: %s is longer than %d bytes", ErrSecret, path, maxSecretFile)
	}
	b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
	if len(b) == 0 {
		return "", fmt.Errorf("%w: %s is empty", ErrSecret, path)
	}
	return string(b), nil
}

// resolveToken reads an account's secret: its token reference through the
// secret broker's backends (env: and file: here, the others through
// other, the daemon's), else token_env or token_file (ReadSecret).
func resolveToken(ctx context.Context, m config.Matrix, lookupEnv func(string) (string, bool), other func(context.Context, secret.Ref) ([]byte, error)) (string, error) {
	if m.Token == "" {
		return ReadSecret(m, lookupEnv)
	}
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	v, err := secret.Resolve(ctx, m.Token, lookupEnv, other)
	if err != nil {
		return "", fmt.Errorf("%w: token: %w", ErrSecret, err)
	}
	defer clear(v)
	t := string(bytes.TrimSuffix(bytes.TrimSuffix(v, []byte("\n")), []byte("\r")))
	if t == "" {
		return "", fmt.Errorf("%w: token: %s is empty", ErrSecret, m.Token)
	}
	return t, nil
}
