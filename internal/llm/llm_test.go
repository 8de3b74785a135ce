package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/llm"
)

// feed runs args, cut into the given pieces, through an Assembler.
func feed(a *llm.Assembler, index int, id, name string, pieces []string) (llm.Event, error) {
	a.Start(index, id, name)
	for _, p := range pieces {
		a.Delta(index, p)
	}
	return a.End(index)
}

func TestAssembler(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pieces []string
		want   string
		err    string
	}{
		{"one piece", []string{`{"a": 1}`}, `{"a":1}`, ""},
		{"many pieces", []string{`{"pa`, `th": "x`, `\"y"`, `, "n": [1,`, ` 2]}`}, `{"path":"x\"y","n":[1,2]}`, ""},
		{"empty means {}", nil, `{}`, ""},
		{"whitespace means {}", []string{" ", "\n"}, `{}`, ""},
		{"array refused", []string{`[1]`}, "", "want an object"},
		{"null refused", []string{`null`}, "", "want an object"},
		{"truncated", []string{`{"a": `}, "", "unexpected EOF"},
		{"two objects", []string{`{}{}`}, "", "trailing data"},
		{"trailing garbage", []string{`{} x`}, "", "trailing data"},
		{"big numbers kept", []string{`{"n": 12345678901234567890}`}, `{"n":12345678901234567890}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a llm.Assembler
			ev, err := feed(&a, 0, "id1", "tool", tc.pieces)
			if tc.err != "" {
				var ae *llm.ArgsError
				if !errors.As(err, &ae) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want an ArgsError containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(ev.Call.Args) != tc.want {
				t.Errorf("args = %s, want %s", ev.Call.Args, tc.want)
			}
		})
	}
}

func TestAssemblerIDs(t *testing.T) {
	var a llm.Assembler
	var ids []string
	for i, id := range []string{"", "x", "x", "", "call_2", "call_1"} {
		ids = append(ids, a.Start(i, id, "t").ID)
	}
	want := []string{"call_1", "x", "x_2", "call_4", "call_2", "call_1_2"}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Errorf("ids = %v, want %v", ids, want)
	}
	// Interleaved calls end in start order with EndAll.
	a.Delta(3, `{"b":`)
	a.Delta(0, `{"a":1}`)
	a.Delta(3, `2}`)
	evs, err := a.EndAll()
	if err != nil || len(evs) != 6 || string(evs[3].Call.Args) != `{"b":2}` {
		t.Fatalf("EndAll = %+v, %v", evs, err)
	}
	if _, err := a.End(9); err == nil {
		t.Error("End of a call never started succeeded")
	}
	var b llm.Assembler
	b.Delta(0, "{}")
	if _, err := b.End(0); err == nil {
		t.Error("a call without a name was accepted")
	}
}

// FuzzAssembler cuts a JSON object at arbitrary boundaries and checks that
// the assembler joins it back to the same value, and that non-objects are
// refused, never accepted or panicking.
func FuzzAssembler(f *testing.F) {
	f.Add(`{"path": "go.mod", "n": [1, 2, {"x": "\u00e9\""}]}`, uint64(0x0123456789))
	f.Add(`{}`, uint64(7))
	f.Add(`[1,2]`, uint64(3))
	f.Add(`{"a":`, uint64(1))
	f.Fuzz(func(t *testing.T, args string, cuts uint64) {
		var pieces []string
		s := args
		for len(s) > 0 {
			n := int(cuts%7) + 1
			cuts = cuts/7 + uint64(len(s))
			n = min(n, len(s))
			pieces = append(pieces, s[:n])
			s = s[n:]
		}
		var a llm.Assembler
		ev, err := feed(&a, 0, "", "tool", pieces)
		whole, werr := llm.NormalizeArgs([]byte(args))
		if (err == nil) != (werr == nil) {
			t.Fatalf("split: %v, whole: %v", err, werr)
		}
		if err != nil {
			return
		}
		if string(ev.Call.Args) != string(whole) {
			t.Fatalf("split joined to %s, whole is %s", ev.Call.Args, whole)
		}
		var v map[string]any
		if json.Unmarshal(ev.Call.Args, &v) != nil {
			t.Fatalf("accepted args %q are not an object", ev.Call.Args)
		}
	})
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		h    http.Header
		want time.Duration
	}{
		{nil, 0},
		{http.Header{"Retry-After": {"3"}}, 3 * time.Second},
		{http.Header{"Retry-After": {"0.5"}}, 500 * time.Millisecond},
		{http.Header{"Retry-After": {"-1"}}, 0},
		{http.Header{"Retry-After": {"soon"}}, 0},
		{http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, 90 * time.Second},
		{http.Header{"Retry-After": {now.Add(-time.Hour).Format(http.TimeFormat)}}, 0},
		{http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"9"}}, 250 * time.Millisecond},
	} {
		if got := llm.ParseRetryAfter(tc.h, now); got != tc.want {
			t.Errorf("ParseRetryAfter(%v) = %v, want %v", tc.h, got, tc.want)
		}
	}
}

// script is a real Provider whose calls fail or succeed in turn, used to
// test Retry without HTTP.
type script struct {
	calls int
	steps []func(yield func(llm.Event, error) bool)
}

func (s *script) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Event, error] {
	step := s.steps[min(s.calls, len(s.steps)-1)]
	s.calls++
	return step
}

func fail(err error) func(yield func(llm.Event, error) bool) {
	return func(yield func(llm.Event, error) bool) { yield(llm.Event{}, err) }
}

func ok(yield func(llm.Event, error) bool) {
	_ = yield(llm.Event{Type: llm.EventText, Text: "hi"}, nil) && yield(llm.Event{Type: llm.EventStop, Stop: llm.StopEnd}, nil)
}

func partialThen(err error) func(yield func(llm.Event, error) bool) {
	return func(yield func(llm.Event, error) bool) {
		if yield(llm.Event{Type: llm.EventText, Text: "par"}, nil) {
			yield(llm.Event{}, err)
		}
	}
}

func TestRetry(t *testing.T) {
	transient := &llm.Error{Provider: "p", Status: 503, Transient: true}
	limited := &llm.Error{Provider: "p", Status: 429, Transient: true, RetryAfter: time.Minute}
	permanent := &llm.Error{Provider: "p", Status: 401}
	reset := llm.Classify(context.Background(), "p", syscall.ECONNRESET, false)
	for _, tc := range []struct {
		name     string
		steps    []func(yield func(llm.Event, error) bool)
		opts     llm.RetryOptions
		calls    int
		waits    int
		err      string
		canceled bool
	}{
		{"success", nil, llm.RetryOptions{}, 1, 0, "", false},
		{"transient then ok", []func(func(llm.Event, error) bool){fail(transient), ok}, llm.RetryOptions{}, 2, 1, "", false},
		{"reset then ok", []func(func(llm.Event, error) bool){fail(reset), ok}, llm.RetryOptions{}, 2, 1, "", false},
		{"permanent", []func(func(llm.Event, error) bool){fail(permanent), ok}, llm.RetryOptions{}, 1, 0, "HTTP 401", false},
		{"attempts bound", []func(func(llm.Event, error) bool){fail(transient)}, llm.RetryOptions{Attempts: 3}, 3, 2, "HTTP 503", false},
		{"retry-after beyond budget", []func(func(llm.Event, error) bool){fail(limited), ok}, llm.RetryOptions{MaxElapsed: 30 * time.Second}, 1, 0, "exceeds the retry budget", false},
		{"never after output", []func(func(llm.Event, error) bool){partialThen(transient), ok}, llm.RetryOptions{}, 1, 0, "HTTP 503", false},
		{"plain error not retried", []func(func(llm.Event, error) bool){fail(errors.New("boom")), ok}, llm.RetryOptions{}, 1, 0, "boom", false},
		{"cancel while waiting", []func(func(llm.Event, error) bool){fail(transient), ok}, llm.RetryOptions{Sleep: func(ctx context.Context, d time.Duration) error { return context.Canceled }}, 1, 0, "canceled while waiting", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps := tc.steps
			if steps == nil {
				steps = []func(func(llm.Event, error) bool){ok}
			}
			s := &script{steps: steps}
			var waits []time.Duration
			o := tc.opts
			if o.Sleep == nil {
				o.Sleep = func(ctx context.Context, d time.Duration) error { waits = append(waits, d); return nil }
			}
			_, err := llm.Collect(llm.Retry(s, o).Stream(t.Context(), llm.Request{}), nil)
			if s.calls != tc.calls || len(waits) != tc.waits {
				t.Errorf("calls = %d, waits = %v; want %d calls, %d waits", s.calls, waits, tc.calls, tc.waits)
			}
			switch {
			case tc.err == "" && err != nil:
				t.Fatal(err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
}

func TestBackoffGrowsWithJitter(t *testing.T) {
	transient := &llm.Error{Status: 500, Transient: true}
	s := &script{steps: []func(func(llm.Event, error) bool){fail(transient), fail(transient), fail(transient), fail(transient), fail(transient), ok}}
	var waits []time.Duration
	r := 0.0
	o := llm.RetryOptions{Attempts: 6, BaseDelay: time.Second, MaxDelay: 4 * time.Second,
		Rand:  func() float64 { r += 0.2; return r },
		Sleep: func(ctx context.Context, d time.Duration) error { waits = append(waits, d); return nil }}
	if _, err := llm.Collect(llm.Retry(s, o).Stream(t.Context(), llm.Request{}), nil); err != nil {
		t.Fatal(err)
	}
	// ceilings 1s 2s 4s 4s 4s, times 0.2 0.4 0.6 0.8 1.0
	want := []time.Duration{200 * time.Millisecond, 800 * time.Millisecond, 2400 * time.Millisecond, 3200 * time.Millisecond, 4 * time.Second}
	if fmt.Sprint(waits) != fmt.Sprint(want) {
		t.Errorf("waits = %v, want %v", waits, want)
	}
}

func TestClassify(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if e := llm.Classify(ctx, "p", syscall.ECONNRESET, false); e.Retryable() || !errors.Is(e, context.Canceled) {
		t.Errorf("a cancelled call classified %v, retryable %v", e, e.Retryable())
	}
	if e := llm.Classify(context.Background(), "p", syscall.ECONNRESET, true); e.Retryable() {
		t.Error("a reset after output was marked retryable")
	}
	if e := llm.Classify(context.Background(), "p", &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}, false); e.Retryable() {
		t.Error("an unknown host was marked retryable")
	}
	if e := llm.Classify(context.Background(), "p", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, false); !e.Retryable() {
		t.Error("a refused connection before output was not retryable")
	}
	if e := llm.Classify(context.Background(), "p", errors.New("invalid character"), false); e.Retryable() {
		t.Error("a decode error was marked retryable")
	}
}

func TestCollect(t *testing.T) {
	seq := func(evs ...llm.Event) iter.Seq2[llm.Event, error] {
		return func(yield func(llm.Event, error) bool) {
			for _, ev := range evs {
				if !yield(ev, nil) {
					return
				}
			}
		}
	}
	call := &llm.ToolCall{ID: "a", Name: "t", Args: json.RawMessage(`{}`)}
	r, err := llm.Collect(seq(
		llm.Event{Type: llm.EventText, Text: "a"},
		llm.Event{Type: llm.EventToolCallStart, ID: "a"},
		llm.Event{Type: llm.EventText, Text: "b"},
		llm.Event{Type: llm.EventToolCallEnd, ID: "a", Call: call},
		llm.Event{Type: llm.EventUsage, Usage: &llm.Usage{InputTokens: 1}},
		llm.Event{Type: llm.EventUsage, Usage: &llm.Usage{InputTokens: 5, OutputTokens: 2}},
		llm.Event{Type: llm.EventStop, Stop: llm.StopEnd},
	), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Message.Text() != "ab" || len(r.Message.ToolCalls()) != 1 || r.Stop != llm.StopToolUse || r.Usage.InputTokens != 5 {
		t.Errorf("collected %+v", r)
	}
	if _, err := llm.Collect(seq(llm.Event{Type: llm.EventText, Text: "a"}), nil); err == nil {
		t.Error("a stream without stop was accepted")
	}
	if _, err := llm.Collect(seq(llm.Event{Type: llm.EventToolCallStart}, llm.Event{Type: llm.EventStop}), nil); err == nil {
		t.Error("a stream with an open call was accepted")
	}
}

func TestCost(t *testing.T) {
	p := llm.Price{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75}
	u := llm.Usage{InputTokens: 1_000_000, OutputTokens: 100_000, CacheReadTokens: 2_000_000, CacheWriteTokens: 0}
	if got := p.Cost(u); got < 5.099 || got > 5.101 {
		t.Errorf("cost = %v, want 5.10", got)
	}
	if got := u.Add(u).Total(); got != 6_200_000 {
		t.Errorf("total = %d", got)
	}
}

func TestEstimate(t *testing.T) {
	r := llm.Request{System: strings.Repeat("x", 400), Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{llm.Text(strings.Repeat("y", 40))}}}}
	if got := llm.EstimateRequest(r); got < 110 || got > 120 {
		t.Errorf("estimate = %d, want about 117", got)
	}
}

// BenchmarkAssembler measures joining one tool call streamed as 100
// argument fragments.
func BenchmarkAssembler(b *testing.B) {
	args := `{"argv": ["go", "test", "-run", "TestParse", "./internal/..."], "note": "` + strings.Repeat("x", 900) + `"}`
	var pieces []string
	for i := 0; i < len(args); i += 10 {
		pieces = append(pieces, args[i:min(i+10, len(args))])
	}
	b.SetBytes(int64(len(args)))
	b.ReportAllocs()
	for b.Loop() {
		var a llm.Assembler
		if _, err := feed(&a, 0, "id", "run", pieces); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(pieces)), "ns/fragment")
}
