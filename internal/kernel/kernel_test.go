package kernel_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/llm/replay"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native"
	"github.com/fluffy-agent/fluffy/internal/store"
)

// env is one data directory with its databases open.
type env struct {
	dir   datadir.Dir
	db    *store.DB
	audit *audit.Log
	ws    string
}

func openEnv(t testing.TB, home, ws string) *env {
	t.Helper()
	ctx := context.Background()
	d, err := datadir.New(home)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Ensure(); err != nil {
		t.Fatal(err)
	}
	db, err := store.OpenMain(ctx, d.Root)
	if err != nil {
		t.Fatal(err)
	}
	al, err := audit.Open(ctx, audit.Options{Path: d.Path(datadir.AuditDB), KeyDir: d.Path(datadir.Keys)})
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	return &env{dir: d, db: db, audit: al, ws: ws}
}

func (e *env) close() {
	e.audit.Close()
	e.db.Close()
}

func newWorkspace(t testing.TB) string {
	t.Helper()
	ws := filepath.Join(t.TempDir(), "repo")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "README.md"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return ws
}

// scriptModels opens every model as the given replay script text.
func scriptModels(script string) kernel.ModelOpener {
	return func(context.Context, string) (llm.Provider, string, error) {
		s, err := replay.Parse("test.jsonl", strings.NewReader(script))
		if err != nil {
			return nil, "", err
		}
		return replay.New(s), "test", nil
	}
}

// writeTools is a test tool set standing in for the router: "write"
// writes {path, content} into the session's change set; "block" writes
// too, then reports readiness and waits for ctx; "crash" fails the
// runtime.
type writeTools struct {
	env   kernel.Env
	ready func()
}

func (w *writeTools) Definitions() []llm.Tool {
	return []llm.Tool{{Name: "write", Description: "write a file"}, {Name: "block", Description: "write then wait"}, {Name: "crash"}}
}

func (w *writeTools) Call(ctx context.Context, c llm.ToolCall) (agent.Result, error) {
	var a struct{ Path, Content string }
	if err := json.Unmarshal(c.Args, &a); err != nil {
		return agent.Result{Content: err.Error(), IsError: true}, nil
	}
	switch c.Name {
	case "crash":
		return agent.Result{}, errors.New("sandbox runtime unreachable")
	case "write", "block":
		if err := w.env.ChangeSet.WriteFile(a.Path, []byte(a.Content), 0o644); err != nil {
			return agent.Result{Content: err.Error(), IsError: true}, nil
		}
		if c.Name == "block" {
			if w.ready != nil {
				w.ready()
			}
			<-ctx.Done()
			return agent.Result{}, ctx.Err()
		}
		return agent.Result{Content: "wrote " + a.Path, Decision: "allow: test"}, nil
	}
	return agent.Result{Content: "unknown tool", IsError: true}, nil
}

func start(t testing.TB, e *env, models kernel.ModelOpener, ready func()) *kernel.Kernel {
	t.Helper()
	k, err := kernel.Start(context.Background(), kernel.Options{DB: e.db, Audit: e.audit, DataDir: e.dir, Models: models,
		Tools: func(_ context.Context, env kernel.Env) (agent.Tools, error) {
			return &writeTools{env: env, ready: ready}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const writeScript = `{"turn": {"text": "writing", "tool_calls": [{"id": "c1", "name": "write", "args": {"path": "hello.go", "content": "package hello\n"}}]}}
{"expect": {"id": "c1", "contains": "wrote hello.go"}}
{"turn": {"text": "done"}}
{"end": {}}
`

func TestSessionRunDiffApply(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	k := start(t, e, scriptModels(writeScript), nil)

	info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "add hello.go", Model: "replay/test"})
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != kernel.StatusPaused || !info.Resumable() {
		t.Fatalf("new session: %+v", info)
	}
	var mu sync.Mutex
	var types []kernel.Type
	res, err := k.Run(ctx, info.ID, func(ev kernel.Event) {
		mu.Lock()
		defer mu.Unlock()
		if ev.Seq != uint64(len(types)+1) {
			t.Errorf("event %d has seq %d", len(types)+1, ev.Seq)
		}
		types = append(types, ev.Type)
	})
	if err != nil || res.Fault != nil || res.Reason != "done" {
		t.Fatalf("run: %+v %v", res, err)
	}
	got := fmt.Sprint(types)
	for _, want := range []string{"tool_call", "tool_result", "stop", "done"} {
		if !strings.Contains(got, want) {
			t.Errorf("events %s lack %s", got, want)
		}
	}
	if types[len(types)-1] != kernel.TypeDone {
		t.Errorf("last event %s, want done", types[len(types)-1])
	}
	if _, err := os.Stat(filepath.Join(e.ws, "hello.go")); !os.IsNotExist(err) {
		t.Fatalf("the workspace changed before apply: %v", err)
	}
	diff, changes, err := k.Diff(ctx, info.ID)
	if err != nil || len(changes) != 1 || !strings.Contains(diff, "+package hello") {
		t.Fatalf("diff %q %v %v", diff, changes, err)
	}
	info, _ = k.Get(ctx, info.ID)
	if info.Turns != 2 || info.StopReason != "done" {
		t.Errorf("after run: %+v", info)
	}
	// Running a finished session again asks no model and changes nothing.
	again, err := k.Run(ctx, info.ID, nil)
	if err != nil || again.Reason != "done" || again.Text != "done" {
		t.Fatalf("second run: %+v %v", again, err)
	}
	cr, err := k.Close(ctx, kernel.CloseParams{ID: info.ID, Apply: true})
	if err != nil || len(cr.Applied) != 1 {
		t.Fatalf("close: %+v %v", cr, err)
	}
	if b, err := os.ReadFile(filepath.Join(e.ws, "hello.go")); err != nil || string(b) != "package hello\n" {
		t.Fatalf("applied file: %q %v", b, err)
	}
	if _, err := k.Run(ctx, info.ID, nil); !errors.Is(err, kernel.ErrClosed) {
		t.Errorf("run of a closed session: %v", err)
	}
	if err := k.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	kinds := auditKinds(t, e)
	for _, want := range []string{"kernel.start", "session.create", "changeset.apply", "session.close", "kernel.stop"} {
		if !strings.Contains(kinds, want) {
			t.Errorf("audit log %s lacks %s", kinds, want)
		}
	}
}

func auditKinds(t testing.TB, e *env) string {
	t.Helper()
	if err := e.audit.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	if err := e.audit.Reader().Entries(context.Background(), audit.Filter{}, func(en audit.Entry) error {
		kinds = append(kinds, string(en.Kind))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return strings.Join(kinds, " ")
}

// TestErrorRouting: a tool refusal goes back to the model; a model error
// pauses the session (resumable); a runtime fault fails it closed.
func TestErrorRouting(t *testing.T) {
	cases := []struct {
		name   string
		script string
		models kernel.ModelOpener
		status kernel.Status
		class  kernel.FaultClass
	}{
		{"tool refusal continues", `{"turn": {"tool_calls": [{"id": "c1", "name": "nosuch", "args": {}}]}}
{"expect": {"id": "c1", "is_error": true}}
{"turn": {"text": "ok"}}
`, nil, kernel.StatusPaused, ""},
		{"model error pauses", "", func(context.Context, string) (llm.Provider, string, error) {
			return failingProvider{}, "x", nil
		}, kernel.StatusPaused, kernel.FaultModel},
		{"model open error pauses", "", func(context.Context, string) (llm.Provider, string, error) {
			return nil, "", errors.New("no such provider")
		}, kernel.StatusPaused, kernel.FaultModel},
		{"runtime fault fails closed", `{"turn": {"tool_calls": [{"id": "c1", "name": "crash", "args": {}}]}}
{"turn": {"text": "never"}}
`, nil, kernel.StatusFailed, kernel.FaultRuntime},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			e := openEnv(t, t.TempDir(), newWorkspace(t))
			defer e.close()
			models := c.models
			if models == nil {
				models = scriptModels(c.script)
			}
			k := start(t, e, models, nil)
			info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "t", Model: "replay/x"})
			if err != nil {
				t.Fatal(err)
			}
			res, err := k.Run(ctx, info.ID, nil)
			if err != nil {
				t.Fatal(err)
			}
			var class kernel.FaultClass
			if res.Fault != nil {
				class = res.Fault.Class
			}
			if res.Status != c.status || class != c.class {
				t.Fatalf("got status %s fault %+v, want %s %q", res.Status, res.Fault, c.status, c.class)
			}
			got, _ := k.Get(ctx, info.ID)
			if got.Status != c.status {
				t.Errorf("stored status %s", got.Status)
			}
		})
	}
}

// TestAuditDamageRefusesStart: the kernel does not start over a damaged
// audit log.
func TestAuditDamageRefusesStart(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	e := openEnv(t, home, newWorkspace(t))
	for i := 0; i < 3; i++ {
		if _, err := e.audit.Append(ctx, audit.Entry{Kind: audit.KindUserNote, Actor: "test", Payload: map[string]int{"n": i}}); err != nil {
			t.Fatal(err)
		}
	}
	e.close()
	adb, err := store.Open(ctx, filepath.Join(home, datadir.AuditDB), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adb.ExecContext(ctx, `UPDATE entries SET body = replace(body, '"n":1', '"n":7') WHERE seq = 2`); err != nil {
		t.Skipf("cannot edit the audit table (schema changed?): %v", err)
	}
	adb.Close()
	e = openEnv(t, home, e.ws)
	defer e.close()
	_, err = kernel.Start(ctx, kernel.Options{DB: e.db, Audit: e.audit, DataDir: e.dir, Models: scriptModels(""),
		Tools: func(context.Context, kernel.Env) (agent.Tools, error) { return kernel.NoTools{}, nil }})
	if !errors.Is(err, kernel.ErrAuditDamaged) {
		t.Fatalf("start over a damaged log: %v", err)
	}
}

// failingProvider answers every call with a server error.
type failingProvider struct{}

func (failingProvider) Stream(context.Context, llm.Request) iter.Seq2[llm.Event, error] {
	return func(yield func(llm.Event, error) bool) {
		yield(llm.Event{}, &llm.Error{Provider: "test", Status: 503, Err: errors.New("overloaded")})
	}
}

// recordingProvider records the messages of each request.
type recordingProvider struct {
	llm.Provider
	mu   sync.Mutex
	reqs []llm.Request
}

func (r *recordingProvider) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Event, error] {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return r.Provider.Stream(ctx, req)
}

const blockScript = `{"turn": {"text": "writing", "tool_calls": [{"id": "c1", "name": "write", "args": {"path": "a.txt", "content": "A"}}, {"id": "c2", "name": "block", "args": {"path": "b.txt", "content": "B"}}]}}
{"turn": {"text": "never reached"}}
`

// TestMain lets the kill -9 test run this binary as a kernel process.
func TestMain(m *testing.M) {
	if native.IsInit() { // the orphan test's sandboxes re-execute this binary
		os.Exit(native.InitMain())
	}
	if home := os.Getenv("KERNEL_TEST_SANDBOX_CHILD"); home != "" {
		os.Exit(sandboxChild(home, os.Getenv("KERNEL_TEST_CHILD_WS")))
	}
	if home := os.Getenv("KERNEL_TEST_CHILD_HOME"); home != "" {
		os.Exit(child(home, os.Getenv("KERNEL_TEST_CHILD_WS")))
	}
	os.Exit(m.Run())
}

// child runs a session whose second tool call blocks, after printing
// "READY <id>"; the parent kills it there.
func child(home, ws string) int {
	t := &testing.T{}
	e := openEnv(t, home, ws)
	ctx := context.Background()
	var id string
	k := start(t, e, scriptModels(blockScript), func() { fmt.Printf("READY %s\n", id) })
	info, err := k.Create(ctx, kernel.CreateParams{Workspace: ws, Task: "write a and b", Model: "replay/x"})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	id = info.ID
	_, err = k.Run(ctx, id, nil)
	fmt.Println("ERR run returned", err)
	return 1
}

// startChild runs this test binary as a child kernel process (TestMain
// dispatches on env) and returns it with its stdout lines.
func startChild(t *testing.T, env ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line <- sc.Text()
		}
		close(line)
	}()
	return cmd, line
}

// TestKill9Recovery kills a kernel process in the middle of a tool call:
// the next kernel marks the session interrupted and resumable, the change
// set keeps both writes, the completed call is not run again and the
// pending one is answered "interrupted".
func TestKill9Recovery(t *testing.T) {
	ctx := context.Background()
	home, ws := t.TempDir(), newWorkspace(t)
	cmd, line := startChild(t, "KERNEL_TEST_CHILD_HOME="+home, "KERNEL_TEST_CHILD_WS="+ws)
	var id string
	select {
	case l := <-line:
		var ok bool
		if id, ok = strings.CutPrefix(l, "READY "); !ok {
			t.Fatalf("child said %q", l)
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("child never got to the blocking call")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	e := openEnv(t, home, ws)
	defer e.close()
	rec := &recordingProvider{}
	k := start(t, e, func(context.Context, string) (llm.Provider, string, error) {
		s, err := replay.Parse("resume.jsonl", strings.NewReader(`{"turn": {"text": "resumed"}}`+"\n"))
		if err != nil {
			return nil, "", err
		}
		rec.Provider = replay.New(s)
		return rec, "x", nil
	}, nil)
	info, err := k.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Interrupted || info.Status != kernel.StatusPaused || !info.Resumable() {
		t.Fatalf("after kill -9: %+v", info)
	}
	_, changes, err := k.Diff(ctx, id)
	if err != nil || len(changes) != 2 {
		t.Fatalf("change set after kill -9: %v %v", changes, err)
	}
	res, err := k.Run(ctx, id, nil)
	if err != nil || res.Fault != nil || res.Reason != "done" {
		t.Fatalf("resume: %+v %v", res, err)
	}
	if len(rec.reqs) != 1 {
		t.Fatalf("%d model calls on resume", len(rec.reqs))
	}
	msgs := rec.reqs[0].Messages
	last := msgs[len(msgs)-1]
	if len(last.Content) != 2 {
		t.Fatalf("resumed with %+v", last)
	}
	c1, c2 := last.Content[0], last.Content[1]
	if c1.ID != "c1" || c1.IsError || !strings.Contains(c1.Text, "wrote a.txt") {
		t.Errorf("completed call's saved result: %+v", c1)
	}
	if c2.ID != "c2" || !c2.IsError || !strings.HasPrefix(c2.Text, "interrupted") {
		t.Errorf("pending call's result: %+v", c2)
	}
	if kinds := auditKinds(t, e); strings.Count(kinds, "kernel.start") != 2 {
		t.Errorf("audit: %s", kinds)
	}
}

// unknownRequests is an approval broker with nothing pending.
type unknownRequests struct{}

func (unknownRequests) Answer(_ context.Context, id, _ string, _ approval.Who) error {
	return fmt.Errorf("%w: %q", approval.ErrUnknownRequest, id)
}

// TestIPC drives the session methods over a real socket: create, attach
// (subscribe), run with the events pushed, diff, close; an unknown
// session is invalid_params.
func TestIPC(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	mux := ipc.NewMux()
	var srv *ipc.Server
	k, err := kernel.Start(ctx, kernel.Options{DB: e.db, Audit: e.audit, DataDir: e.dir, Models: scriptModels(writeScript),
		Tools:     func(_ context.Context, env kernel.Env) (agent.Tools, error) { return &writeTools{env: env}, nil },
		Publish:   func(topic string, data any) { _, _ = srv.Publish(topic, data) },
		Approvals: unknownRequests{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Register(mux); err != nil {
		t.Fatal(err)
	}
	if srv, err = ipc.NewServer(ipc.ServerOptions{Mux: mux}); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "kipc")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ln, err := ipc.Listen(filepath.Join(dir, "k.sock"))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Shutdown(context.Background())
	c, err := ipc.Dial(ctx, filepath.Join(dir, "k.sock"), ipc.ClientOptions{Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var info kernel.Info
	if err := c.Call(ctx, kernel.MethodCreate, kernel.CreateParams{Workspace: e.ws, Task: "add hello.go", Model: "replay/x"}, &info); err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe(ctx, kernel.Topic(info.ID)); err != nil {
		t.Fatal(err)
	}
	var res kernel.RunResult
	if err := c.Call(ctx, kernel.MethodRun, kernel.IDParams{ID: info.ID}, &res); err != nil || res.Reason != "done" {
		t.Fatalf("run: %+v %v", res, err)
	}
	var types []string
	for done := false; !done; {
		select {
		case ev := <-c.Events():
			var ke kernel.Event
			if err := json.Unmarshal(ev.Data, &ke); err != nil {
				t.Fatal(err)
			}
			if ke.Session != info.ID {
				t.Errorf("event of session %q", ke.Session)
			}
			types = append(types, string(ke.Type))
			done = ke.Type == kernel.TypeDone
		case <-ctx.Done():
			t.Fatalf("no done event; got %v", types)
		}
	}
	if got := strings.Join(types, " "); !strings.Contains(got, "tool_call") || !strings.Contains(got, "tool_result") {
		t.Errorf("events: %s", got)
	}
	var d kernel.DiffResult
	if err := c.Call(ctx, kernel.MethodDiff, kernel.IDParams{ID: info.ID}, &d); err != nil || len(d.Changes) != 1 {
		t.Fatalf("diff: %+v %v", d, err)
	}
	var list []kernel.Info
	if err := c.Call(ctx, kernel.MethodList, kernel.ListParams{}, &list); err != nil || len(list) != 1 {
		t.Fatalf("list: %+v %v", list, err)
	}
	var cr kernel.CloseResult
	if err := c.Call(ctx, kernel.MethodClose, kernel.CloseParams{ID: info.ID}, &cr); err != nil || !cr.Discarded {
		t.Fatalf("close: %+v %v", cr, err)
	}
	var ie *ipc.Error
	err = c.Call(ctx, kernel.MethodRun, kernel.IDParams{ID: info.ID}, &res)
	if !errors.As(err, &ie) || ie.Code != ipc.CodeUnavailable {
		t.Errorf("run of a closed session: %v", err)
	}
	err = c.Call(ctx, kernel.MethodGet, kernel.IDParams{ID: "snosuch"}, &info)
	if !errors.As(err, &ie) || ie.Code != ipc.CodeInvalidParams {
		t.Errorf("unknown session: %v", err)
	}
	// An answer to a request no longer pending has a code of its own:
	// the interactive client tells it from a bad answer by the code.
	err = c.Call(ctx, kernel.MethodApprove, kernel.ApproveParams{Request: "anosuch", Answer: "/approve"}, nil)
	if !errors.As(err, &ie) || ie.Code != approval.CodeUnknownRequest {
		t.Errorf("answer to an unknown request: %v; want code %s", err, approval.CodeUnknownRequest)
	}
	if _, err := os.Stat(filepath.Join(e.ws, "hello.go")); !os.IsNotExist(err) {
		t.Errorf("discarded change reached the workspace: %v", err)
	}
	// A mark needs a source the person can be shown, of bounded size.
	for _, src := range []string{"", strings.Repeat("x", 1025)} {
		err = c.Call(ctx, kernel.MethodMarkUntrusted, kernel.MarkUntrustedParams{ID: info.ID, Source: src}, nil)
		if !errors.As(err, &ie) || ie.Code != ipc.CodeInvalidParams {
			t.Errorf("mark with a %d-byte source: %v", len(src), err)
		}
	}
	var marked map[string]bool
	if err := c.Call(ctx, kernel.MethodMarkUntrusted, kernel.MarkUntrustedParams{ID: info.ID, Source: "email from a@example.com"}, &marked); err != nil || !marked["marked"] {
		t.Errorf("mark: %v %v", marked, err)
	}
	if err := c.Call(ctx, kernel.MethodGet, kernel.IDParams{ID: info.ID}, &info); err != nil || info.Untrusted != "email from a@example.com" {
		t.Errorf("after the mark: %+v %v", info, err)
	}
}

// An apply a crash cut in half (one file renamed into the workspace, the
// other still staged) is rolled back when the next kernel starts, not
// left until someone opens that session's change set.
func TestStartFinishesInterruptedApply(t *testing.T) {
	ctx := context.Background()
	e := openEnv(t, t.TempDir(), newWorkspace(t))
	defer e.close()
	k := start(t, e, scriptModels(writeScript), nil)
	info, err := k.Create(ctx, kernel.CreateParams{Workspace: e.ws, Task: "two files", Model: "replay/test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	// The state a kill -9 between the two renames of an apply leaves.
	for name, content := range map[string]string{"a.txt": "a\n", ".b.fluffy-tmp": "b\n"} {
		if err := os.WriteFile(filepath.Join(e.ws, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	journal := `{"staged":true,"committed":false,"steps":[` +
		`{"kind":"put","path":"a.txt","tmp":".a.fluffy-tmp","change":{}},` +
		`{"kind":"put","path":"b.txt","tmp":".b.fluffy-tmp","change":{}}],"plan":[]}`
	if err := os.WriteFile(filepath.Join(info.ChangeSet, "apply.journal"), []byte(journal), 0o600); err != nil {
		t.Fatal(err)
	}

	k = start(t, e, scriptModels(writeScript), nil)
	defer k.Stop(ctx, "test")
	for _, name := range []string{"a.txt", ".b.fluffy-tmp"} {
		if _, err := os.Lstat(filepath.Join(e.ws, name)); !os.IsNotExist(err) {
			t.Errorf("%s after the kernel started: %v, want it rolled back", name, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(info.ChangeSet, "apply.journal")); !os.IsNotExist(err) {
		t.Errorf("the journal is still there: %v", err)
	}
}
