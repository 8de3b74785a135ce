package wiring

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
)

// TestHandover: an on-demand kernel with a client following a session
// refuses the handover naming that client (status shows it as busy); once
// the client has gone it hands over, stops and records why in
// kernel.stop. A kernel started by hand hands over to nobody.
func TestHandover(t *testing.T) {
	dir := t.TempDir()
	u := testUser(t, dir, dir)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	sock, done, c := startTestKernel(t, ctx, u, kernel.DaemonOptions{})
	err := c.Call(ctx, kernel.MethodHandover, kernel.HandoverParams{PID: 1}, nil)
	if !errors.Is(err, &ipc.Error{Code: ipc.CodeUnavailable}) || !strings.Contains(err.Error(), "runs as kernel") {
		t.Errorf("handover of a kernel started by hand = %v, want unavailable", err)
	}
	if err := c.Call(ctx, kernel.MethodShutdown, nil, nil); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	go func() { done <- runKernel(ctx, u, kernel.DaemonOptions{Oneshot: true}) }()
	c = dialKernel(t, sock, done)
	defer c.Close()
	// The caller's own subscription does not keep the kernel busy.
	if err := c.Subscribe(ctx, "approval.*"); err != nil {
		t.Fatal(err)
	}
	follower := dialKernel(t, sock, done)
	if err := follower.Subscribe(ctx, "session.s000000000001"); err != nil {
		t.Fatal(err)
	}
	var st kernel.DaemonStatus
	if err := c.Call(ctx, kernel.MethodStatus, nil, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode != kernel.ModeOnDemand || len(st.Busy) != 1 || !strings.Contains(st.Busy[0], "is following session.s000000000001") {
		t.Errorf("status: mode %q, busy %q; want on-demand, busy with the follower", st.Mode, st.Busy)
	}
	err = c.Call(ctx, kernel.MethodHandover, kernel.HandoverParams{PID: 1}, nil)
	if r := kernel.BusyReasons(err); !errors.Is(err, kernel.ErrKernelBusy) || !slices.Equal(r, st.Busy) {
		t.Fatalf("handover with a follower = %v (reasons %q), want busy naming it", err, r)
	}
	follower.Close()
	<-follower.Done()
	// The server notices the follower's end on its own schedule; the
	// handover is refused until then.
	var res kernel.HandoverResult
	for {
		err = c.Call(ctx, kernel.MethodHandover, kernel.HandoverParams{PID: 4242}, &res)
		if !errors.Is(err, kernel.ErrKernelBusy) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil || res.PID != os.Getpid() {
		t.Fatalf("handover of an idle on-demand kernel = %+v, %v", res, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the kernel after the handover: %v", err)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket outlives the kernel: %v", err)
	}
	d, err := u.DataDir()
	if err != nil {
		t.Fatal(err)
	}
	al, err := audit.Open(ctx, audit.Options{Path: d.Path(datadir.AuditDB), KeyDir: d.Path(datadir.Keys)})
	if err != nil {
		t.Fatal(err)
	}
	defer al.Close()
	var causes []string
	if err := al.Reader().Entries(ctx, audit.Filter{Kind: audit.KindKernelStop}, func(en audit.Entry) error {
		var p audit.KernelStop
		b, _ := json.Marshal(en.Payload)
		if err := json.Unmarshal(b, &p); err != nil {
			return err
		}
		causes = append(causes, p.Cause)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(causes) == 0 || causes[len(causes)-1] != "handed over to fluffy serve (pid 4242)" {
		t.Errorf("kernel.stop causes = %q, want the last to name the handover", causes)
	}
}
