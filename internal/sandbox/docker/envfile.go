package docker

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// A command's environment entries that carry a secret's value (their
// bytes are in the spec's arena) never go into the engine's API, whose
// JSON the client builds on the heap. This process writes them, from the
// arena with write(2), into a file on a tmpfs of the container's own
// (envDir, mounted when it starts, mode 1733: the command's user may
// remove its file but list none; the file is its user's, mode 0400), and the command runs under /bin/sh -c envScript: the shell reads
// the file into its environment, removes it and execs the command. When
// the command ends this process overwrites the file with zeros (through
// the descriptor it kept: the name is gone by then) and closes it.

// envDir is the container's tmpfs for environment files.
const envDir = "/.fluffy-env"

// envScript is the wrapper's script: $1 is the file, the rest the
// command. A missing program is reported as the engine reports it, so
// that the caller's ErrCommandNotFound still applies.
const envScript = `f=$1; shift; . "$f"; rm -f "$f"; unset f; ` +
	`command -v "$1" >/dev/null 2>&1 || { printf 'fluffy: %s: executable file not found\n' "$1" >&2; exit 127; }; exec "$@"`

// envShell is the program the wrapper needs in the image.
const envShell = "/bin/sh"

// heldScratch is a Scratch that tells its own strings (*secret.Arena).
type heldScratch interface {
	Holds(s string) bool
}

// splitEnv returns the entries of env whose bytes are in sc (the values)
// and the others.
func splitEnv(env []string, sc sandbox.Scratch) (held, plain []string) {
	h, ok := sc.(heldScratch)
	if !ok {
		return nil, env
	}
	for _, e := range env {
		if h.Holds(e) {
			held = append(held, e)
		} else {
			plain = append(plain, e)
		}
	}
	return held, plain
}

// envContent writes into dst (from sc, len envContentSize(held)) the
// shell's text exporting the entries; dst is on the heap only when sc
// has no memory left.
func envContent(held []string, sc sandbox.Scratch) []byte {
	n := 0
	for _, e := range held {
		n += len("export ='\n") + len(e) + 3*strings.Count(e, "'")
	}
	b := scratchOr(sc, n)[:0]
	for _, e := range held {
		name, value, _ := strings.Cut(e, "=")
		b = append(b, "export "...)
		b = append(b, name...)
		b = append(b, "='"...)
		for i := 0; i < len(value); i++ {
			if value[i] == '\'' {
				b = append(b, `'\''`...)
			} else {
				b = append(b, value[i])
			}
		}
		b = append(b, "'\n"...)
	}
	return b
}

// envFile is a written environment file.
type envFile struct {
	dir, fd int
	name    string
	size    int
}

// path is the file's path in the container.
func (f *envFile) path() string { return envDir + "/" + f.name }

// wipe overwrites the file with zeros, removes it (the wrapper already
// did, unless the command never started) and closes it.
func (f *envFile) wipe() error {
	zero := make([]byte, f.size)
	var errs []error
	if _, err := unix.Pwrite(f.fd, zero, 0); err != nil {
		errs = append(errs, fmt.Errorf("zeroing the environment file: %w", err))
	}
	if err := unix.Unlinkat(f.dir, f.name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("removing the environment file: %w", err))
	}
	errs = append(errs, unix.Close(f.fd), unix.Close(f.dir))
	return errors.Join(errs...)
}

// writeEnvFile writes content into a new file of the container's envDir,
// reached through its init's root (pid, checked against start), owned by
// uid:gid, mode 0400. It checks that the image has the wrapper's shell.
func writeEnvFile(pid int, start string, uid, gid int, content []byte) (*envFile, error) {
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("the container's root: %w", err)
	}
	defer unix.Close(root)
	// The descriptor pins the root: the init it belongs to must still be
	// the container's.
	if st, err := procStart(pid); err != nil || st != start {
		return nil, errors.New("the container's init is gone")
	}
	return writeEnvFileIn(root, uid, gid, content)
}

// writeEnvFileIn is writeEnvFile in the root directory root.
func writeEnvFileIn(root int, uid, gid int, content []byte) (*envFile, error) {
	return writeFileIn(root, uid, gid, "env-", func(fd int) (int, error) {
		for b := content; len(b) > 0; {
			n, err := unix.Write(fd, b)
			if err != nil {
				return 0, err
			}
			b = b[n:]
		}
		return len(content), nil
	})
}

// writeFileIn creates a file named prefix and 24 random hex digits in
// the container's envDir (root is its root directory), owned by uid:gid,
// mode 0400, and fills it with write, which returns how many bytes it
// wrote. It checks that the image has the wrappers' shell.
func writeFileIn(root int, uid, gid int, prefix string, write func(fd int) (int, error)) (*envFile, error) {
	inRoot := func(p string, flags uint64, resolve uint64) (int, error) {
		return unix.Openat2(root, p, &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Resolve: resolve})
	}
	sh, err := inRoot(envShell, unix.O_PATH, unix.RESOLVE_IN_ROOT)
	if err != nil {
		return nil, fmt.Errorf("%w: the image has no %s, which takes a secret's variables from their file (declare the use as: file): %w", errNoShell, envShell, err)
	}
	unix.Close(sh)
	// The command may have written the container's other files: nothing
	// on the way may be a link.
	dir, err := inRoot(envDir, unix.O_PATH|unix.O_DIRECTORY, unix.RESOLVE_IN_ROOT|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
	if err != nil {
		return nil, fmt.Errorf("the container's %s: %w", envDir, err)
	}
	rnd := make([]byte, 12)
	_, _ = rand.Read(rnd)
	f := &envFile{dir: dir, fd: -1, name: prefix + hex.EncodeToString(rnd)}
	fd, err := unix.Openat(dir, f.name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o400)
	if err != nil {
		unix.Close(dir)
		return nil, fmt.Errorf("creating %s in the container: %w", f.name, err)
	}
	f.fd = fd
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return nil, errors.Join(fmt.Errorf("the owner of %s: %w", f.name, err), f.wipe())
	}
	n, err := write(fd)
	f.size = n
	if err != nil {
		return nil, errors.Join(fmt.Errorf("writing %s: %w", f.name, err), f.wipe())
	}
	return f, nil
}

// errNoShell: the image has no envShell, which the wrappers need.
var errNoShell = errors.New("docker: no shell in the image")

// stdinScript is the stdin wrapper's script: $1 is the file the
// command's standard input was written to, the rest the command (as
// envScript's).
const stdinScript = `f=$1; shift; exec <"$f"; rm -f "$f"; unset f; ` +
	`command -v "$1" >/dev/null 2>&1 || { printf 'fluffy: %s: executable file not found\n' "$1" >&2; exit 127; }; exec "$@"`

// maxStdinFile bounds the standard input written to a file rather than
// passed through the exec's stream.
const maxStdinFile = 1 << 20

// writeStdinFile writes a command's whole standard input, when it is in
// memory (a *bytes.Reader of at most maxStdinFile bytes), into a file of
// the container's envDir, from the reader's own memory (a secret's value
// may be in it). An exec's stream passes stdin on while the command
// runs, and Podman, when the command ends before it has passed all of
// it, may lose the command's output (and puts a message of its own in
// stderr); a file is there before the command starts. It returns nil,
// nil for a stdin it leaves to the stream.
func writeStdinFile(pid int, start string, uid, gid int, stdin io.Reader) (*envFile, error) {
	br, ok := stdin.(*bytes.Reader)
	if !ok || br.Len() > maxStdinFile {
		return nil, nil
	}
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("the container's root: %w", err)
	}
	defer unix.Close(root)
	if st, err := procStart(pid); err != nil || st != start {
		return nil, errors.New("the container's init is gone")
	}
	f, err := writeFileIn(root, uid, gid, "stdin-", func(fd int) (int, error) {
		n, err := br.WriteTo(fdWriter(fd))
		return int(n), err
	})
	if errors.Is(err, errNoShell) {
		return nil, nil
	}
	return f, err
}

// fdWriter writes to a descriptor with write(2), from the caller's
// memory.
type fdWriter int

func (w fdWriter) Write(p []byte) (int, error) {
	total := 0
	for len(p) > 0 {
		n, err := unix.Write(int(w), p)
		if err != nil {
			return total, err
		}
		total += n
		p = p[n:]
	}
	return total, nil
}

// parseUser returns the uid and gid of a container's "uid:gid".
func parseUser(s string) (uid, gid int) {
	if _, err := fmt.Sscanf(s, "%d:%d", &uid, &gid); err != nil {
		return 65534, 65534
	}
	return uid, gid
}
