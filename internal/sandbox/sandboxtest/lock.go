package sandboxtest

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// The suite compares the host's mount table before and after every case,
// so it must not run while another test process (go test runs packages in
// parallel) adds or removes host mounts: a container backend's tests do
// (the engine mounts a container's root filesystem and network namespace
// on the host; the docker backend mounts the workspace overlay there).
// Such tests and the suite serialize on one file lock. Within a process
// the lock is counted, so a test holding it may run the suite.
var hostLock struct {
	sync.Mutex
	n int
	f *os.File
}

// HostLockPath is the lock file shared by every test process of the
// module, whatever their TMPDIR.
func HostLockPath() string { return "/tmp/fluffy-sandboxtest-host.lock" }

// openLock opens the lock file, creating it when missing. An existing
// file of another user is opened read-only without O_CREAT, which the
// kernel's protected_regular refuses in sticky directories.
func openLock() (*os.File, error) {
	for range 3 {
		f, err := os.OpenFile(HostLockPath(), os.O_RDONLY, 0)
		if err == nil || !os.IsNotExist(err) {
			return f, err
		}
		f, err = os.OpenFile(HostLockPath(), os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			_ = f.Chmod(0o644) // whatever the umask
			return f, nil
		}
		if !os.IsExist(err) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%s keeps changing", HostLockPath())
}

// AcquireHostLock takes the host lock (waiting for other processes) and
// returns its release.
func AcquireHostLock() (func(), error) {
	hostLock.Lock()
	defer hostLock.Unlock()
	if hostLock.n == 0 {
		f, err := openLock()
		if err != nil {
			return nil, fmt.Errorf("sandboxtest: host lock: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("sandboxtest: host lock: %w", err)
		}
		hostLock.f = f
	}
	hostLock.n++
	var once sync.Once
	return func() {
		once.Do(func() {
			hostLock.Lock()
			defer hostLock.Unlock()
			hostLock.n--
			if hostLock.n == 0 {
				hostLock.f.Close()
				hostLock.f = nil
			}
		})
	}, nil
}

// LockHost holds the host lock until t ends.
func LockHost(t testing.TB) {
	t.Helper()
	release, err := AcquireHostLock()
	if err != nil {
		// Serializing is a courtesy to parallel packages; the checks
		// still run. Say why they may be noisy.
		t.Logf("running without the host lock: %v", err)
		return
	}
	t.Cleanup(release)
}
