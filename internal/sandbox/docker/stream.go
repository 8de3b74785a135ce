package docker

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"

	"github.com/moby/moby/client"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// A command's output comes from the engine as one stream of frames (the
// exec is started without a terminal): an 8-byte header, the stream's
// number in its first byte and the payload's length big-endian in its
// last four, then the payload. The stream is read here, not by the
// engine client's stdcopy and bufio: with a sandbox.Spec.Scratch the
// bytes go from the socket into the arena and from there into the
// capture, and no heap buffer ever holds them (docs/secrets.md).

// Stream numbers of the engine's multiplexed stream.
const (
	streamStdin  = 0
	streamStdout = 1
	streamStderr = 2
	streamSystem = 3
)

// frameHeader is the size of a frame's header.
const frameHeader = 8

// demuxBuffer is the size of the buffer the stream is read into.
const demuxBuffer = 32 << 10

// maxSystemMessage bounds the engine's own error message (stream 3)
// kept for the error.
const maxSystemMessage = 4 << 10

// ErrStream is matched by the error of a stream that is not the engine's
// frames (an unknown stream number) or that ends inside a frame.
var ErrStream = errors.New("docker: malformed exec stream")

// demux reads the engine's frames from src through buf (at least
// frameHeader bytes) and writes the payloads of stdout (and stdin, as
// stdcopy does) to stdout, of stderr to stderr. It returns nil at the end
// of src on a frame's boundary, the engine's message for a system frame,
// and an error wrapping ErrStream for what is not a stream of frames.
// A payload is written in the pieces it was read in; buf is zeroed
// before demux returns.
func demux(src io.Reader, buf []byte, stdout, stderr io.Writer) error {
	if len(buf) < frameHeader {
		return fmt.Errorf("%w: a buffer of %d bytes", ErrStream, len(buf))
	}
	defer clear(buf)
	var (
		r, w   int       // buf[r:w] is read and not yet consumed
		left   uint32    // what is left of the current frame's payload
		dst    io.Writer // where the current frame goes (nil: stream 3)
		sysMsg []byte
	)
	for {
		for r < w {
			if left == 0 {
				if w-r < frameHeader {
					break
				}
				h := buf[r : r+frameHeader]
				switch h[0] {
				case streamStdin, streamStdout:
					dst = stdout
				case streamStderr:
					dst = stderr
				case streamSystem:
					dst = nil
				default:
					return fmt.Errorf("%w: stream %d", ErrStream, h[0])
				}
				left = binary.BigEndian.Uint32(h[4:])
				r += frameHeader
				continue
			}
			n := min(int(left), w-r)
			p := buf[r : r+n]
			if dst != nil {
				_, _ = dst.Write(p)
			} else if room := maxSystemMessage - len(sysMsg); room > 0 {
				sysMsg = append(sysMsg, p[:min(room, n)]...)
			}
			r += n
			left -= uint32(n)
		}
		if left == 0 && r == w && sysMsg != nil {
			return fmt.Errorf("docker: the engine: %s", bytes.TrimSpace(sysMsg))
		}
		// Keep an incomplete header at the start of buf.
		if r == w {
			r, w = 0, 0
		} else if r > 0 {
			w = copy(buf, buf[r:w])
			r = 0
		}
		n, err := src.Read(buf[w:])
		w += n
		if n > 0 {
			continue
		}
		if err == nil {
			continue
		}
		if err == io.EOF {
			if left != 0 || w != r {
				return fmt.Errorf("%w: it ends inside a frame", ErrStream)
			}
			return nil
		}
		return err
	}
}

// startExec starts the created exec id and returns the connection its
// stream comes on (and its standard input goes to). On a local socket it
// speaks the request itself and reads the answer's header a byte at a
// time, so that nothing of the command's output, which may follow the
// header at once, lands in the engine client's bufio buffer on the heap.
// Other hosts go through the client (their first bytes may pass through
// its buffer).
func (r *Runtime) startExec(ctx context.Context, id string) (net.Conn, error) {
	if !strings.HasPrefix(r.cli.DaemonHost(), "unix://") {
		att, err := r.cli.ExecAttach(ctx, id, client.ExecAttachOptions{})
		if err != nil {
			return nil, err
		}
		return att.Conn, nil
	}
	conn, err := r.cli.Dialer()(ctx)
	if err != nil {
		return nil, fmt.Errorf("connecting to the engine: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	err = upgradeExec(conn, r.cli.ClientVersion(), id)
	if !stop() {
		// The context ended during the request: the connection is closed.
		return nil, fmt.Errorf("starting the exec: %w", ctx.Err())
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// maxAnswerHeader bounds the header of the engine's answer to an exec
// start.
const maxAnswerHeader = 16 << 10

// upgradeExec sends the exec start request for id on conn and reads the
// answer's header, not a byte past it. version is the API version ("" for
// the engine's own).
func upgradeExec(conn io.ReadWriter, version, id string) error {
	const body = `{"Detach":false,"Tty":false}`
	p := "/exec/" + id + "/start"
	if version != "" {
		p = "/v" + strings.TrimPrefix(version, "v") + p
	}
	req := "POST " + p + " HTTP/1.1\r\nHost: api.moby.localhost\r\nUser-Agent: fluffy\r\n" +
		"Content-Type: application/json\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	if _, err := io.WriteString(conn, req); err != nil {
		return fmt.Errorf("starting the exec: %w", err)
	}
	head, err := readHeader(conn)
	if err != nil {
		return fmt.Errorf("starting the exec: %w", err)
	}
	status, _, _ := strings.Cut(head, "\r\n")
	f := strings.Fields(status)
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/") {
		return fmt.Errorf("starting the exec: %w: the answer %q", ErrStream, status)
	}
	switch f[1] {
	case "101", "200":
		return nil
	}
	// An error's body is the engine's JSON message.
	msg := make([]byte, 1024)
	n, _ := io.ReadAtLeast(conn, msg, 1)
	return fmt.Errorf("starting the exec: %s: %s", strings.Join(f[1:], " "), bytes.TrimSpace(msg[:n]))
}

// readHeader reads an HTTP answer's header up to and with its empty line,
// a byte at a time, and returns it.
func readHeader(conn io.Reader) (string, error) {
	var b []byte
	one := make([]byte, 1)
	for !bytes.HasSuffix(b, []byte("\r\n\r\n")) {
		if len(b) >= maxAnswerHeader {
			return "", fmt.Errorf("%w: an answer header over %d bytes", ErrStream, maxAnswerHeader)
		}
		if _, err := io.ReadFull(conn, one); err != nil {
			return "", fmt.Errorf("reading the answer: %w", err)
		}
		b = append(b, one[0])
	}
	return string(b), nil
}

// capped keeps the first max bytes written and passes them on live. With
// fixed (Limits.Output bytes of the spec's Scratch, and room for the
// truncation marker) it keeps them there, outside the heap.
type capped struct {
	buf   bytes.Buffer
	fixed []byte
	n     int
	max   int64
	cut   bool
	live  io.Writer
	// all: everything goes to live, nothing is kept (Spec.Live).
	all bool
}

// newCapped captures up to max bytes, in sc's memory when it has some.
func newCapped(max int64, live io.Writer, all bool, sc sandbox.Scratch) *capped {
	c := &capped{max: max, live: live, all: all}
	if sc != nil && !all && max > 0 && max < 1<<30 {
		c.fixed = sc.Bytes(int(max) + len(sandbox.TruncationMarker))
	}
	return c
}

func (c *capped) len() int {
	if c.fixed != nil {
		return c.n
	}
	return c.buf.Len()
}

func (c *capped) Write(p []byte) (int, error) {
	n := len(p)
	if c.all {
		if c.live != nil {
			_, _ = c.live.Write(p)
		}
		return n, nil
	}
	room := c.max - int64(c.len())
	if int64(len(p)) > room {
		p = p[:max(room, 0)]
		c.cut = true
	}
	if c.fixed != nil {
		c.n += copy(c.fixed[c.n:c.max], p)
	} else {
		c.buf.Write(p)
	}
	if c.live != nil && len(p) > 0 {
		_, _ = c.live.Write(p)
	}
	return n, nil
}

func (c *capped) String() string {
	if c.fixed != nil {
		return string(c.fixed[:c.n])
	}
	return c.buf.String()
}

// bytes is the captured output (with the truncation marker when it was
// cut): the fixed buffer itself, which its Scratch's holder zeroes, or a
// copy on the heap.
func (c *capped) bytes() []byte {
	var b []byte
	if c.fixed != nil {
		b = c.fixed[:c.n]
	} else {
		b = bytes.Clone(c.buf.Bytes())
	}
	if c.cut {
		b = append(b, sandbox.TruncationMarker...)
	}
	if b == nil {
		b = []byte{}
	}
	return b
}

// scratchOr returns n bytes of sc, or of the heap when it has none.
func scratchOr(sc sandbox.Scratch, n int) []byte {
	if sc != nil {
		if b := sc.Bytes(n); b != nil {
			return b
		}
	}
	return make([]byte, n)
}

// notFound reports whether a failed exec's output is the engine's (or
// the env wrapper's) report of a missing program.
func notFound(b []byte) bool {
	return bytes.Contains(b, []byte("executable file not found")) ||
		bytes.Contains(b, []byte("no such file or directory")) && bytes.Contains(b, []byte("OCI runtime exec failed"))
}
