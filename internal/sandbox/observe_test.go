package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeRuntime runs nothing; it records whether the "command" started.
type fakeRuntime struct {
	setupErr error // returned before the gate
	started  atomic.Bool
}

func (f *fakeRuntime) Run(ctx context.Context, spec Spec) (Result, error) {
	if f.setupErr != nil {
		return Result{}, f.setupErr
	}
	f.started.Store(true)
	return Result{ExitCode: 3}, nil
}

type gatedFake struct{ *fakeRuntime }

func (g gatedFake) RunGated(ctx context.Context, spec Spec, gate func() error) (Result, error) {
	if g.setupErr != nil {
		return Result{}, g.setupErr
	}
	if err := gate(); err != nil {
		return Result{}, err
	}
	return g.Run(ctx, spec)
}

type fakeObserver struct {
	startErr   error
	startDelay time.Duration
	recorded   atomic.Bool // Start finished successfully
	startedRun atomic.Bool // the command had started when Start returned
	rt         *fakeRuntime
	ends       atomic.Int32
}

func (o *fakeObserver) Start(ctx context.Context, spec Spec) error {
	time.Sleep(o.startDelay)
	o.startedRun.Store(o.rt.started.Load())
	if o.startErr != nil {
		return o.startErr
	}
	o.recorded.Store(true)
	return nil
}

func (o *fakeObserver) End(ctx context.Context, spec Spec, res Result, runErr error) error {
	o.ends.Add(1)
	return nil
}

func TestObserve(t *testing.T) {
	boom := errors.New("audit log unavailable")
	setup := errors.New("setup failed")
	for _, tc := range []struct {
		name       string
		gated      bool
		startErr   error
		setupErr   error
		wantErr    string
		wantRun    bool
		wantEnds   int32
		startDelay time.Duration
	}{
		{name: "plain", wantRun: true, wantEnds: 1},
		{name: "gated", gated: true, wantRun: true, wantEnds: 1},
		{name: "gated, slow start: the command waits", gated: true, startDelay: 30 * time.Millisecond, wantRun: true, wantEnds: 1},
		{name: "plain, start fails", startErr: boom, wantErr: "refused: recording the execution failed: audit log unavailable"},
		{name: "gated, start fails", gated: true, startErr: boom, wantErr: "refused: recording the execution failed: audit log unavailable"},
		{name: "gated, setup fails first", gated: true, setupErr: setup, wantErr: "setup failed", wantEnds: 1},
		{name: "gated, setup and start fail", gated: true, setupErr: setup, startErr: boom, wantErr: "refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeRuntime{setupErr: tc.setupErr}
			var rt Runtime = f
			if tc.gated {
				rt = gatedFake{f}
			}
			o := &fakeObserver{startErr: tc.startErr, startDelay: tc.startDelay, rt: f}
			res, err := Observe(rt, o).Run(context.Background(), Spec{Argv: []string{"x"}})
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
			if tc.startErr != nil && !errors.Is(err, ErrSetup) {
				t.Errorf("a refusal is not ErrSetup: %v", err)
			}
			if f.started.Load() != tc.wantRun {
				t.Errorf("command started %v, want %v", f.started.Load(), tc.wantRun)
			}
			if o.startedRun.Load() {
				t.Error("the command started before Start returned")
			}
			if tc.wantRun && res.ExitCode != 3 {
				t.Errorf("result %+v", res)
			}
			if o.ends.Load() != tc.wantEnds {
				t.Errorf("End called %d times, want %d", o.ends.Load(), tc.wantEnds)
			}
		})
	}
}

// earlyFake hands its result over early, then "tears down" until End has
// been called, so the test sees End running during the teardown.
type earlyFake struct {
	gatedFake
	o        *earlyObserver
	teardown error
}

func (e earlyFake) RunEarly(ctx context.Context, spec Spec, gate func() error, early func(Result)) (Result, error) {
	if err := gate(); err != nil {
		return Result{}, err
	}
	early(Result{ExitCode: 4, Hit: []Limit{LimitOutput}})
	select {
	case <-e.o.called:
	case <-time.After(10 * time.Second):
		return Result{}, errors.New("End did not run during the teardown")
	}
	return Result{ExitCode: 4, Hit: []Limit{LimitOutput}}, e.teardown
}

type earlyObserver struct {
	called chan struct{}
	endErr error
	got    []Result
}

func (o *earlyObserver) Start(context.Context, Spec) error { return nil }

func (o *earlyObserver) End(_ context.Context, _ Spec, res Result, runErr error) error {
	o.got = append(o.got, res)
	close(o.called)
	return o.endErr
}

// TestObserveEarly: with an EarlyRunner, End records the early result
// while the sandbox is torn down, once; Run returns after both; an End
// failure and a teardown failure are both errors of the run.
func TestObserveEarly(t *testing.T) {
	boom := errors.New("disk full")
	for _, tc := range []struct {
		name             string
		endErr, teardown error
		wantErr          string
	}{
		{name: "ok"},
		{name: "End fails", endErr: boom, wantErr: "recording the end of the execution failed: disk full"},
		{name: "teardown fails", teardown: boom, wantErr: "disk full"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &earlyObserver{called: make(chan struct{}), endErr: tc.endErr}
			rt := earlyFake{gatedFake: gatedFake{&fakeRuntime{}}, o: o, teardown: tc.teardown}
			res, err := Observe(rt, o).Run(context.Background(), Spec{Argv: []string{"x"}})
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
			if len(o.got) != 1 || o.got[0].ExitCode != 4 || len(o.got[0].Hit) != 1 || res.ExitCode != 4 {
				t.Errorf("End got %+v, run returned %+v", o.got, res)
			}
		})
	}
}

// reportFake hands its result over early and then waits, as its
// teardown, for the outcome to have been reported.
type reportFake struct {
	gatedFake
	reportedCh chan struct{}
}

func (r reportFake) RunEarly(ctx context.Context, spec Spec, gate func() error, early func(Result)) (Result, error) {
	if err := gate(); err != nil {
		return Result{}, err
	}
	early(Result{ExitCode: 5})
	select {
	case <-r.reportedCh:
		return Result{ExitCode: 5}, nil
	case <-time.After(10 * time.Second):
		return Result{}, errors.New("the outcome was not reported during the teardown")
	}
}

func TestObserveReported(t *testing.T) {
	boom := errors.New("disk full")
	t.Run("early, during the teardown", func(t *testing.T) {
		o := &earlyObserver{called: make(chan struct{})}
		rt := reportFake{gatedFake: gatedFake{&fakeRuntime{}}, reportedCh: make(chan struct{})}
		var calls atomic.Int32
		res, err := ObserveReported(rt, o, func(res Result, err error) {
			if calls.Add(1) == 1 {
				if res.ExitCode != 5 || err != nil {
					t.Errorf("reported %+v, %v", res, err)
				}
				if len(o.got) != 1 {
					t.Error("reported before End was recorded")
				}
				close(rt.reportedCh)
			}
		}).Run(context.Background(), Spec{Argv: []string{"x"}})
		if err != nil || res.ExitCode != 5 || calls.Load() != 1 {
			t.Fatalf("Run = %+v, %v; reported %d times", res, err, calls.Load())
		}
	})
	t.Run("End fails", func(t *testing.T) {
		o := &earlyObserver{called: make(chan struct{}), endErr: boom}
		rt := reportFake{gatedFake: gatedFake{&fakeRuntime{}}, reportedCh: make(chan struct{})}
		var got error
		_, err := ObserveReported(rt, o, func(_ Result, err error) { got = err; close(rt.reportedCh) }).Run(context.Background(), Spec{Argv: []string{"x"}})
		if got == nil || err == nil || !strings.Contains(got.Error(), "disk full") {
			t.Fatalf("reported %v, Run returned %v: want End's failure in both", got, err)
		}
	})
	for _, tc := range []struct {
		name string
		rt   Runtime
		o    *fakeObserver
		want string
	}{
		{"not early: at the end", gatedFake{&fakeRuntime{}}, &fakeObserver{}, ""},
		{"refused", gatedFake{&fakeRuntime{}}, &fakeObserver{startErr: boom}, "refused"},
		{"setup fails", gatedFake{&fakeRuntime{setupErr: boom}}, &fakeObserver{}, "disk full"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.rt = tc.rt.(gatedFake).fakeRuntime
			var calls int
			var got error
			_, err := ObserveReported(tc.rt, tc.o, func(_ Result, err error) { calls++; got = err }).Run(context.Background(), Spec{Argv: []string{"x"}})
			if calls != 1 || fmt.Sprint(got) != fmt.Sprint(err) {
				t.Fatalf("reported %d times (%v); Run returned %v", calls, got, err)
			}
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}
