package host

import (
	"os"
	"path/filepath"
	"sync"
)

// logFile is a plugin's log: the server's standard error appended to
// path, moved to path.1 (replacing the older one) once it holds max
// bytes, so a server that floods its stderr costs at most twice max of
// disk. Errors drop the output: a log must never stop the server.
type logFile struct {
	path string
	max  int64

	mu   sync.Mutex // guards the fields below
	f    *os.File
	size int64
}

func newLogFile(path string, max int64) *logFile {
	return &logFile{path: path, max: max}
}

func (l *logFile) Write(p []byte) (int, error) {
	if l == nil {
		return len(p), nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil && !l.open() {
		return len(p), nil
	}
	if l.size+int64(len(p)) > l.max {
		_ = l.f.Close()
		l.f = nil
		_ = os.Rename(l.path, l.path+".1")
		if !l.open() {
			return len(p), nil
		}
	}
	q := p
	if int64(len(q)) > l.max {
		q = q[len(q)-int(l.max):]
	}
	n, _ := l.f.Write(q)
	l.size += int64(n)
	return len(p), nil
}

func (l *logFile) open() bool {
	if err := os.MkdirAll(filepath.Dir(l.path), 0o700); err != nil {
		return false
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return false
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return false
	}
	l.f, l.size = f, fi.Size()
	return true
}

// Close closes the file; later writes open it again.
func (l *logFile) Close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
