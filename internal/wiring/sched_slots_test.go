package wiring

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sched"
)

// sandboxGauge counts a fake host's sandboxes: the kernel's running and
// built ahead, and the sandbox server's running. Each run blocks until
// the test lets one go.
type sandboxGauge struct {
	limit   int
	release chan struct{}

	mu            sync.Mutex
	kernelRunning int // commands of the kernel in a sandbox
	kernelAhead   int // sandboxes built ahead, not taken
	serverRunning int
	aheadBuilt    int
	// parked counts the runs waiting for the test to let them go; the
	// test takes one off before it lets one go.
	parked     int
	violations []string
}

func (g *sandboxGauge) check(what string) {
	if n := g.kernelRunning + g.kernelAhead; n > g.limit {
		g.violations = append(g.violations, fmt.Sprintf("%s: the kernel has %d sandboxes (%d running, %d built ahead), limit %d", what, n, g.kernelRunning, g.kernelAhead, g.limit))
	}
	if n := g.kernelRunning + g.serverRunning; n > g.limit {
		g.violations = append(g.violations, fmt.Sprintf("%s: %d commands run (%d of the kernel, %d of the sandbox server), limit %d", what, n, g.kernelRunning, g.serverRunning, g.limit))
	}
}

// park waits until the test lets this run go.
func (g *sandboxGauge) park() {
	g.mu.Lock()
	g.parked++
	g.mu.Unlock()
	<-g.release
}

// letOneGo ends one parked run when every stream's run is parked or
// waiting for a slot, and reports whether it did.
func (g *sandboxGauge) letOneGo(waiting, streams int) bool {
	g.mu.Lock()
	p := g.parked
	if p == 0 || p+waiting != streams {
		g.mu.Unlock()
		return false
	}
	g.parked--
	g.mu.Unlock()
	g.release <- struct{}{}
	return true
}

// aheadFake is one session's native runtime: it builds one sandbox ahead,
// which the next run takes.
type aheadFake struct {
	g         *sandboxGauge
	mu        sync.Mutex
	discarded func()
	has       bool
}

func (r *aheadFake) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	return r.RunGated(ctx, spec, nil)
}

func (r *aheadFake) RunGated(_ context.Context, _ sandbox.Spec, _ func() error) (sandbox.Result, error) {
	r.mu.Lock()
	took := r.has
	r.has, r.discarded = false, nil
	r.mu.Unlock()
	g := r.g
	g.mu.Lock()
	if took {
		g.kernelAhead-- // the command runs in it
	}
	g.kernelRunning++
	g.check("a kernel command started")
	g.mu.Unlock()
	g.park()
	g.mu.Lock()
	g.kernelRunning--
	g.mu.Unlock()
	return sandbox.Result{}, nil
}

func (r *aheadFake) PrepareNext(_ sandbox.Spec, discarded func()) error {
	r.discard()
	r.mu.Lock()
	r.has, r.discarded = true, discarded
	r.mu.Unlock()
	g := r.g
	g.mu.Lock()
	g.kernelAhead++
	g.aheadBuilt++
	g.check("a sandbox was built ahead")
	g.mu.Unlock()
	return nil
}

func (r *aheadFake) discard() {
	r.mu.Lock()
	had, d := r.has, r.discarded
	r.has, r.discarded = false, nil
	r.mu.Unlock()
	if !had {
		return
	}
	r.g.mu.Lock()
	r.g.kernelAhead--
	r.g.mu.Unlock()
	if d != nil {
		d()
	}
}

func (r *aheadFake) Close() error { r.discard(); return nil }

// serverFake is the sandbox server's runtime.
type serverFake struct{ g *sandboxGauge }

func (r serverFake) Run(context.Context, sandbox.Spec) (sandbox.Result, error) {
	g := r.g
	g.mu.Lock()
	g.serverRunning++
	g.check("a sandbox server run started")
	g.mu.Unlock()
	g.park()
	g.mu.Lock()
	g.serverRunning--
	g.mu.Unlock()
	return sandbox.Result{}, nil
}

// TestSandboxLimitAcrossRunsAndAhead: with sched.sandboxes 2, three
// sessions' commands (each session keeping its next sandbox built
// ahead) and two streams of sandbox server runs (another process: its
// own HostSlots on the same directory) never have more than two commands
// running at once, and the kernel never more than two sandboxes, running
// or built ahead. The test lets one run end only when every stream is
// running or waiting, so a run that bypassed a limit would be running.
func TestSandboxLimitAcrossRunsAndAhead(t *testing.T) {
	const limit, perStream = 2, 3
	s, err := newScheduler(config.Sched{Sandboxes: limit}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dir := t.TempDir()
	kernelSlots, err := sched.OpenHostSlots(dir, limit)
	if err != nil {
		t.Fatal(err)
	}
	serverSlots, err := sched.OpenHostSlots(dir, limit)
	if err != nil {
		t.Fatal(err)
	}
	g := &sandboxGauge{limit: limit, release: make(chan struct{})}
	ctx := t.Context()
	var streams atomic.Int32
	var wg sync.WaitGroup
	stream := func(run func() error) {
		streams.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer streams.Add(-1)
			for range perStream {
				if err := run(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	var boxes []*nativeBox
	for i := range 3 {
		session := fmt.Sprintf("s%d", i)
		b, err := newNativeBox(slog.New(slog.DiscardHandler), time.Hour, func() (aheadRuntime, error) { return &aheadFake{g: g}, nil })
		if err != nil {
			t.Fatal(err)
		}
		b.warm = warmSlots{s: s, session: session, res: sched.Sandboxes}
		boxes = append(boxes, b)
		rt := scheduledRuntime(b, s, kernelSlots, session, "native")
		stream(func() error { _, err := rt.Run(ctx, sandbox.Spec{Argv: []string{"true"}}); return err })
	}
	server := slotRuntime{AheadRuntime: aheadless{serverFake{g: g}}, slots: serverSlots}
	for range 2 {
		stream(func() error { _, err := server.Run(ctx, sandbox.Spec{Argv: []string{"true"}}); return err })
	}
	for streams.Load() > 0 {
		st := s.Status()
		waiting := kernelSlots.Waiting() + serverSlots.Waiting()
		for _, n := range st.Queued {
			waiting += n
		}
		if !g.letOneGo(waiting, int(streams.Load())) {
			time.Sleep(time.Millisecond) // a stream between two runs
		}
	}
	wg.Wait()
	for _, b := range boxes {
		if err := b.close(); err != nil {
			t.Fatal(err)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, v := range g.violations {
		t.Error(v)
	}
	if g.aheadBuilt == 0 {
		t.Error("no sandbox was built ahead: the test did not mix them in")
	}
	if st := s.Status(); st.Use[string(sched.Sandboxes)] != 0 {
		t.Errorf("slots held at the end: %v", st.Use)
	}
}
