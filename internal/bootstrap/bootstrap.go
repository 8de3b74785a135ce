// Package bootstrap is fluffy's L0: what the CLI does before anything else
// to reach a healthy kernel. It finds the kernel's socket, starts the
// kernel when nobody answers, health-checks it with a ping under a
// deadline, and turns every way start-up can fail into one *StartError saying what failed, why
// and how to fix it.
//
// The package stays under 500 lines of code (a test counts them): it is
// the part that must work when everything else is broken. How a kernel
// process is started is a parameter (Launcher), so tests start a real
// child process that serves the ipc protocol.
package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fluffy-agent/fluffy/internal/buildinfo"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/lockfile"
	"github.com/fluffy-agent/fluffy/internal/logfile"
)

// Launcher starts a kernel process that will listen on the socket the
// caller configured it for. Launch returns once the process has started,
// not when it answers; the process must outlive the caller's context.
type Launcher interface {
	Launch(ctx context.Context) (Process, error)
}

// Process is a launched kernel.
type Process interface {
	Pid() int
	// Exited is closed when the process has ended.
	Exited() <-chan struct{}
	// ExitErr describes how it ended (exit status, last lines of its
	// output); valid once Exited is closed.
	ExitErr() error
	// Kill stops the process at once.
	Kill() error
}

// Options configure Connect. Socket and Launcher are
// required.
type Options struct {
	Socket   string   // required: where the kernel listens
	Launcher Launcher // required: how to start one
	// Name is this client's name in the hello ("fluffy/1.0").
	Name string
	// StartTimeout bounds a launch until the first pong (5s).
	StartTimeout time.Duration
	// PingTimeout bounds connect + hello + ping of a health check (1s).
	PingTimeout time.Duration
	// Logger receives what the bootstrap does; nil discards.
	Logger *slog.Logger
	// CheckRuntime, when set, detects the sandbox runtime before a kernel
	// is launched; its error (a *StartError saying what to fix) stops
	// the launch.
	CheckRuntime func(ctx context.Context) error
}

func (o *Options) defaults() error {
	if o.Socket == "" || o.Launcher == nil {
		return errors.New("bootstrap: Options.Socket and Options.Launcher are required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.StartTimeout, 5*time.Second)
	def(&o.PingTimeout, time.Second)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// StartError is a start-up failure as the user sees it: what failed, the
// cause, and what to do.
type StartError struct {
	What string
	Err  error
	Fix  string
}

func (e *StartError) Error() string {
	msg := e.What
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Fix != "" {
		msg += "\nfix: " + e.Fix
	}
	return msg
}

func (e *StartError) Unwrap() error { return e.Err }

// Connect returns a client of a healthy kernel (one that answered a ping
// within PingTimeout), starting one when none answers. A socket file left
// by a dead kernel is removed. Concurrent Connects (several fluffy
// commands at once) start at most one kernel: they serialise on a lock
// file beside the socket.
func Connect(ctx context.Context, o Options) (*ipc.Client, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	c, err := dialSettled(ctx, o)
	if err == nil {
		return c, nil
	}
	if se := explain(o, err); se != nil {
		return nil, se
	}
	unlock, err := lock(ctx, o.Socket+".lock")
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Another command may have started a kernel while we waited.
	if c, err = dialSettled(ctx, o); err == nil {
		return c, nil
	}
	if se := explain(o, err); se != nil {
		return nil, se
	}
	if err := ipc.RemoveStale(o.Socket); err != nil {
		return nil, explain(o, err)
	}
	if o.CheckRuntime != nil {
		if err := o.CheckRuntime(ctx); err != nil {
			return nil, err
		}
	}
	p, err := o.Launcher.Launch(ctx)
	if err != nil {
		return nil, &StartError{What: "cannot start the kernel", Err: err,
			Fix: "check that the fluffy binary is still in place and executable, then run the command again"}
	}
	o.Logger.Debug("bootstrap: kernel launched", "pid", p.Pid(), "socket", o.Socket)
	return waitReady(ctx, o, p)
}

// waitReady polls the socket of a freshly launched kernel until it answers,
// exits, or StartTimeout passes. A kernel that accepts connections but
// does not answer a ping yet is still starting (it verifies the audit log
// before it serves): it gets the whole StartTimeout.
func waitReady(ctx context.Context, o Options, p Process) (*ipc.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()
	delay := 2 * time.Millisecond
	what, fix := "did not answer", "the machine may be overloaded; run the command again, or 'fluffy kernel' in a terminal to watch it start"
	for {
		c, err := dialHealthy(ctx, o)
		if err == nil {
			return c, nil
		}
		if errors.Is(err, context.DeadlineExceeded) {
			what = "accepts connections but does not answer"
			fix = fmt.Sprintf("it is stuck, or still checking a large audit log: raise kernel.start_timeout, or stop it (kill %d) and run the command again", p.Pid())
		} else if !notListening(err) && !dying(err) {
			if se := explain(o, err); se != nil {
				_ = p.Kill()
				return nil, se
			}
		}
		select {
		case <-p.Exited():
			// It may have lost a race to a kernel started by hand.
			if c, err := dialHealthy(ctx, o); err == nil {
				return c, nil
			}
			return nil, &StartError{What: "the kernel exited at start", Err: p.ExitErr(),
				Fix: "the lines above say why; run 'fluffy kernel' in a terminal to see it fail in the foreground"}
		case <-ctx.Done():
			_ = p.Kill()
			return nil, &StartError{What: fmt.Sprintf("the kernel (pid %d) %s within %v", p.Pid(), what, o.StartTimeout),
				Err: context.Cause(ctx), Fix: fix}
		case <-time.After(delay):
			delay = min(2*delay, 10*time.Millisecond)
		}
	}
}

// Running returns a client of the running kernel, or nil and no error when
// none runs (no socket, or a stale one); it never starts a kernel.
func Running(ctx context.Context, o Options) (*ipc.Client, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	c, err := dialSettled(ctx, o)
	if err != nil && (notListening(err) || dying(err)) {
		return nil, nil
	}
	if err != nil {
		return nil, explain(o, err)
	}
	return c, nil
}

// dialSettled is dialHealthy, retried for up to a second while the
// kernel at the other end is still dying (a kill -9 leaves its socket
// accepting for a moment, then resetting).
func dialSettled(ctx context.Context, o Options) (*ipc.Client, error) {
	for i := 0; ; i++ {
		c, err := dialHealthy(ctx, o)
		if err == nil || !dying(err) || i == 100 {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// dying reports errors of a kernel going away under our feet.
func dying(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) ||
		errors.Is(err, ipc.ErrTruncated) || errors.Is(err, ipc.ErrClosed) || errors.Is(err, ipc.ErrShuttingDown)
}

// dialHealthy connects, exchanges hellos and pings, all within
// PingTimeout.
func dialHealthy(ctx context.Context, o Options) (*ipc.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, o.PingTimeout)
	defer cancel()
	c, err := ipc.Dial(ctx, o.Socket, ipc.ClientOptions{Name: o.Name})
	if err != nil {
		return nil, err
	}
	if err := c.Ping(ctx); err != nil {
		c.Close()
		return nil, &ipc.DialError{Path: o.Socket, Cred: c.ServerCred(), Err: err}
	}
	return c, nil
}

// notListening reports errors that mean "no kernel yet": launch one.
func notListening(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED)
}

// explain returns the StartError for a dial failure that launching a kernel
// cannot fix, or nil when launching is the answer.
func explain(o Options, err error) *StartError {
	if notListening(err) {
		return nil
	}
	var de *ipc.DialError
	pid := 0
	if errors.As(err, &de) {
		pid = int(de.Cred.PID)
	}
	switch {
	case errors.Is(err, ipc.ErrVersionMismatch):
		return &StartError{What: "the running kernel speaks another protocol version", Err: err,
			Fix: fmt.Sprintf("a kernel from another fluffy version is running: stop it (kill %d) and run the command again", pid)}
	case errors.Is(err, ipc.ErrPermissionDenied):
		return &StartError{What: "the kernel socket belongs to another user", Err: err,
			Fix: fmt.Sprintf("%s is not yours: point FLUFFY_HOME or XDG_RUNTIME_DIR at a directory you own", o.Socket)}
	case errors.Is(err, fs.ErrPermission):
		return &StartError{What: "no permission to reach the kernel socket", Err: err,
			Fix: fmt.Sprintf("check the owner and mode of %s and its directory (ls -la %s): both must be yours; point FLUFFY_HOME or XDG_RUNTIME_DIR elsewhere otherwise", o.Socket, filepath.Dir(o.Socket))}
	case errors.Is(err, context.DeadlineExceeded) && pid != 0:
		return &StartError{What: fmt.Sprintf("the kernel (pid %d) accepts connections but does not answer within %v", pid, o.PingTimeout), Err: err,
			Fix: fmt.Sprintf("it is stuck: stop it (kill %d) and run the command again", pid)}
	case errors.Is(err, syscall.ENOTSOCK), errors.Is(err, ipc.ErrNotSocket):
		return &StartError{What: "something that is not a socket is in the kernel socket's place", Err: err,
			Fix: fmt.Sprintf("look at %s and remove it if it is not yours to keep", o.Socket)}
	case errors.Is(err, ipc.ErrInUse):
		return &StartError{What: "a process holds the kernel socket but does not answer as a kernel", Err: err,
			Fix: fmt.Sprintf("find it with 'ss -xlp | grep %s' and stop it", filepath.Base(o.Socket))}
	}
	return &StartError{What: "cannot reach the kernel", Err: err,
		Fix: fmt.Sprintf("run 'fluffy doctor'; if %s is left over from an old kernel, remove it", o.Socket)}
}

// lock takes an exclusive lock on path (created 0600 in a directory
// EnsureDir made private), waiting as long as ctx allows.
func lock(ctx context.Context, path string) (func(), error) {
	if err := ipc.EnsureDir(filepath.Dir(path)); err != nil {
		return nil, explain(Options{Socket: path}, err)
	}
	l, err := lockfile.Acquire(ctx, path, lockfile.Options{Wait: lockfile.Forever})
	var busy *lockfile.BusyError
	switch {
	case errors.As(err, &busy):
		return nil, &StartError{What: "another fluffy command is starting the kernel and has not finished", Err: busy.Err,
			Fix: "wait a moment and run the command again"}
	case err != nil:
		return nil, explain(Options{Socket: path}, err)
	}
	return func() { l.Release() }, nil
}

// ForConfig returns the Options for the kernel serving cfg's data
// directory: the socket ipc.SocketPath chooses (runtimeDir is
// $XDG_RUNTIME_DIR), kernel.start_timeout, and launcher, whose output goes
// to the data directory's logs/kernel.log unless it names a log.
func ForConfig(cfg *config.Config, runtimeDir string, launcher Exec) Options {
	if launcher.Log == "" {
		launcher.Log = datadir.Dir{Root: cfg.Home}.Path(datadir.Logs, KernelLog)
	}
	if launcher.LogRotation.MaxSize == 0 {
		launcher.LogRotation = LogRotation(cfg.Log)
	}
	return Options{Socket: ipc.SocketPath(runtimeDir, cfg.Home), Launcher: launcher,
		StartTimeout: time.Duration(cfg.Kernel.StartTimeout), Name: "fluffy/" + buildinfo.Get().Version}
}

// KernelLog is the kernel's log file in the data directory's logs/.
const KernelLog = "kernel.log"

// LogRotation is the rotation log.max_size, log.keep and log.compress
// configure (a max_size of 0, never rotate, is a negative MaxSize).
func LogRotation(c config.Log) logfile.Options {
	o := logfile.Options{MaxSize: int64(c.MaxSize), Keep: c.Keep, Compress: c.Compress}
	if o.MaxSize == 0 {
		o.MaxSize = -1
	}
	return o
}
