package kernel_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
)

// An outside agent's call runs through the session's tools into its
// change set; the session has no model to run, and a session that has
// one takes no calls from outside.
func TestExternalCall(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	k := start(t, e, scriptModels(writeScript), nil)

	info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "mcp client", Model: kernel.ModelExternal})
	if err != nil {
		t.Fatal(err)
	}
	defs, err := k.Tools(ctx, info.ID)
	if err != nil || len(defs) == 0 || defs[0].Name != "write" {
		t.Fatalf("tools: %v %v", defs, err)
	}
	res, err := k.CallTool(ctx, info.ID, llm.ToolCall{ID: "c1", Name: "write", Args: json.RawMessage(`{"path": "a.txt", "content": "x\n"}`)})
	if err != nil || res.IsError || res.Content != "wrote a.txt" {
		t.Fatalf("call: %+v %v", res, err)
	}
	if _, err := os.Stat(filepath.Join(e.ws, "a.txt")); !os.IsNotExist(err) {
		t.Fatalf("the workspace changed before apply: %v", err)
	}
	if _, ch, err := k.Diff(ctx, info.ID); err != nil || len(ch) != 1 {
		t.Fatalf("diff: %v %v", ch, err)
	}
	if _, err := k.Run(ctx, info.ID, nil); !errors.Is(err, kernel.ErrExternal) {
		t.Fatalf("run of an external session: %v, want ErrExternal", err)
	}
	own, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "own loop", Model: "replay/test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.CallTool(ctx, own.ID, llm.ToolCall{ID: "c2", Name: "write", Args: json.RawMessage(`{}`)}); !errors.Is(err, kernel.ErrNotExternal) {
		t.Fatalf("call into a session with its own model: %v, want ErrNotExternal", err)
	}
	if _, err := k.Close(ctx, kernel.CloseParams{ID: info.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.CallTool(ctx, info.ID, llm.ToolCall{ID: "c3", Name: "write", Args: json.RawMessage(`{}`)}); !errors.Is(err, kernel.ErrClosed) {
		t.Fatalf("call into a closed session: %v, want ErrClosed", err)
	}
}

// While a call runs, the session is busy: a second call and Close are
// refused, and Cancel ends the call.
func TestExternalCallBusy(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	ready := make(chan struct{})
	k := start(t, e, scriptModels(writeScript), func() { close(ready) })
	info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "mcp client", Model: kernel.ModelExternal})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := k.CallTool(ctx, info.ID, llm.ToolCall{ID: "c1", Name: "block", Args: json.RawMessage(`{"path": "b.txt", "content": "y"}`)})
		done <- err
	}()
	<-ready
	if _, err := k.CallTool(ctx, info.ID, llm.ToolCall{ID: "c2", Name: "write", Args: json.RawMessage(`{"path": "c.txt"}`)}); !errors.Is(err, kernel.ErrBusy) {
		t.Errorf("second call: %v, want ErrBusy", err)
	}
	if _, err := k.Close(ctx, kernel.CloseParams{ID: info.ID}); err == nil {
		t.Errorf("close during a call succeeded")
	}
	if !k.Cancel(info.ID) {
		t.Fatal("cancel found no call")
	}
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
}

// An external session's router is kept between calls, and built again
// when what it was built on changed outside them: the session's
// provenance (a mark the kept router would not see) or its change set.
func TestExternalRouterKept(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	var builds []kernel.Env
	k, err := kernel.Start(ctx, kernel.Options{DB: e.db, Audit: e.audit, DataDir: e.dir, Models: scriptModels(writeScript),
		Tools: func(_ context.Context, env kernel.Env) (agent.Tools, error) {
			builds = append(builds, env)
			return &writeTools{env: env}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "mcp client", Model: kernel.ModelExternal})
	if err != nil {
		t.Fatal(err)
	}
	write := func(path string) {
		t.Helper()
		res, err := k.CallTool(ctx, info.ID, llm.ToolCall{ID: path, Name: "write", Args: json.RawMessage(`{"path": "` + path + `", "content": "x"}`)})
		if err != nil || res.IsError {
			t.Fatalf("call: %+v %v", res, err)
		}
	}
	write("a.txt")
	write("b.txt")
	if len(builds) != 1 {
		t.Fatalf("%d routers built for two calls, want 1", len(builds))
	}
	if _, err := k.MarkUntrusted(ctx, info.ID, "a webhook"); err != nil {
		t.Fatal(err)
	}
	write("c.txt")
	if len(builds) != 2 {
		t.Fatalf("%d routers built after the session was marked, want 2", len(builds))
	}
	if src, ok := builds[1].Provenance.Untrusted(); !ok || src != "a webhook" {
		t.Errorf("the new router's provenance: %q %v", src, ok)
	}
	if _, err := k.Discard(ctx, info.ID, "a.txt"); err != nil {
		t.Fatal(err)
	}
	write("d.txt")
	if len(builds) != 3 {
		t.Fatalf("%d routers built after a discard, want 3", len(builds))
	}
}

// idlers records the sessions whose resources the kernel let go.
type idlers struct {
	mu   sync.Mutex
	idle []string
}

func (i *idlers) EndSession(string) {}
func (i *idlers) IdleSession(s string) {
	i.mu.Lock()
	i.idle = append(i.idle, s)
	i.mu.Unlock()
}

// External sessions' routers are bounded: beyond ExternalLimits.Max the
// least recently used is dropped, and one idle for ExternalLimits.Idle
// is dropped at the next sweep; the Idlers hear of each, a dropped
// session keeps its change set for review, and its next call builds its
// router again.
func TestExternalRouterEviction(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	builds := map[string]int{}
	idle := &idlers{}
	k, err := kernel.Start(ctx, kernel.Options{DB: e.db, Audit: e.audit, DataDir: e.dir, Models: scriptModels(writeScript), Now: clock,
		Revokers: []kernel.Revoker{idle}, External: kernel.ExternalLimits{Max: 2, Idle: time.Hour},
		Tools: func(_ context.Context, env kernel.Env) (agent.Tools, error) {
			builds[env.Session]++
			return &writeTools{env: env}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, task := range []string{"a", "b", "c"} {
		info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: task, Model: kernel.ModelExternal})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ID)
	}
	write := func(id, path string) {
		t.Helper()
		advance(time.Second)
		res, err := k.CallTool(ctx, id, llm.ToolCall{ID: path, Name: "write", Args: json.RawMessage(`{"path": "` + path + `", "content": "x"}`)})
		if err != nil || res.IsError {
			t.Fatalf("call: %+v %v", res, err)
		}
	}
	a, b, c := ids[0], ids[1], ids[2]
	write(a, "a.txt")
	write(b, "b.txt")
	write(c, "c.txt") // a, the least recently used, is dropped
	// Its change set stays for review.
	if _, ch, err := k.Diff(ctx, a); err != nil || len(ch) != 1 {
		t.Fatalf("diff of the dropped session: %v %v", ch, err)
	}
	write(b, "b2.txt")
	if builds[a] != 1 || builds[b] != 1 || builds[c] != 1 {
		t.Fatalf("builds %v, want one each", builds)
	}
	// Built again, once its resources were let go; c is now the least
	// recently used.
	write(a, "a2.txt")
	if builds[a] != 2 || builds[c] != 1 {
		t.Fatalf("builds %v", builds)
	}
	idle.mu.Lock()
	if len(idle.idle) == 0 || idle.idle[0] != a {
		t.Errorf("let go %v, want %s first", idle.idle, a)
	}
	idle.mu.Unlock()
	// An hour without calls: every router kept goes at the sweep.
	advance(time.Hour)
	k.SweepExternal()
	write(b, "b3.txt")
	write(a, "a3.txt")
	if builds[a] != 3 || builds[b] != 2 {
		t.Fatalf("builds after an idle hour %v", builds)
	}
	// The stop waits for what is let go in the background.
	if err := k.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	idle.mu.Lock()
	defer idle.mu.Unlock()
	slices.Sort(idle.idle)
	want := []string{a, a, b, c}
	slices.Sort(want)
	if !slices.Equal(idle.idle, want) {
		t.Errorf("let go %v, want %v", idle.idle, want)
	}
}
