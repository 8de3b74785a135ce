package secret

import (
	"context"
	"io"
	"path/filepath"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/regfile"
)

// MaxFileSecret bounds a secret file: a key or a token, not a document.
const MaxFileSecret = 4096

// File resolves secret://file/PATH: a regular file no one but its owner
// may read or write (mode 0600 or stricter is enforced). One trailing
// newline is not part of the value.
type File struct {
	// Home expands a path starting with ~/; "" leaves such paths
	// unresolvable.
	Home string
}

var (
	_ Backend = File{}
	_ Stater  = File{}
)

// Lookup reads the file.
func (f File) Lookup(_ context.Context, p string) ([]byte, error) {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if f.Home == "" {
			return nil, errorf(ErrUnreachable, "%s: no home directory to expand ~", p)
		}
		p = filepath.Join(f.Home, rest)
	}
	return ReadFile(p)
}

// State: files are read when asked.
func (File) State(context.Context) (State, string) {
	return Unlocked, "files readable by their owner only"
}

// ReadFile reads a secret file with the File backend's rules. It reads
// into one buffer of its own, so zeroing the result leaves no copy.
func ReadFile(p string) ([]byte, error) {
	fh, err := regfile.Open(p, false)
	if err != nil {
		return nil, errorf(ErrNotFound, "%w", err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, errorf(ErrUnreachable, "%w", err)
	}
	if m := fi.Mode().Perm(); m&0o077 != 0 {
		return nil, errorf(ErrUnreachable, "%s has mode %04o: others than its owner may read or write it (chmod 600 %s)", p, m, p)
	}
	buf := make([]byte, MaxFileSecret+1)
	n, err := io.ReadFull(fh, buf)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		wipe(buf)
		return nil, errorf(ErrUnreachable, "%s: %w", p, err)
	}
	if n > MaxFileSecret {
		wipe(buf)
		return nil, errorf(ErrUnreachable, "%s is longer than %d bytes", p, MaxFileSecret)
	}
	v := buf[:n]
	if len(v) > 0 && v[len(v)-1] == '\n' {
		v = v[:len(v)-1]
	}
	if len(v) > 0 && v[len(v)-1] == '\r' {
		v = v[:len(v)-1]
	}
	if len(v) == 0 {
		return nil, errorf(ErrNotFound, "%s is empty", p)
	}
	out := make([]byte, len(v))
	copy(out, v)
	wipe(buf)
	return out, nil
}
