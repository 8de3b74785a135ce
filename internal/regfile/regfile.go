// Package regfile opens and reads files that must be regular files, without
// ever blocking on what they turn out to be. A file fluffy reads from a
// repository or a workspace (a project's policy or configuration, a script
// whose content an approval binds, a file the TDD machine instruments) may
// be a FIFO, whose open for reading waits for a writer for ever, a socket,
// or a device, whose reads may never end. Every such read goes through
// here: the open does not wait (O_NONBLOCK), and fstat on the opened
// descriptor, not a stat of the path a moment before, judges the type.
package regfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular is matched (errors.Is) by every *NotRegularError.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is matched by the error of a read past its limit.
var ErrTooLarge = errors.New("file too large")

// NotRegularError names the path and what it is instead.
type NotRegularError struct {
	Path string
	Kind string // "FIFO (named pipe)", "socket", "character device", ...
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is a %s, not a regular file; fluffy reads only regular files", e.Path, e.Kind)
}

// Unwrap makes errors.Is(err, ErrNotRegular) hold.
func (e *NotRegularError) Unwrap() error { return ErrNotRegular }

// Kind names a file mode's type for people.
func Kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO (named pipe)"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	}
	return "file of type " + m.Type().String()
}

// Open opens path for reading if it is a regular file. Symbolic links are
// followed unless noFollow, when a final symlink fails the open (ELOOP).
func Open(path string, noFollow bool) (*os.File, error) {
	flags := os.O_RDONLY | syscall.O_NONBLOCK
	if noFollow {
		flags |= syscall.O_NOFOLLOW
	}
	f, err := os.OpenFile(path, flags, 0)
	return check(path, f, err, os.Lstat)
}

// OpenIn opens name inside root for reading if it is a regular file; root
// keeps the open (symlinks included) inside its directory.
func OpenIn(root *os.Root, name string) (*os.File, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	return check(name, f, err, root.Lstat)
}

// check turns an open's outcome into a regular file or an error naming
// what the path is.
func check(path string, f *os.File, err error, lstat func(string) (fs.FileInfo, error)) (*os.File, error) {
	if errors.Is(err, syscall.ENXIO) {
		// A socket (or a device without its driver) cannot be opened at
		// all: say what it is rather than "no such device or address".
		if fi, serr := lstat(path); serr == nil && !fi.Mode().IsRegular() {
			return nil, &NotRegularError{Path: path, Kind: Kind(fi.Mode())}
		}
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, &NotRegularError{Path: path, Kind: Kind(fi.Mode())}
	}
	return f, nil
}

// ReadFile reads the regular file at path (symlinks followed), at most
// limit bytes; a longer file is an error matching ErrTooLarge.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := Open(path, false)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAll(path, f, limit)
}

// ReadFileIn is ReadFile for a name inside root.
func ReadFileIn(root *os.Root, name string, limit int64) ([]byte, error) {
	f, err := OpenIn(root, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAll(name, f, limit)
}

func readAll(path string, r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %w: larger than %d bytes", path, ErrTooLarge, limit)
	}
	return data, nil
}
