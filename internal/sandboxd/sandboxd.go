// Package sandboxd owns the per-user sandbox server and its tiny client:
// the transport, the lifecycle and the security of handing a `fluffy
// sandbox run` command line from a short-lived `fluffy` process to a
// long-lived `fluffy-core sandbox serve` process of the same user, which
// runs it (with its SQLite audit log already open and sandboxes already
// started) and replies with the exit status. Bazel's and Gradle's servers
// work the same way.
//
// # Client and server
//
// The client side (SocketPath, Call, Forwardable and the wire format) uses
// only the standard library's small packages and golang.org/x/sys/unix, so
// that the `fluffy` binary starts in about the time of a Go hello-world.
// The server side (Serve) lives in server*.go. Neither imports net: both
// drive their sockets through os.File's poller (RawConn), which gives
// deadlines and wake-up on Close without the net package.
//
// # Transport
//
// A unix SOCK_SEQPACKET socket, one frame per message (wire.go documents
// the frames). The client's first frame carries the protocol version, its
// command line, environment and working directory, with the client's
// standard output and error passed as file descriptors (SCM_RIGHTS). The
// server pulls standard input from the client a chunk at a time (a
// "want" frame answered by one read of the client's fd 0), so that a
// handler that never reads Incoming.Stdin never makes the client read its
// terminal, and the server never holds the client's terminal itself.
// The client forwards SIGINT, SIGTERM and SIGHUP as frames; the server
// ends the call with a reply frame (exit code, or "hand over": run it
// yourself).
//
// # Delivery
//
// The server sends a "started" frame just before it calls the handler,
// and calls it only if that frame was sent. A client that sees no
// "started" frame knows the command was not run, and may run it itself
// (Call returns ErrUnavailable); once "started" was seen, any failure is a
// plain error and the command must not be run again.
//
// # Security
//
// The socket lives in a private directory of the user (SocketPath
// refuses a directory that is a symlink, not owned by the user or open to
// group or others). The server accepts only peers with its own uid
// (SO_PEERCRED), and the client talks only to a server with its own uid.
// Beyond the uid, the server serves only a peer of its own identity
// (umask, ids, groups, capabilities, no_new_privs, seccomp mode and
// filters, resource limits, cgroups, namespaces: see
// identity), so that a process that confined itself cannot have commands
// run outside its confinement; the socket's name hashes that identity, so
// such a process gets a server of its own. A server started by a client
// gets a clean environment (ServerEnv) and none of its stray descriptors:
// the client's secrets reach a call's handler in that call's Request only,
// never the long-lived process.
package sandboxd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
)

// Request is what a client forwards.
type Request struct {
	Args    []string // the command line after the program name, e.g. ["sandbox", "run", "--", "/bin/true"]
	Environ []string
	Cwd     string
}

// Incoming is one request being served: the Request, with the client's
// standard streams. (The brief named it Call, which the client function
// Call already is: Go allows one of them.)
type Incoming struct {
	Request
	Stdin  io.Reader // the client's standard input, pumped over the socket; EOF when the client's ends
	Stdout *os.File  // the client's fd 1, received with SCM_RIGHTS
	Stderr *os.File  // the client's fd 2
	// Signals receives every signal the client forwards (SIGINT, SIGTERM,
	// SIGHUP), the first one included, so that a handler can tell a second
	// Ctrl-C from the first. It holds up to 8 signals; more are dropped
	// while it is full (the call's context is cancelled by the first one
	// anyway).
	Signals <-chan syscall.Signal

	// early sends the reply before the handler returns (Incoming.Reply);
	// nil outside a server.
	early func(Reply)
}

// Reply sends r to the client now, before the handler returns: the client
// exits with it while the handler finishes its own clean-up (the sandbox
// server replies once the command's status is recorded, and tears the
// sandbox down after). From then on the handler must not use Stdin,
// Stdout or Stderr, which are closed, and the client's departure no longer
// cancels ctx. The handler's return value is then ignored; later calls do
// nothing.
func (c *Incoming) Reply(r Reply) {
	if c.early != nil {
		c.early(r)
	}
}

// Reply ends a call: the client exits with Code, or, with HandOver, runs the
// command itself (the lead's client then execs fluffy-core in-process).
type Reply struct {
	Code     int
	HandOver bool
}

// Handler serves one call. ctx is cancelled when the client forwards SIGINT,
// SIGTERM or SIGHUP, or disconnects (killed). Calls may run concurrently.
// context.Cause(ctx) then says why: a *SignalError for a forwarded
// signal, ErrDisconnected for a client gone, ErrShutdown when the server
// stopped waiting for calls in flight.
type Handler func(ctx context.Context, c *Incoming) Reply

var (
	// ErrUnavailable: the request was not delivered (no server, none could
	// be started, a server of another protocol version, a server that did
	// not take the call). Nothing was run; the caller may run the command
	// itself. Call wraps it with the reason.
	ErrUnavailable = errors.New("sandboxd: sandbox server unavailable")
	// ErrRunning: Serve found another live server holding the socket's
	// lock.
	ErrRunning = errors.New("sandboxd: a sandbox server is already running on this socket")
	// ErrDisconnected is the cause of a call's context when its client
	// went away (killed, or its connection closed) before the reply.
	ErrDisconnected = errors.New("sandboxd: client disconnected")
	// ErrShutdown is the cause of a call's context when the server is
	// stopping and the call outlived the grace period.
	ErrShutdown = errors.New("sandboxd: server shutting down")
)

// SignalError is the cause of a call's context (context.Cause) when the
// client forwarded a signal.
type SignalError struct {
	Signal syscall.Signal
}

func (e *SignalError) Error() string {
	return "sandboxd: client forwarded " + SignalName(e.Signal)
}

// SignalName is the usual name of the signals a call is interrupted by
// (SIGINT, SIGTERM, SIGHUP, SIGQUIT); others by number and description.
func SignalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	}
	return fmt.Sprintf("signal %d (%s)", int(s), s)
}

// Forwardable says whether the command line (after the program name) is one
// the server runs: `sandbox run` after any of fluffy's global flags (--home,
// --config, --set, --log-level take a value, also as --flag=value; --debug
// is a bool), nothing else. Help of the group, other commands, unknown
// global flags and shorthands are not forwarded.
func Forwardable(args []string) bool {
	var words []string
	for i := 0; i < len(args) && len(words) < 2; i++ {
		arg := args[i]
		switch {
		case arg == "--debug" || strings.HasPrefix(arg, "--debug="):
		case arg == "--home" || arg == "--config" || arg == "--set" || arg == "--log-level":
			i++ // the flag's value
		case strings.HasPrefix(arg, "--home=") || strings.HasPrefix(arg, "--config=") ||
			strings.HasPrefix(arg, "--set=") || strings.HasPrefix(arg, "--log-level="):
		case strings.HasPrefix(arg, "-"):
			return false
		default:
			words = append(words, arg)
		}
	}
	return len(words) == 2 && words[0] == "sandbox" && words[1] == "run"
}
