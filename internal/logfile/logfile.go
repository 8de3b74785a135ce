// Package logfile owns fluffy's own log files in the data directory's
// logs/ (the kernel's, fluffy serve's): size-based rotation by rename to
// numbered generations (NAME.1 the newest), optionally gzipped, and a
// write failure (a full disk) reported once instead of failing the
// daemon that logs.
package logfile

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"sync"
)

// Options say when a File rotates and whom it tells of failures.
type Options struct {
	// MaxSize is the size in bytes past which a write first rotates the
	// file; 0 never rotates.
	MaxSize int64
	// Keep is how many rotated generations are kept (NAME.1 to
	// NAME.Keep); 0 keeps none (rotation empties the log).
	Keep int
	// Compress gzips each rotated generation (NAME.1.gz ...).
	Compress bool
	// OnError is told of a failed write or rotation, once until a write
	// succeeds again; nil: failures are dropped silently. It must not
	// write to the File (it is called with the File's lock held).
	OnError func(error)
	// OnResume, when set, is called after the first write that succeeds
	// after a failure, with the number of writes lost meanwhile and the
	// first failure: a log whose only reader is itself (the kernel's)
	// says so in itself. It may write to the File (the File's lock is not
	// held), but it runs inside its caller's Write: a logger whose handler
	// made that Write holds its own lock, so OnResume needs a handler of
	// its own.
	OnResume func(lost int, err error)
	// Opened, when set, is called with each file the log opens (at Open
	// and after every rotation) before the previous one is closed: the
	// kernel points its standard error at it.
	Opened func(*os.File) error
}

// File is a log file that rotates itself. Its Write never fails: a
// daemon's log line that cannot be written is lost and reported once
// (Options.OnError), and the daemon goes on. Safe for concurrent use.
type File struct {
	path string
	o    Options

	mu      sync.Mutex // guards the fields below
	f       *os.File
	size    int64
	failing error // the failure reported; nil once a write succeeded since
	lost    int   // writes lost since failing was set
}

var _ io.WriteCloser = (*File)(nil)

// Open opens (creating, 0600) the log at path for appending.
func Open(path string, o Options) (*File, error) {
	l := &File{path: path, o: o}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

// open (re)opens the log at its path, closing the previous file after
// Options.Opened has seen the new one.
func (l *File) open() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("logfile: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("logfile: %w", err)
	}
	if l.o.Opened != nil {
		if err := l.o.Opened(f); err != nil {
			f.Close()
			return fmt.Errorf("logfile: %s: %w", l.path, err)
		}
	}
	if l.f != nil {
		l.f.Close()
	}
	l.f, l.size = f, st.Size()
	return nil
}

// Write appends p, rotating first when p would take the file past
// MaxSize. It always reports len(p) written and no error.
func (l *File) Write(p []byte) (int, error) {
	if lost, err := l.write(p); lost > 0 && l.o.OnResume != nil {
		l.o.OnResume(lost, err)
	}
	return len(p), nil
}

// write writes p; after the first success following a failure it returns
// the writes lost and the failure.
func (l *File) write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.o.MaxSize > 0 && l.size > 0 && l.size+int64(len(p)) > l.o.MaxSize {
		if err := Rotate(l.path, l.o.Keep, l.o.Compress); err != nil {
			l.fail(err) // go on in the file as it is
		} else if err := l.open(); err != nil {
			l.fail(err) // the old descriptor stays: its lines land in NAME.1
		}
	}
	n, err := l.f.Write(p)
	l.size += int64(n)
	if err != nil {
		l.fail(fmt.Errorf("logfile: %w", err))
		l.lost++
		return 0, nil
	}
	lost, failed := l.lost, l.failing
	l.failing, l.lost = nil, 0
	return lost, failed
}

// fail reports err unless a failure is reported already.
func (l *File) fail(err error) {
	if l.failing != nil {
		return
	}
	l.failing = err
	if l.o.OnError != nil {
		l.o.OnError(err)
	}
}

// Close closes the file.
func (l *File) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}

// Rotate moves the log at path to path.1 (gzipped to path.1.gz when
// compress), shifting older generations up by one and removing those past
// keep. A missing log is not an error. The generations move by rename, so
// a process still writing the old file keeps writing path.1.
func Rotate(path string, keep int, compress bool) error {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if keep <= 0 {
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("logfile: rotate: %w", err)
		}
		return nil
	}
	gen := func(i int) string { return path + "." + strconv.Itoa(i) }
	for _, suffix := range []string{"", ".gz"} {
		if err := os.Remove(gen(keep) + suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("logfile: rotate: %w", err)
		}
		for i := keep - 1; i >= 1; i-- {
			if err := os.Rename(gen(i)+suffix, gen(i+1)+suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("logfile: rotate: %w", err)
			}
		}
	}
	if err := os.Rename(path, gen(1)); err != nil {
		return fmt.Errorf("logfile: rotate: %w", err)
	}
	if compress {
		if err := gzipFile(gen(1)); err != nil {
			return err
		}
	}
	return nil
}

// gzipFile replaces name by name.gz; on failure name stays as it was.
func gzipFile(name string) (err error) {
	in, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("logfile: compress: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(name+".gz", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("logfile: compress: %w", err)
	}
	defer func() {
		if err != nil {
			out.Close()
			os.Remove(name + ".gz")
		}
	}()
	zw := gzip.NewWriter(out)
	if _, err := io.Copy(zw, in); err != nil {
		return fmt.Errorf("logfile: compress: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("logfile: compress: %w", err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("logfile: compress: %w", err)
	}
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("logfile: compress: %w", err)
	}
	return nil
}
