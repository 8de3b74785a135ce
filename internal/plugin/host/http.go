package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// SocketDir is where a plugin with run.transport http finds the
// directory it shares with fluffy, and SocketName the socket it listens
// on there (pluginsdk.SocketEnv carries the whole path).
const (
	SocketDir  = "/run/fluffy/mcp"
	SocketName = "mcp.sock"
)

// socketDir is the host side of SocketDir for one start of a server: a
// directory the sandbox may write (to create its socket), inside a
// private one nobody else on the host can list, on a tmpfs (root): what
// the server writes there is memory charged to its sandbox's memory
// cgroup, so bounded by its memory limit, never the host's disk, and
// freed when the directory is removed at the server's end.
type socketDir struct {
	parent, dir string
}

// DefaultSocketRoot is the tmpfs the socket directories are made on
// when Options.SocketRoot is empty.
const DefaultSocketRoot = "/dev/shm"

// ErrNoTmpfs: the socket directory's root is not a tmpfs, where a
// server's writes would land on a disk, unbounded.
var ErrNoTmpfs = errors.New("not a tmpfs")

func newSocketDir(root string) (*socketDir, error) {
	if root == "" {
		root = DefaultSocketRoot
	}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if st.Type != unix.TMPFS_MAGIC {
		return nil, fmt.Errorf("socket directory: %s: %w (the server could fill a disk through it)", root, ErrNoTmpfs)
	}
	parent, err := os.MkdirTemp(root, "fluffy-mcp-")
	if err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	// Traversable, not listable: the sandbox's user (another uid when
	// fluffy runs as root) reaches the inner directory by its name.
	if err := os.Chmod(parent, 0o711); err != nil {
		_ = os.RemoveAll(parent)
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	dir, err := os.MkdirTemp(parent, "s")
	if err == nil {
		err = os.Chmod(dir, 0o777)
	}
	if err != nil {
		_ = os.RemoveAll(parent)
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	return &socketDir{parent: parent, dir: dir}, nil
}

func (d *socketDir) Close() { _ = os.RemoveAll(d.parent) }

// httpSpec sets spec up for a server speaking streamable HTTP: the
// shared directory mounted writable at SocketDir, the socket's path in
// pluginsdk.SocketEnv, standard output into its log like its standard
// error.
func (d *socketDir) httpSpec(spec *sandbox.Spec) {
	spec.Mounts = append(spec.Mounts, sandbox.Mount{Source: d.dir, Target: SocketDir, Writable: true})
	spec.Env = sandbox.SetEnv(spec.Env, "FLUFFY_MCP_SOCKET="+SocketDir+"/"+SocketName)
	spec.Stdin, spec.Stdout, spec.Live = nil, spec.Stderr, true
	if spec.Stdout == nil {
		spec.Stdout = io.Discard
	}
}

// dial connects to the server's socket without following what the
// sandbox put at its path: the sandboxed process owns the directory
// and could leave a symbolic link to a host socket (the container
// engine's, say) there instead. The socket is opened O_PATH|O_NOFOLLOW,
// checked to be a socket, and connected to through /proc/self/fd. It
// waits for the socket to appear until ctx ends.
func (d *socketDir) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	p := filepath.Join(d.dir, SocketName)
	for {
		fd, err := unix.Open(p, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == nil {
			conn, err := dialFD(ctx, fd)
			_ = unix.Close(fd)
			return conn, err
		}
		if !errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("the server's socket: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the server's socket never appeared: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ErrNotSocket: what the server left at its socket's path is not a
// socket.
var ErrNotSocket = errors.New("not a unix socket")

func dialFD(ctx context.Context, fd int) (net.Conn, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("the server's socket: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("the server's socket: %w", ErrNotSocket)
	}
	var nd net.Dialer
	conn, err := nd.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(fd))
	if err != nil {
		return nil, fmt.Errorf("the server's socket: %w", err)
	}
	return conn, nil
}

// httpTransport is the official SDK's streamable HTTP client over the
// server's socket. Each response body is capped at limit bytes: a server
// flooding its answers ends its session rather than fluffy's memory.
func (d *socketDir) httpTransport(limit int64) mcp.Transport {
	rt := &http.Transport{DialContext: d.dial, DisableCompression: true, MaxIdleConns: 4, IdleConnTimeout: 30 * time.Second}
	return &mcp.StreamableClientTransport{
		Endpoint:   "http://plugin/",
		HTTPClient: &http.Client{Transport: cappedBodies{rt: rt, limit: limit}},
		// fluffy asks; it takes no server-initiated messages, so no
		// standing stream, and a server that is gone is restarted by its
		// supervisor, not retried here.
		DisableStandaloneSSE: true,
		MaxRetries:           -1,
		MaxEventSize:         int(limit),
	}
}

// ErrTooLong: a server's answer exceeded what a result may be.
var ErrTooLong = errors.New("plugin answer too long")

type cappedBodies struct {
	rt    http.RoundTripper
	limit int64
}

func (c cappedBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = &cappedBody{rc: resp.Body, left: c.limit}
	return resp, nil
}

type cappedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// An answer of exactly the cap ends there; one byte more is
		// too long.
		var one [1]byte
		if n, err := b.rc.Read(one[:]); n == 0 && err != nil {
			return 0, err
		}
		return 0, ErrTooLong
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *cappedBody) Close() error { return b.rc.Close() }
