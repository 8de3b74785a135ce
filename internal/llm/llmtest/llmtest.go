// Package llmtest is the shared test suite every llm.Provider backend runs
// (as litestream runs one suite against each replica client). A backend
// supplies a constructor and recorded response bodies in its testdata/
// that follow its API's documented wire format; the suite serves them from
// an httptest server on loopback, through the real SDK client, and checks
// text streaming, tool calls split across many chunks, parallel tool
// calls, stop reasons, usage, retries (429 with Retry-After, 500, a reset
// connection) and the errors that must not be retried (400, a malformed
// chunk, a connection dropped mid-stream, cancellation).
//
// Normalized events are compared with golden files (<case>.golden.jsonl);
// run the backend's tests with -update to rewrite them.
package llmtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fluffy-agent/fluffy/internal/llm"
)

var update = flag.Bool("update", false, "rewrite golden files")

// Backend describes the backend under test.
type Backend struct {
	// New returns a provider that talks to baseURL with the key "test-key".
	New func(t testing.TB, baseURL string) llm.Provider
	// Model is the model name put in requests.
	Model string
	// Ext is the extension of the recorded bodies in testdata/:
	// text, tool_split, parallel, max_tokens, malformed.
	Ext string
	// ContentType of streamed responses.
	ContentType string
	// ErrorBody is the body the API sends with an error status.
	ErrorBody func(status int) string
	// PathSuffix is what the request path must end with.
	PathSuffix string
	// AuthHeader is the header that must carry the key and AuthValue its
	// expected value.
	AuthHeader, AuthValue string
	// Env lists the variables the SDK would read on its own; the suite
	// sets them to hostile values to prove they are ignored.
	Env []string
}

// reply is one scripted response.
type reply struct {
	status int
	header http.Header
	body   []byte
	// reset closes the connection with a TCP RST after writing cut bytes
	// of body (cut 0: before any response).
	reset bool
	cut   int
	// hang keeps the response open after cut bytes until the client goes.
	hang bool
	// dribble writes the body in pieces of 1 to dribble bytes, flushing
	// each, so that events arrive split at arbitrary points.
	dribble int
}

type server struct {
	t       *testing.T
	b       Backend
	mu      sync.Mutex
	replies []reply
	bodies  [][]byte
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.bodies = append(s.bodies, body)
	var rp reply
	if len(s.replies) > 0 {
		rp, s.replies = s.replies[0], s.replies[1:]
	} else {
		rp = reply{status: http.StatusTeapot, body: []byte("no more scripted replies")}
	}
	s.mu.Unlock()
	if !strings.HasSuffix(r.URL.Path, s.b.PathSuffix) {
		s.t.Errorf("request path %q, want suffix %q", r.URL.Path, s.b.PathSuffix)
	}
	if got := r.Header.Get(s.b.AuthHeader); got != s.b.AuthValue {
		s.t.Errorf("%s = %q, want %q", s.b.AuthHeader, got, s.b.AuthValue)
	}
	if rp.reset && rp.cut == 0 {
		resetConn(w)
		return
	}
	for k, v := range rp.header {
		w.Header()[k] = v
	}
	status := rp.status
	if status == 0 {
		status = http.StatusOK
		w.Header().Set("Content-Type", s.b.ContentType)
	}
	w.WriteHeader(status)
	if rp.reset || rp.hang {
		w.Write(rp.body[:rp.cut])
		w.(http.Flusher).Flush()
		if rp.hang {
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
				s.t.Errorf("client did not hang up after cancellation")
			}
			return
		}
		resetConn(w)
		return
	}
	if rp.dribble > 0 {
		for i, n := 0, 0; i < len(rp.body); i += n {
			n = min(1+(i*7)%rp.dribble, len(rp.body)-i)
			w.Write(rp.body[i : i+n])
			w.(http.Flusher).Flush()
		}
		return
	}
	w.Write(rp.body)
}

// resetConn aborts the connection with a TCP RST.
func resetConn(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

// Request is the request every case sends: a system prompt, two tools,
// and a history holding a tool call and its result.
func Request(model string) llm.Request {
	return llm.Request{
		Model:  model,
		System: "You are fluffy's test model.",
		Tools: []llm.Tool{
			{Name: "read_file", Description: "Read a file.", Schema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)},
			{Name: "run", Description: "Run a command.", Schema: json.RawMessage(`{"type":"object","properties":{"argv":{"type":"array","items":{"type":"string"}}},"required":["argv"]}`)},
		},
		Messages: []llm.Message{
			{Role: llm.RoleUser, Content: []llm.Block{llm.Text("What is in go.mod?")}},
			{Role: llm.RoleAssistant, Content: []llm.Block{llm.Text("Let me look."), {Type: llm.BlockToolCall, ID: "toolu_01", Name: "read_file", Args: json.RawMessage(`{"path":"go.mod"}`)}}},
			{Role: llm.RoleUser, Content: []llm.Block{llm.ToolResult("toolu_01", "read_file", "module example.com/x", false)}},
		},
		MaxTokens: 1024,
	}
}

type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

// Run runs the suite.
func Run(t *testing.T, b Backend) {
	for _, k := range b.Env {
		t.Setenv(k, "http://127.0.0.1:9/hostile")
	}
	su := &suite{b: b}
	su.text = su.read(t, "text")
	su.cut = cutAfterHello(t, su.text)
	su.recordings(t)
	su.retries(t)
	su.streams(t)
}

// suite is what Run's cases share: the backend and its "text" recording.
type suite struct {
	b    Backend
	text []byte
	cut  int // where the "text" recording is cut after its first text
}

// read returns the backend's recording name.
func (su *suite) read(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name+"."+su.b.Ext))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// errReply is the backend's error response with status.
func (su *suite) errReply(status int, h http.Header) reply {
	if h == nil {
		h = http.Header{}
	}
	h.Set("Content-Type", "application/json")
	return reply{status: status, header: h, body: []byte(su.b.ErrorBody(status))}
}

// start serves replies, in order, to a provider that retries with
// recorded instead of real sleeps.
func (su *suite) start(t *testing.T, replies ...reply) (*server, llm.Provider, *sleeps) {
	noLeak(t)
	s := &server{t: t, b: su.b, replies: replies}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	sl := &sleeps{}
	p := llm.Retry(su.b.New(t, ts.URL), llm.RetryOptions{Attempts: 3, Sleep: sl.sleep, Rand: func() float64 { return 0.5 }})
	return s, p, sl
}

// recordings: each recording decodes to its golden events, however the
// network splits it; parallel tool calls keep distinct ids.
func (su *suite) recordings(t *testing.T) {
	for _, name := range []string{"text", "tool_split", "parallel", "max_tokens"} {
		t.Run("golden/"+name, func(t *testing.T) {
			s, p, _ := su.start(t, reply{body: su.read(t, name)})
			var got []llm.Event
			resp, err := llm.Collect(p.Stream(t.Context(), Request(su.b.Model)), func(ev llm.Event) { got = append(got, ev) })
			if err != nil {
				t.Fatal(err)
			}
			golden(t, name+".golden.jsonl", events(got))
			if resp.Usage.Total() == 0 {
				t.Error("usage not mapped: all counts are zero")
			}
			if name == "text" {
				var pretty bytes.Buffer
				if err := json.Indent(&pretty, s.bodies[0], "", "  "); err != nil {
					t.Fatalf("request body is not JSON: %v", err)
				}
				golden(t, "request.golden.json", append(pretty.Bytes(), '\n'))
			}
		})
	}

	// The same recordings delivered in tiny writes decode to the same
	// events: the SDK's SSE reader and the assembler do not depend on
	// where the network splits the stream.
	for _, name := range []string{"text", "tool_split", "parallel"} {
		t.Run("dribbled/"+name, func(t *testing.T) {
			_, p, _ := su.start(t, reply{body: su.read(t, name), dribble: 13})
			var got []llm.Event
			if _, err := llm.Collect(p.Stream(t.Context(), Request(su.b.Model)), func(ev llm.Event) { got = append(got, ev) }); err != nil {
				t.Fatal(err)
			}
			if *update {
				return
			}
			want, err := os.ReadFile(filepath.Join("testdata", name+".golden.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(string(want), string(events(got))); d != "" {
				t.Errorf("dribbled %s differs (-whole +dribbled):\n%s", name, d)
			}
		})
	}

	t.Run("parallel tool calls", func(t *testing.T) {
		_, p, _ := su.start(t, reply{body: su.read(t, "parallel")})
		resp, err := llm.Collect(p.Stream(t.Context(), Request(su.b.Model)), nil)
		if err != nil {
			t.Fatal(err)
		}
		calls := resp.Message.ToolCalls()
		if len(calls) < 2 {
			t.Fatalf("got %d tool calls, want at least 2", len(calls))
		}
		seen := map[string]bool{}
		for _, c := range calls {
			if c.ID == "" || seen[c.ID] {
				t.Errorf("tool call id %q empty or repeated", c.ID)
			}
			seen[c.ID] = true
		}
		if resp.Stop != llm.StopToolUse {
			t.Errorf("stop = %q, want tool_use", resp.Stop)
		}
	})
}

// retries: what is retried, how often and after how long.
func (su *suite) retries(t *testing.T) {
	t.Run("429 with Retry-After then success", func(t *testing.T) {
		s, p, sl := su.start(t, su.errReply(429, http.Header{"Retry-After": {"7"}}), reply{body: su.text})
		if _, err := llm.Collect(p.Stream(t.Context(), Request(su.b.Model)), nil); err != nil {
			t.Fatal(err)
		}
		if len(s.bodies) != 2 || !cmp.Equal(sl.d, []time.Duration{7 * time.Second}) {
			t.Errorf("requests = %d, waits = %v; want 2 requests and one 7s wait", len(s.bodies), sl.d)
		}
	})

	t.Run("500 retried", func(t *testing.T) {
		s, p, sl := su.start(t, su.errReply(500, nil), su.errReply(503, nil), reply{body: su.text})
		if _, err := llm.Collect(p.Stream(t.Context(), Request(su.b.Model)), nil); err != nil {
			t.Fatal(err)
		}
		if len(s.bodies) != 3 || len(sl.d) != 2 || sl.d[1] <= sl.d[0] {
			t.Errorf("requests = %d, waits = %v; want 3 requests and two growing waits", len(s.bodies), sl.d)
		}
	})

	t.Run("500 until attempts run out", func(t *testing.T) {
		s, p, _ := su.start(t, su.errReply(500, nil), su.errReply(500, nil), su.errReply(500, nil), reply{body: su.text})
		_, err := llm.Collect(p.Stream(t.Context(), Request(su.b.Model)), nil)
		var e *llm.Error
		if !errors.As(err, &e) || e.Status != 500 {
			t.Fatalf("err = %v, want an *llm.Error with status 500", err)
		}
		if len(s.bodies) != 3 {
			t.Errorf("requests = %d, want 3 (the bound)", len(s.bodies))
		}
	})

	t.Run("400 not retried", func(t *testing.T) {
		s, p, sl := su.start(t, su.errReply(400, nil), reply{body: su.text})
		_, err := llm.Collect(p.Stream(t.Context(), Request(su.b.Model)), nil)
		var e *llm.Error
		if !errors.As(err, &e) || e.Status != 400 || e.Retryable() {
			t.Fatalf("err = %#v, want a non-retryable *llm.Error with status 400", err)
		}
		if len(s.bodies) != 1 || len(sl.d) != 0 {
			t.Errorf("requests = %d, waits = %v; want 1 request, no wait", len(s.bodies), sl.d)
		}
	})

	t.Run("connection reset before output retried", func(t *testing.T) {
		s, p, sl := su.start(t, reply{reset: true}, reply{body: su.text})
		if _, err := llm.Collect(p.Stream(t.Context(), Request(su.b.Model)), nil); err != nil {
			t.Fatal(err)
		}
		if len(s.bodies) != 2 || len(sl.d) != 1 {
			t.Errorf("requests = %d, waits = %v; want 2 requests and one wait", len(s.bodies), sl.d)
		}
	})
}

// streams: a stream that breaks, is malformed, or is left early.
func (su *suite) streams(t *testing.T) {
	t.Run("connection dropped mid-stream not retried", func(t *testing.T) {
		s, p, _ := su.start(t, reply{body: su.text, cut: su.cut, reset: true}, reply{body: su.text})
		var got []llm.Event
		_, err := llm.Collect(p.Stream(t.Context(), Request(su.b.Model)), func(ev llm.Event) { got = append(got, ev) })
		if err == nil {
			t.Fatal("a dropped stream ended without error")
		}
		if len(got) == 0 || len(s.bodies) != 1 {
			t.Errorf("events = %d, requests = %d; want output then one request only", len(got), len(s.bodies))
		}
	})

	t.Run("malformed chunk", func(t *testing.T) {
		s, p, _ := su.start(t, reply{body: su.read(t, "malformed")}, reply{body: su.text})
		_, err := llm.Collect(p.Stream(t.Context(), Request(su.b.Model)), nil)
		var e *llm.Error
		if !errors.As(err, &e) || e.Retryable() {
			t.Fatalf("err = %v, want a non-retryable *llm.Error", err)
		}
		if len(s.bodies) != 1 {
			t.Errorf("requests = %d, want 1", len(s.bodies))
		}
	})

	t.Run("cancellation mid-stream", func(t *testing.T) {
		s, p, _ := su.start(t, reply{body: su.text, cut: su.cut, hang: true})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var err error
		n := 0
		for ev, e := range p.Stream(ctx, Request(su.b.Model)) {
			if e != nil {
				err = e
				break
			}
			n++
			if ev.Type == llm.EventText {
				cancel()
			}
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if n == 0 || len(s.bodies) != 1 {
			t.Errorf("events = %d, requests = %d", n, len(s.bodies))
		}
	})

	t.Run("breaking out of the stream early", func(t *testing.T) {
		_, p, _ := su.start(t, reply{body: su.text, cut: su.cut, hang: true})
		// A context that outlives the test: only breaking out may
		// release the call.
		for range p.Stream(context.Background(), Request(su.b.Model)) {
			break
		}
	})
}

// noLeak fails t if goroutines started during it are still running once
// it and its cleanups are done (idle keep-alive connections aside).
func noLeak(t *testing.T) {
	idle := func() {
		if tr, ok := http.DefaultTransport.(*http.Transport); ok {
			tr.CloseIdleConnections()
		}
	}
	idle()
	time.Sleep(10 * time.Millisecond)
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			idle()
			n := runtime.NumGoroutine()
			if n <= base {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				t.Errorf("%d goroutines leaked:\n%s", n-base, buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

func cutAfterHello(t *testing.T, body []byte) int {
	i := bytes.Index(body, []byte("Hello"))
	if i < 0 {
		t.Fatal("text fixture has no \"Hello\"")
	}
	for _, sep := range []string{"\r\n\r\n", "\n\n"} {
		if j := bytes.Index(body[i:], []byte(sep)); j >= 0 {
			return i + j + len(sep)
		}
	}
	t.Fatal("text fixture has no event boundary after \"Hello\"")
	return 0
}

func events(evs []llm.Event) []byte {
	var buf bytes.Buffer
	for _, ev := range evs {
		line, _ := json.Marshal(ev)
		buf.Write(line)
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

// Golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", path, d)
	}
}

// Golden is golden for other packages' tests.
func Golden(t *testing.T, name string, got []byte) { golden(t, name, got) }

// Bench measures one streamed call of body through the backend's real
// SDK client over loopback, and reports the cost per yielded event.
func Bench(b *testing.B, bk Backend, body []byte) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", bk.ContentType)
		w.Write(body)
	}))
	defer ts.Close()
	p := bk.New(b, ts.URL)
	req := Request(bk.Model)
	events := 0
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for _, err := range p.Stream(context.Background(), req) {
			if err != nil {
				b.Fatal(err)
			}
			events++
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
}

// Repeat builds a long stream from a recorded one: head, then middle
// repeated n times, then tail, each given as text.
func Repeat(head, middle, tail string, n int) []byte {
	return []byte(head + strings.Repeat(middle, n) + tail)
}
