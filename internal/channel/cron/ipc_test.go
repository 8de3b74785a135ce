package cron

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/ipc"
)

// cron.run through a real IPC server and client, as `fluffy cron run`
// reaches the daemon.
func TestRunOverIPC(t *testing.T) {
	clk := newClock(time.Date(2026, 6, 1, 10, 30, 0, 0, time.UTC))
	c := newCron(t, Config{Jobs: []config.CronJob{{Name: "daily", Schedule: "0 9 * * *", Prompt: "p"}}}, t.TempDir(), clk)
	mux := ipc.NewMux()
	if err := c.Register(mux); err != nil {
		t.Fatal(err)
	}
	srv, err := ipc.NewServer(ipc.ServerOptions{Mux: mux})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "k.sock")
	ln, err := ipc.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(t.Context()) })
	cl, err := ipc.Dial(t.Context(), sock, ipc.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	var run Run
	err = cl.Call(t.Context(), MethodRun, RunParams{Name: "daily"}, &run)
	if ie := (*ipc.Error)(nil); !errors.As(err, &ie) || ie.Code != ipc.CodeUnavailable {
		t.Errorf("before Run: %v, want %s", err, ipc.CodeUnavailable)
	}
	s := &sink{}
	started(t, c, s)
	clk.next(t)
	if err := cl.Call(t.Context(), MethodRun, RunParams{Name: "nope"}, &run); err == nil {
		t.Error("an unknown job ran")
	} else if ie := (*ipc.Error)(nil); !errors.As(err, &ie) || ie.Code != CodeUnknownJob {
		t.Errorf("unknown job: %v, want %s", err, CodeUnknownJob)
	}
	if err := cl.Call(t.Context(), MethodRun, RunParams{Name: "daily"}, &run); err != nil {
		t.Fatal(err)
	}
	if run.Job != "daily" || run.Outcome != Delivered || run.Trigger != TriggerManual || len(s.delivered()) != 1 {
		t.Errorf("run = %+v", run)
	}
}

func TestConfigFrom(t *testing.T) {
	l := &config.Loaded{Config: config.Default(nil), Origins: map[string]config.Origin{"serve.cron": {File: "/c.yaml"}}}
	if got := ConfigFrom(l, "/home/u"); got.Workspace != "/home/u/.fluffy/workspace" || got.File != "/c.yaml" || got.Heartbeat != 30*time.Minute {
		t.Errorf("defaults: %+v", got)
	}
	l.Config.Serve.Workspace = "~/ws"
	if got := ConfigFrom(l, "/home/u"); got.Workspace != "/home/u/ws" {
		t.Errorf("~/ws: %q", got.Workspace)
	}
}
