package kernel_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/kernel"
)

const stuckScript = `{"turn": {"text": "reading", "tool_calls": [{"id": "c1", "name": "stuck", "args": {}}]}}` + "\n"

// startStuck is a kernel whose one tool blocks until release is closed;
// ready receives when a run has reached it.
func startStuck(t *testing.T, e *env, ready chan struct{}, release <-chan struct{}) *kernel.Kernel {
	t.Helper()
	k, err := kernel.Start(context.Background(), kernel.Options{DB: e.db, Audit: e.audit, DataDir: e.dir,
		Models: scriptModels(stuckScript),
		Tools: func(context.Context, kernel.Env) (agent.Tools, error) {
			return &stuckTools{ready: ready, release: release}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// An idle kernel quiesces: the handover wins and no run starts after it;
// a second handover finds it stopping.
func TestQuiesceIdleHandsOver(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	// Released from the start: a run that wrongly starts ends.
	ready, release := make(chan struct{}, 1), make(chan struct{})
	close(release)
	k := startStuck(t, e, ready, release)
	defer k.Stop(ctx, "test")
	info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "read", Model: "replay/test"})
	if err != nil {
		t.Fatal(err)
	}
	if b := k.Busy(); len(b) != 0 {
		t.Errorf("Busy of an idle kernel = %q", b)
	}
	if err := k.Quiesce(nil); err != nil {
		t.Fatalf("Quiesce of an idle kernel = %v", err)
	}
	if _, err := k.Run(ctx, info.ID, nil); !errors.Is(err, kernel.ErrStopping) {
		t.Errorf("Run after the handover = %v, want ErrStopping", err)
	}
	if err := k.Quiesce(nil); !errors.Is(err, kernel.ErrStopping) {
		t.Errorf("second Quiesce = %v, want ErrStopping", err)
	}
	if got, _ := k.Get(ctx, info.ID); got.Status != kernel.StatusPaused {
		t.Errorf("session after the handover = %q, want paused (resumable)", got.Status)
	}
}

// A kernel running a turn refuses the handover naming the session, and
// what the daemon adds (approvals, clients) is in the reasons too; it
// keeps running and hands over once the turn has ended.
func TestQuiesceBusyRefusesWithTheReason(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	ready, release := make(chan struct{}, 1), make(chan struct{})
	k := startStuck(t, e, ready, release)
	defer k.Stop(ctx, "test")
	info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "read", Model: "replay/test"})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() {
		_, err := k.Run(ctx, info.ID, nil)
		ran <- err
	}()
	<-ready
	err = k.Quiesce([]string{"approval a1 of session " + info.ID + " is waiting for an answer"})
	var be *kernel.BusyError
	if !errors.As(err, &be) {
		t.Fatalf("Quiesce while a turn runs = %v, want a *BusyError", err)
	}
	want := []string{"session " + info.ID + " is running a turn", "approval a1 of session " + info.ID + " is waiting for an answer"}
	if !slices.Equal(be.Reasons, want) {
		t.Errorf("reasons = %q, want %q", be.Reasons, want)
	}
	if got := kernel.BusyReasons(be.Wire()); !slices.Equal(got, want) {
		t.Errorf("reasons over the wire = %q, want %q", got, want)
	}
	if b := k.Busy(); !slices.Equal(b, want[:1]) {
		t.Errorf("Busy = %q, want %q", b, want[:1])
	}
	close(release)
	if err := <-ran; err != nil {
		t.Fatalf("the turn refused the handover must not be cut: %v", err)
	}
	if err := k.Quiesce(nil); err != nil {
		t.Errorf("Quiesce once the turn ended = %v", err)
	}
}

// A turn starting and a handover at the same moment: exactly one wins.
// Either the handover is refused (the turn had registered and runs to its
// tool), or the turn is refused with ErrStopping before it starts.
func TestQuiesceRacesARunExactlyOneWins(t *testing.T) {
	ctx := context.Background()
	for i := range 10 {
		e := openEnv(t, t.TempDir(), newWorkspace(t))
		ready, release := make(chan struct{}, 1), make(chan struct{})
		k := startStuck(t, e, ready, release)
		info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "read", Model: "replay/test"})
		if err != nil {
			t.Fatal(err)
		}
		ran := make(chan error, 1)
		start := make(chan struct{})
		go func() {
			<-start
			_, err := k.Run(ctx, info.ID, nil)
			ran <- err
		}()
		close(start)
		qerr := k.Quiesce(nil)
		var be *kernel.BusyError
		switch {
		case qerr == nil:
			select {
			case err := <-ran:
				if !errors.Is(err, kernel.ErrStopping) {
					t.Errorf("try %d: the handover won, but the run = %v, want ErrStopping", i, err)
				}
			case <-ready:
				t.Errorf("try %d: a tool ran after the handover", i)
				close(release)
				<-ran
			}
		case errors.As(qerr, &be):
			<-ready // the run that won reaches its tool
			close(release)
			if err := <-ran; err != nil {
				t.Errorf("try %d: the run won, but ended %v", i, err)
			}
		default:
			t.Fatalf("try %d: Quiesce = %v", i, qerr)
		}
		select {
		case <-release:
		default:
			close(release)
		}
		_ = k.Stop(ctx, "test")
		e.close()
	}
}
