package sandboxd

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// staleAfter is how long the files of a server nobody runs (another
// build's: the socket's name hashes the fluffy-core binary) stay in the
// socket directory before a server removes them: long enough to read the
// log of a server that just failed.
const staleAfter = 24 * time.Hour

// sweepStale removes, in the directory of the socket ours, the socket,
// lock and log files of other servers that no process holds the lock of
// and that nothing touched for olderThan. It returns the sockets whose
// files it removed. The lock is held (flock) while its files go, so a
// server of that name starting at that moment finds it taken and its
// client tries again, with fresh files.
func sweepStale(ours string, olderThan time.Duration, now time.Time) ([]string, error) {
	dir := filepath.Dir(ours)
	locks, err := filepath.Glob(filepath.Join(dir, "sandbox-*.sock.lock"))
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, lockPath := range locks {
		sock := strings.TrimSuffix(lockPath, ".lock")
		if sock == ours || touchedSince(now.Add(-olderThan), sock, lockPath, sock+".log") {
			continue
		}
		f, err := os.OpenFile(lockPath, os.O_RDWR|unix.O_NOFOLLOW, 0)
		if err != nil {
			continue // gone meanwhile, or not a plain file of ours
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			f.Close() // a server holds it
			continue
		}
		for _, p := range []string{sock, sock + ".log", lockPath} {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		f.Close()
		removed = append(removed, sock)
	}
	return removed, errors.Join(errs...)
}

// touchedSince reports whether any of paths changed after t.
func touchedSince(t time.Time, paths ...string) bool {
	for _, p := range paths {
		if fi, err := os.Lstat(p); err == nil && fi.ModTime().After(t) {
			return true
		}
	}
	return false
}
