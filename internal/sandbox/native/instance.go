package native

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native/nsinit"
)

var _ sandbox.Starter = (*Runtime)(nil)

// ErrClosed is returned by Exec on an instance that was closed (by Close,
// or because a command's timeout or cancellation killed it).
var ErrClosed = errors.New("sandbox instance closed")

// serveHook connects a serving run (Runtime.run with a hook) to its
// Instance: run hands over the connection once the init is ready and
// serves until done is closed.
type serveHook struct {
	ready chan *instConn
	done  chan struct{}
}

// instConn is the parent's end of a serving init: the exec socket and the
// status pipe.
type instConn struct {
	// sock is an *os.File so that a send racing with Close never writes
	// to a reused descriptor number.
	sock   *os.File
	status *bufio.Reader
	output int64
}

// instance is a pre-warmed native sandbox.
type instance struct {
	mu     sync.Mutex // one Exec at a time
	conn   *instConn
	hook   *serveHook
	wall   time.Duration
	closed atomic.Bool
	once   sync.Once
	runErr chan error
	err    error
}

// Start implements sandbox.Starter: the sandbox (namespaces, root,
// landlock, seccomp, cgroup) is built once and its init waits for
// commands; each Exec costs a fork in the sandbox, the command and its
// reaping. Between commands every process but the init is killed, so
// nothing a command leaves running survives it. spec.Argv is not run
// (it may be empty); spec.Limits.Wall bounds each Exec, and a command
// that exceeds it, or whose context ends, kills the whole instance.
// Memory and pids limits hold for the instance as a whole.
func (r *Runtime) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	if len(spec.Argv) == 0 {
		spec.Argv = []string{"(instance)"}
	}
	wall := spec.Limits.Wall
	spec.Limits.Wall = 0
	spec.Stdin = nil
	hook := &serveHook{ready: make(chan *instConn), done: make(chan struct{})}
	runErr := make(chan error, 1)
	go func() {
		var st nsinit.Status
		_, err := r.run(context.WithoutCancel(ctx), spec, &nsinit.Tracer{}, &st, hook, nil, nil, false)
		runErr <- err
	}()
	select {
	case c := <-hook.ready:
		return &instance{conn: c, hook: hook, wall: wall, runErr: runErr}, nil
	case err := <-runErr:
		if err == nil {
			err = fmt.Errorf("%w: the sandbox init ended before serving", sandbox.ErrSetup)
		}
		return nil, err
	case <-ctx.Done():
		// run sees no cancellation (WithoutCancel): stop it through the
		// hook once it is ready or has failed.
		go func() {
			select {
			case <-hook.ready:
				close(hook.done)
				<-runErr
			case <-runErr:
			}
		}()
		return nil, ctx.Err()
	}
}

// Exec implements sandbox.Instance.
func (in *instance) Exec(ctx context.Context, argv []string) (res sandbox.Result, err error) {
	if len(argv) == 0 || argv[0] == "" {
		return res, fmt.Errorf("%w: empty command", sandbox.ErrInvalidSpec)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed.Load() {
		return res, ErrClosed
	}
	start := time.Now()
	// The command's stdio: stdin empty, stdout and stderr captured.
	var ours, theirs []*os.File
	defer func() {
		for _, f := range append(ours, theirs...) {
			f.Close()
		}
	}()
	for i := 0; i < 3; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			return res, fmt.Errorf("%w: %w", sandbox.ErrSetup, err)
		}
		if i == 0 {
			ours, theirs = append(ours, w), append(theirs, r)
		} else {
			ours, theirs = append(ours, r), append(theirs, w)
		}
	}
	ours[0].Close()
	req := (&nsinit.ExecRequest{Argv: argv}).AppendBinary(nil)
	rc, err := in.conn.sock.SyscallConn()
	if err != nil {
		return res, fmt.Errorf("%w: %w", ErrClosed, err)
	}
	var sendErr error
	err = rc.Write(func(fd uintptr) bool {
		sendErr = unix.Sendmsg(int(fd), req, unix.UnixRights(int(theirs[0].Fd()), int(theirs[1].Fd()), int(theirs[2].Fd())), nil, 0)
		return true
	})
	if err == nil {
		err = sendErr
	}
	if err != nil {
		in.shutdown()
		return res, fmt.Errorf("%w: send the command to the sandbox: %w", ErrClosed, err)
	}
	for _, f := range theirs {
		f.Close()
	}
	theirs = nil
	stdout, stderr := &capWriter{max: in.conn.output}, &capWriter{max: in.conn.output}
	var wg sync.WaitGroup
	for i, w := range []io.Writer{stdout, stderr} {
		wg.Add(1)
		go func(r io.Reader, w io.Writer) {
			defer wg.Done()
			_, _ = io.Copy(w, r)
		}(ours[i+1], w)
	}
	type line struct {
		b   []byte
		err error
	}
	got := make(chan line, 1)
	go func() {
		b, err := nsinit.ReadFrame(in.conn.status)
		got <- line{b, err}
	}()
	var timer <-chan time.Time
	if in.wall > 0 {
		t := time.NewTimer(in.wall)
		defer t.Stop()
		timer = t.C
	}
	var l line
	select {
	case l = <-got:
	case <-timer:
		in.shutdown()
		wg.Wait()
		res.Killed, res.Hit = sandbox.LimitTime, []sandbox.Limit{sandbox.LimitTime}
		res.ExitCode, res.Signal = -1, int(syscall.SIGKILL)
		res.Duration = time.Since(start)
		res.Stdout, res.Stderr = stdout.bytes(), stderr.bytes()
		return res, nil
	case <-ctx.Done():
		in.shutdown()
		wg.Wait()
		return res, fmt.Errorf("sandbox: %w", ctx.Err())
	}
	wg.Wait()
	res.Duration = time.Since(start)
	res.Stdout, res.Stderr = stdout.bytes(), stderr.bytes()
	var st nsinit.Status
	if l.err == nil {
		st, l.err = nsinit.DecodeStatus(l.b)
	}
	if l.err != nil {
		in.shutdown()
		return res, fmt.Errorf("%w: the sandbox init ended (%v)", ErrClosed, l.err)
	}
	if st.Error != "" {
		if st.Stage == "command" {
			return res, specError(st)
		}
		return res, fmt.Errorf("%w: %s: %s", sandbox.ErrSetup, st.Stage, st.Error)
	}
	res.ExitCode, res.Signal = st.ExitCode, st.Signal
	if st.TmpFull {
		res.Hit = append(res.Hit, sandbox.LimitTmp)
	}
	if stdout.truncated || stderr.truncated {
		res.Hit = append(res.Hit, sandbox.LimitOutput)
	}
	return res, nil
}

// Close implements sandbox.Instance: it kills every process of the
// sandbox (a running Exec returns ErrClosed) and removes what the sandbox
// used on the host. It is safe to call more than once and concurrently.
func (in *instance) Close() error {
	in.shutdown()
	return in.err
}

func (in *instance) shutdown() {
	in.once.Do(func() {
		in.closed.Store(true)
		close(in.hook.done)
		in.err = <-in.runErr
	})
}

// specError is the error of an init whose command could not start: the
// spec's fault, and ErrCommandNotFound too when its program was not on
// the PATH.
func specError(st nsinit.Status) error {
	if st.NotFound {
		return fmt.Errorf("%w: %w", sandbox.ErrInvalidSpec, &notFoundError{msg: st.Error})
	}
	return fmt.Errorf("%w: %s", sandbox.ErrInvalidSpec, st.Error)
}

// notFoundError keeps the init's own words ("x: command not found in the
// sandbox (PATH=...)") and matches sandbox.ErrCommandNotFound.
type notFoundError struct{ msg string }

func (e *notFoundError) Error() string { return e.msg }
func (e *notFoundError) Unwrap() error { return sandbox.ErrCommandNotFound }
