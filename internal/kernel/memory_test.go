package kernel_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/kernel"
)

// Above kernel.memory_high a new session is refused with ErrOverloaded
// and a message that says why; once memory falls, sessions start again.
func TestMemoryBackPressure(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	var mem atomic.Int64
	mem.Store(900 << 20)
	k, err := kernel.Start(ctx, kernel.Options{DB: e.db, Audit: e.audit, DataDir: e.dir, Models: scriptModels(writeScript),
		Admit: kernel.MemoryAdmit(768<<20, mem.Load),
		Tools: func(_ context.Context, env kernel.Env) (agent.Tools, error) { return &writeTools{env: env}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop(ctx, "test")
	p := kernel.CreateParams{Workspace: e.ws, Model: "replay/x", Task: "t"}
	_, err = k.Create(ctx, p)
	if !errors.Is(err, kernel.ErrOverloaded) || !strings.Contains(err.Error(), "kernel.memory_high") {
		t.Fatalf("Create above the threshold: %v", err)
	}
	if all, _ := k.List(ctx, true); len(all) != 0 {
		t.Errorf("a refused session left rows: %v", all)
	}
	mem.Store(100 << 20)
	if _, err := k.Create(ctx, p); err != nil {
		t.Fatalf("Create below the threshold: %v", err)
	}
	if kernel.MemoryAdmit(0, mem.Load) != nil {
		t.Error("memory_high 0 should admit all")
	}
	if m := kernel.ProcessMemory(); m <= 0 {
		t.Errorf("ProcessMemory = %d", m)
	}
}
