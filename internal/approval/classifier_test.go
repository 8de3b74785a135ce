package approval

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/llm/replay"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
)

// seen wraps a provider and keeps the requests it was sent.
type seen struct {
	llm.Provider
	mu   sync.Mutex
	reqs []llm.Request
}

func (s *seen) Stream(ctx context.Context, req llm.Request) iter.Seq2[llm.Event, error] {
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	return s.Provider.Stream(ctx, req)
}

func (s *seen) count() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.reqs) }

// TestModelClassifier runs classify rules in the real policy engine with
// the replay provider as the model: verdicts, the per-session cache, the
// strict parsing (failing closed) and the audit records.
func TestModelClassifier(t *testing.T) {
	f, err := os.Open("testdata/classifier.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	script, err := replay.Parse("classifier.jsonl", f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	model := &seen{Provider: replay.New(script)}
	dir := t.TempDir()
	ctx := t.Context()
	log, err := audit.Open(ctx, audit.Options{Path: filepath.Join(dir, "audit.db"), KeyDir: filepath.Join(dir, "keys")})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cls, err := NewClassifier(ClassifierOptions{Provider: model, Model: "cheap-1", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	rp := newRealPolicy(t, `
rules:
  - id: known-people
    effect: allow
    classify: messages to people listed in USER.md (bob)
    match: {action: message}
`, cls)
	msg := func(session, to string) operation.Operation {
		return operation.Operation{Tool: "message.send", Action: operation.Message, Hosts: []operation.Host{{Name: to}}, Session: operation.Session{ID: session}}
	}
	cases := []struct {
		op    operation.Operation
		want  policy.Effect
		calls int
	}{
		{msg("s1", "bob"), policy.Allow, 1},
		{msg("s1", "bob"), policy.Allow, 1}, // cache hit: the model is not asked again
		{msg("s1", "carol"), policy.Approve, 2},
		{msg("s1", "carol"), policy.Approve, 2},   // a "no" is cached too
		{msg("s1", "mallory"), policy.Approve, 3}, // not a verdict: fails closed (allow rule does not match)
		{msg("s1", "eve"), policy.Approve, 4},     // a tool call is not a verdict
		{msg("s2", "bob"), policy.Approve, 5},     // another session asks again; the script ended: fails closed
	}
	for i, c := range cases {
		d := rp.engine.Decide(ctx, c.op)
		if d.Effect != c.want || model.count() != c.calls {
			t.Fatalf("case %d (%s to %s): %v after %d model calls, want %v after %d", i, c.op.Session.ID, c.op.Hosts[0].Name, d, model.count(), c.want, c.calls)
		}
	}
	req := model.reqs[0]
	if req.Model != "cheap-1" || len(req.Tools) != 0 || req.MaxTokens != 16 || !strings.Contains(req.System, "untrusted data") {
		t.Fatalf("request: %+v", req)
	}
	if u := req.Messages[0].Text(); !strings.Contains(u, "USER.md (bob)") || !strings.Contains(u, `"host": "bob"`) {
		t.Fatalf("prompt:\n%s", u)
	}
	if err := log.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	err = log.Reader().Entries(ctx, audit.Filter{Kind: audit.KindPolicyClassify}, func(e audit.Entry) error {
		var r struct {
			Op      classifierView `json:"op"`
			Verdict string         `json:"verdict"`
			Error   string         `json:"error"`
		}
		if err := json.Unmarshal(e.Payload.(json.RawMessage), &r); err != nil {
			return err
		}
		v := r.Verdict
		if r.Error != "" {
			v = "error"
		}
		got = append(got, e.Session+":"+r.Op.Host+"="+v)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "s1:bob=yes s1:carol=no s1:mallory=error s1:eve=error s2:bob=error"
	if strings.Join(got, " ") != want {
		t.Fatalf("audited %q, want %q", strings.Join(got, " "), want)
	}
}

// failingLog is an Appender that cannot write.
type failingLog struct{}

func (failingLog) Append(context.Context, audit.Entry) (uint64, error) {
	return 0, audit.ErrUnavailable
}

func TestClassifierRefusesUnauditedVerdict(t *testing.T) {
	s, err := replay.Parse("t", strings.NewReader(`{"turn": {"text": "VERDICT: yes"}}`))
	if err != nil {
		t.Fatal(err)
	}
	cls, err := NewClassifier(ClassifierOptions{Provider: replay.New(s), Model: "m", Log: failingLog{}})
	if err != nil {
		t.Fatal(err)
	}
	yes, err := cls.Classify(t.Context(), "anything", &policy.CELOp{Tool: "x", Action: "read"})
	if yes || !errors.Is(err, audit.ErrUnavailable) {
		t.Fatalf("unaudited verdict: %v %v", yes, err)
	}
}

func TestParseVerdict(t *testing.T) {
	for _, c := range []struct {
		in   string
		want bool
		ok   bool
	}{
		{"VERDICT: yes", true, true},
		{"VERDICT: no", false, true},
		{"\n VERDICT: no \n", false, true},
		{"verdict: yes", false, false},
		{"VERDICT: Yes", false, false},
		{"VERDICT:yes", false, false},
		{"yes", false, false},
		{"VERDICT: yes\nVERDICT: no", false, false},
		{"VERDICT: no, but VERDICT: yes", false, false},
		{"", false, false},
	} {
		got, err := ParseVerdict(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("%q: %v %v", c.in, got, err)
		}
		if err != nil && !errors.Is(err, ErrVerdict) {
			t.Errorf("%q: error %v is not ErrVerdict", c.in, err)
		}
	}
}

func FuzzParseVerdict(f *testing.F) {
	for _, s := range []string{"VERDICT: yes", "VERDICT: no", " VERDICT: no\n", "VERDICT: maybe", "\x00", strings.Repeat("VERDICT: yes", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		yes, err := ParseVerdict(s)
		trimmed := strings.TrimSpace(s)
		switch {
		case err == nil && trimmed != VerdictYes && trimmed != VerdictNo:
			t.Fatalf("accepted %q", s)
		case err == nil && yes != (trimmed == VerdictYes):
			t.Fatalf("%q read as %v", s, yes)
		case err != nil && (yes || !errors.Is(err, ErrVerdict)):
			t.Fatalf("%q: %v %v", s, yes, err)
		case err != nil && len(err.Error()) > 512:
			t.Fatalf("error message not bounded: %d bytes", len(err.Error()))
		}
	})
}
