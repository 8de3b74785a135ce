package approval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/ipc"
)

// askParams is the test-only method a "session" client uses to ask a plan
// through the kernel's broker, the way the kernel's request_approval tool
// will.
type askParams struct {
	Session string   `json:"session"`
	Argv    []string `json:"argv"`
}

type kernelFixture struct {
	path   string
	broker *Broker
	rec    *journal
}

func startKernel(t *testing.T, timeout time.Duration, extra Notifier) *kernelFixture {
	return startKernelWith(t, timeout, extra, true)
}

func startKernelWith(t *testing.T, timeout time.Duration, extra Notifier, required bool) *kernelFixture {
	t.Helper()
	dir, err := os.MkdirTemp("", "appr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	w := NewWatchers()
	w.Required = required
	var n Notifier = w
	if extra != nil {
		n = Fanout{extra, w} // the terminal first: the test reads it after the event
	}
	j := &journal{}
	b, err := NewBroker(Options{Evaluator: testPolicy, Notifier: n, Recorder: j, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	mux := ipc.NewMux()
	if err := Register(mux, b, w); err != nil {
		t.Fatal(err)
	}
	if err := mux.Handle("test.ask", func(ctx context.Context, r *ipc.Request) (any, error) {
		var p askParams
		if err := r.Bind(&p); err != nil {
			return nil, err
		}
		var steps []Step
		for _, a := range strings.Split(strings.Join(p.Argv, " "), ";") {
			steps = append(steps, cmd(strings.Fields(a)...))
		}
		req, err := b.Ask(ctx, p.Session, "test plan", steps)
		if err != nil {
			return nil, err
		}
		return verdictsOf(req), nil
	}); err != nil {
		t.Fatal(err)
	}
	srv, err := ipc.NewServer(ipc.ServerOptions{Mux: mux, Name: "test-kernel"})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "run", ipc.SocketName)
	ln, err := ipc.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-errc
	})
	return &kernelFixture{path: path, broker: b, rec: j}
}

func (k *kernelFixture) dial(t *testing.T) *ipc.Client {
	t.Helper()
	c, err := ipc.Dial(t.Context(), k.path, ipc.ClientOptions{Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func asyncAsk(ctx context.Context, c *ipc.Client, session string, argv ...string) chan result {
	ch := make(chan result, 1)
	go func() {
		var v string
		err := c.Call(ctx, "test.ask", askParams{Session: session, Argv: argv}, &v)
		ch <- result{req: Request{Summary: v}, err: err}
	}()
	return ch
}

func nextView(t *testing.T, c *ipc.Client) View {
	t.Helper()
	select {
	case ev := <-c.Events():
		if ev.Topic != TopicRequest {
			t.Fatalf("event %s", ev.Topic)
		}
		var v View
		if err := json.Unmarshal(ev.Data, &v); err != nil {
			t.Fatal(err)
		}
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("no approval.request event")
	}
	return View{}
}

// TestAnswerFromSecondClient: one session asks through the kernel, a
// terminal watching approvals sees two requests from two sessions at
// once, and a second client answers each by id over the real socket.
func TestAnswerFromSecondClient(t *testing.T) {
	term := &syncWriter{w: &bytes.Buffer{}}
	k := startKernel(t, time.Minute, &Terminal{W: term})
	ctx := t.Context()
	watcher, session, answerer := k.dial(t), k.dial(t), k.dial(t)
	var w WatchResult
	if err := watcher.Call(ctx, MethodWatch, nil, &w); err != nil || !w.Watching {
		t.Fatal(w, err)
	}
	a := asyncAsk(ctx, session, "sA", "ls;rm -rf build;curl x")
	va := nextView(t, watcher)
	b := asyncAsk(ctx, k.dial(t), "sB", "rm y")
	vb := nextView(t, watcher)
	if va.ID == vb.ID || va.Session != "sA" || vb.Session != "sB" {
		t.Fatalf("two sessions, ids %s/%s sessions %s/%s", va.ID, vb.ID, va.Session, vb.Session)
	}
	if !strings.Contains(va.Prompt, "Approval "+va.ID+" for session sA") || !strings.Contains(term.String(), "fluffy approve "+vb.ID) {
		t.Fatalf("prompt:\n%s\nterminal:\n%s", va.Prompt, term.String())
	}
	var list ListResult
	if err := answerer.Call(ctx, MethodList, nil, &list); err != nil || len(list.Requests) != 2 {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := answerer.Call(ctx, MethodList, ListParams{Session: "sB"}, &list); err != nil || len(list.Requests) != 1 || list.Requests[0].ID != vb.ID {
		t.Fatalf("list sB: %+v %v", list, err)
	}
	// A malformed answer is explained and changes nothing.
	err := answerer.Call(ctx, MethodAnswer, AnswerParams{ID: va.ID, Answer: "/approve 9"}, nil)
	var ie *ipc.Error
	if !errors.As(err, &ie) || ie.Code != CodeBadAnswer || !strings.Contains(ie.Message, "step 9") {
		t.Fatalf("bad answer: %v", err)
	}
	if err := answerer.Call(ctx, MethodAnswer, AnswerParams{ID: "zzzzzz", Answer: "/approve"}, nil); !errors.As(err, &ie) || ie.Code != CodeUnknownRequest {
		t.Fatalf("unknown id: %v", err)
	}
	// Partial answer: the request stays open and is shown again.
	var res AnswerResult
	if err := answerer.Call(ctx, MethodAnswer, AnswerParams{ID: va.ID, Answer: "/approve 2", Who: "alice"}, &res); err != nil || !res.Open || !strings.Contains(res.Prompt, "3. shell.exec") {
		t.Fatalf("partial: %+v %v", res, err)
	}
	if again := nextView(t, watcher); again.ID != va.ID {
		t.Fatalf("re-asked %s", again.ID)
	}
	if err := answerer.Call(ctx, MethodAnswer, AnswerParams{ID: vb.ID, Answer: "/deny too broad"}, &res); err != nil || res.Open {
		t.Fatalf("deny sB: %+v %v", res, err)
	}
	if err := answerer.Call(ctx, MethodAnswer, AnswerParams{ID: va.ID, Answer: "/deny 3 no network"}, &res); err != nil || res.Open {
		t.Fatalf("finish sA: %+v %v", res, err)
	}
	ra, rb := <-a, <-b
	if ra.err != nil || rb.err != nil || ra.req.Summary != "AAD" || rb.req.Summary != "D" {
		t.Fatalf("session results: %+v %+v", ra, rb)
	}
	kinds := strings.Join(k.rec.kinds(), ",")
	if !strings.Contains(kinds, "approval.decision/alice (uid:") || !strings.Contains(kinds, "approval.decision/uid:") {
		t.Fatalf("recorded: %s", kinds)
	}
	// Answered requests are gone.
	if err := answerer.Call(ctx, MethodList, nil, &list); err != nil || len(list.Requests) != 0 {
		t.Fatalf("list after: %+v %v", list, err)
	}
}

// TestNobodyWatching: with no terminal watching, a request is not left
// waiting for an answer nobody was asked for.
func TestNobodyWatching(t *testing.T) {
	k := startKernel(t, time.Minute, nil)
	r := <-asyncAsk(t.Context(), k.dial(t), "s", "rm x")
	if r.err == nil || !strings.Contains(r.err.Error(), "no terminal is watching") {
		t.Fatalf("ask with nobody watching: %v", r.err)
	}
	if p := k.broker.Pending(""); len(p) != 0 {
		t.Fatalf("left pending: %v", p)
	}
}

// TestUnwatchedRequestWaitsInList: when watching is optional, a request
// nobody was shown waits in approval.list and is answered by id.
func TestUnwatchedRequestWaitsInList(t *testing.T) {
	k := startKernelWith(t, time.Minute, nil, false)
	ch := asyncAsk(t.Context(), k.dial(t), "s", "rm x;ls")
	c := k.dial(t)
	var list ListResult
	for range 200 {
		if err := c.Call(t.Context(), MethodList, nil, &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Requests) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(list.Requests) != 1 {
		t.Fatalf("list: %+v", list)
	}
	if err := c.Call(t.Context(), MethodAnswer, AnswerParams{ID: list.Requests[0].ID, Answer: "/approve"}, nil); err != nil {
		t.Fatal(err)
	}
	if r := <-ch; r.err != nil || r.req.Summary != "AA" {
		t.Fatalf("%+v", r)
	}
}

// TestIPCTimeout: an unanswered request is denied after the timeout and
// the session's call returns.
func TestIPCTimeout(t *testing.T) {
	k := startKernel(t, 200*time.Millisecond, nil)
	w := k.dial(t)
	if err := w.Call(t.Context(), MethodWatch, nil, nil); err != nil {
		t.Fatal(err)
	}
	r := <-asyncAsk(t.Context(), k.dial(t), "s", "rm x")
	if r.err != nil || r.req.Summary != "D" {
		t.Fatalf("timeout: %+v", r)
	}
	if !strings.Contains(strings.Join(k.rec.kinds(), ","), "approval.decision/timeout") {
		t.Fatal(k.rec.kinds())
	}
}

func TestAnswerParamsLimits(t *testing.T) {
	k := startKernel(t, time.Minute, nil)
	c := k.dial(t)
	for _, p := range []AnswerParams{{ID: "a"}, {Answer: "/approve"}, {ID: "a", Answer: strings.Repeat("x", maxAnswerLen+1)}, {ID: "a", Answer: "/approve", Who: "a\x1b[2Jb"}} {
		var ie *ipc.Error
		if err := c.Call(t.Context(), MethodAnswer, p, nil); !errors.As(err, &ie) || ie.Code != ipc.CodeInvalidParams {
			t.Errorf("%+v: %v", p, err)
		}
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

type failNotifier struct{ err error }

func (f failNotifier) Notify(context.Context, Request) error { return f.err }

func TestFanout(t *testing.T) {
	boom, gone := errors.New("boom"), errors.New("gone")
	ok := newInbox()
	cases := []struct {
		name string
		f    Fanout
		want []error
	}{
		{"one shows it", Fanout{failNotifier{boom}, ok}, nil},
		{"none does", Fanout{failNotifier{boom}, failNotifier{gone}}, []error{boom, gone}},
		{"empty", Fanout{}, []error{}},
	}
	for _, c := range cases {
		err := c.f.Notify(t.Context(), Request{ID: "x"})
		switch {
		case c.want == nil && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != nil && err == nil:
			t.Errorf("%s: no error", c.name)
		}
		for _, w := range c.want {
			if !errors.Is(err, w) {
				t.Errorf("%s: %v does not wrap %v", c.name, err, w)
			}
		}
	}
}

// TestTerminalPromptsWhole: two sessions printing on one terminal at once
// never interleave their prompts.
func TestTerminalPromptsWhole(t *testing.T) {
	w := &syncWriter{w: &bytes.Buffer{}}
	term := &Terminal{W: w}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := Request{ID: "id" + strings.Repeat("x", i), Session: "s", Items: []Item{{N: 1, Step: cmd("rm", "x"), Eval: Evaluation{Effect: EffectApprove, Rule: "r"}, Decision: Decision{Verdict: Pending}}}}
			if err := term.Notify(t.Context(), r); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	blocks := strings.Split(strings.TrimPrefix(w.String(), "\n"), "\nApproval ")
	if len(blocks) != 20 {
		t.Fatalf("%d prompt blocks", len(blocks))
	}
	for _, b := range blocks {
		id := strings.Fields(strings.TrimPrefix(b, "Approval "))[0]
		if !strings.Contains(b, "fluffy approve "+id+" /approve") || strings.Count(b, "Needs your approval") != 1 {
			t.Fatalf("interleaved block:\n%s", b)
		}
	}
}
