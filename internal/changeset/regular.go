package changeset

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// ErrNotRegular: a file to read is a FIFO, a socket or a device. Reading
// one could block for ever (a FIFO without a writer) or never end
// (/dev/zero), so this package reads regular files only.
var ErrNotRegular = errors.New("changeset: not a regular file")

// NotRegularError names the path (workspace-relative) and what it is.
type NotRegularError struct {
	Path string
	Type string // "FIFO (named pipe)", "socket", "character device", ...
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is a %s, not a regular file; fluffy reads only regular files", e.Path, e.Type)
}

// Unwrap makes errors.Is(err, ErrNotRegular) hold.
func (e *NotRegularError) Unwrap() error { return ErrNotRegular }

// FileType names a stat mode's file type for people.
func FileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFLNK:
		return "symbolic link"
	case unix.S_IFIFO:
		return "FIFO (named pipe)"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	}
	return fmt.Sprintf("file of unknown type %#o", mode&unix.S_IFMT)
}

// openFile opens root/rel read-only, refusing symlinks anywhere and
// anything but a regular file. The path is opened O_PATH first (no open
// of a FIFO, which blocks until a writer comes, and no device driver's
// open); the type is judged by fstat on that descriptor, so it is the
// type of what is read, not of what a path named a moment before; only a
// regular file is then reopened for reading, through the descriptor.
func openFile(root, rel string) (*os.File, error) {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rfd)
	pfd, err := unix.Openat2(rfd, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW, Resolve: resolveFlags})
	if err != nil {
		return nil, mapResolveErr(root, rel, err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: path.Join(root, rel), Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFLNK:
		return nil, fmt.Errorf("%w: %s", ErrSymlink, rel)
	default:
		return nil, &NotRegularError{Path: rel, Type: FileType(st.Mode)}
	}
	// O_NONBLOCK as well: should the inode not be what fstat said, the
	// open still cannot wait.
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", pfd), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ENOENT) {
		// No /proc: open the path again, without waiting, and keep it
		// only if it is the inode judged above.
		fd, err = unix.Openat2(rfd, rel, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK, Resolve: resolveFlags})
		if err != nil {
			return nil, mapResolveErr(root, rel, err)
		}
		var st2 unix.Stat_t
		if err := unix.Fstat(fd, &st2); err != nil || st2.Dev != st.Dev || st2.Ino != st.Ino {
			unix.Close(fd)
			return nil, &fs.PathError{Op: "open", Path: path.Join(root, rel), Err: errors.New("the file changed while it was opened")}
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path.Join(root, rel), Err: err}
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: path.Join(root, rel), Err: err}
	}
	return os.NewFile(uintptr(fd), path.Join(root, rel)), nil
}
