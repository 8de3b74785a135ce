package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/fluffy-agent/fluffy/internal/ipc"
)

// Supervisor keeps a healthy kernel connection: it pings the kernel every
// HealthInterval, and when the connection ends or a ping goes unanswered
// for PingTimeout it kills a hung kernel and restarts one with backoff.
// After MaxRestarts failed attempts in a row it gives up; Err then says
// why.
type Supervisor struct {
	o      Options
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex // guards the fields below
	client   *ipc.Client
	ready    chan struct{} // closed while client is usable
	restarts int
	err      error
}

// Supervise connects (starting the kernel if needed) and watches it until
// Close.
func Supervise(ctx context.Context, o Options) (*Supervisor, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	c, err := Connect(ctx, o)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Supervisor{o: o, cancel: cancel, done: make(chan struct{}), client: c, ready: make(chan struct{})}
	close(s.ready)
	go s.watch(ctx)
	return s, nil
}

// Client waits until a healthy connection exists and returns it. It fails
// when ctx ends or the supervisor has given up.
func (s *Supervisor) Client(ctx context.Context) (*ipc.Client, error) {
	for {
		s.mu.Lock()
		c, ready, err := s.client, s.ready, s.err
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-ready:
			return c, nil
		case <-s.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Restarts returns how many times the kernel was restarted.
func (s *Supervisor) Restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts
}

// Err returns why the supervisor stopped (nil while it runs).
func (s *Supervisor) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close stops supervising and closes the connection; the kernel keeps
// running until its own idle timeout.
func (s *Supervisor) Close() error {
	s.cancel()
	<-s.done
	return nil
}

func (s *Supervisor) watch(ctx context.Context) {
	defer close(s.done)
	s.mu.Lock()
	c := s.client
	s.mu.Unlock()
	started, delay := time.Now(), s.o.Backoff
	tick := time.NewTicker(s.o.HealthInterval)
	defer tick.Stop()
	for {
		var cause error
		select {
		case <-ctx.Done():
			c.Close()
			s.fail(ErrClosed)
			return
		case <-c.Done():
			cause = c.Err()
		case <-tick.C:
			pctx, cancel := context.WithTimeout(ctx, s.o.PingTimeout)
			err := c.Ping(pctx)
			cancel()
			if err == nil || ctx.Err() != nil {
				continue
			}
			cause = fmt.Errorf("health check: %w", err)
			if errors.Is(err, context.DeadlineExceeded) {
				// Hung: the socket's peer credentials name a process of
				// our own uid, so this kills nothing of anyone else's.
				_ = syscall.Kill(int(c.ServerCred().PID), syscall.SIGKILL)
			}
			c.Close()
		}
		s.mu.Lock()
		s.ready = make(chan struct{})
		s.mu.Unlock()
		if time.Since(started) > 10*time.Second {
			delay = s.o.Backoff // it ran a while: not a crash loop
		}
		s.o.Logger.Warn("bootstrap: kernel connection lost, restarting", "cause", cause, "backoff", delay)
		next, err := s.restart(ctx, &delay)
		if err != nil {
			s.fail(err)
			return
		}
		c, started = next, time.Now()
		s.mu.Lock()
		s.client = c
		s.restarts++
		close(s.ready)
		s.mu.Unlock()
		if s.o.OnRestart != nil {
			s.o.OnRestart(int(c.ServerCred().PID), cause)
		}
	}
}

// ErrClosed is the supervisor's error after Close.
var ErrClosed = errors.New("bootstrap: supervisor closed")

func (s *Supervisor) restart(ctx context.Context, delay *time.Duration) (*ipc.Client, error) {
	var last error
	for range s.o.MaxRestarts {
		select {
		case <-ctx.Done():
			return nil, ErrClosed
		case <-time.After(*delay):
		}
		*delay = min(2**delay, s.o.MaxBackoff)
		c, err := Connect(ctx, s.o)
		if err == nil {
			return c, nil
		}
		last = err
		s.o.Logger.Warn("bootstrap: kernel restart failed", "err", err)
	}
	return nil, &StartError{What: fmt.Sprintf("the kernel keeps failing (%d restarts in a row did not bring it back)", s.o.MaxRestarts),
		Err: last, Fix: "see the kernel's log in the data directory's logs/ and run 'fluffy kernel' in a terminal to watch it start"}
}

func (s *Supervisor) fail(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}
