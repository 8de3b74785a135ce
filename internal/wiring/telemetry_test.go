package wiring

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/datadir"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/llm/replay"
	"github.com/fluffy-agent/fluffy/internal/store"
	"github.com/fluffy-agent/fluffy/internal/tdd"
	"github.com/fluffy-agent/fluffy/internal/telemetry"
)

// receiver is a minimal OTLP trace receiver on the official protobuf
// types: it keeps every export request and the authorization header.
type receiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu      sync.Mutex
	reqs    []*coltracepb.ExportTraceServiceRequest
	auth    []string
	metrics metricsReceiver
}

// metricsReceiver is the same receiver's metrics service.
type metricsReceiver struct {
	colmetricpb.UnimplementedMetricsServiceServer
	mu   sync.Mutex
	reqs []*colmetricpb.ExportMetricsServiceRequest
}

func (mr *metricsReceiver) Export(_ context.Context, req *colmetricpb.ExportMetricsServiceRequest) (*colmetricpb.ExportMetricsServiceResponse, error) {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	mr.reqs = append(mr.reqs, req)
	return &colmetricpb.ExportMetricsServiceResponse{}, nil
}

// sum returns the value of the counter name in the newest export (-1:
// not there).
func (mr *metricsReceiver) sum(name string) float64 {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if len(mr.reqs) == 0 {
		return -1
	}
	for _, rm := range mr.reqs[len(mr.reqs)-1].ResourceMetrics {
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name == name && m.GetSum() != nil && len(m.GetSum().DataPoints) == 1 {
					return m.GetSum().DataPoints[0].GetAsDouble()
				}
			}
		}
	}
	return -1
}

func (rc *receiver) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	rc.keep(req, strings.Join(md.Get("authorization"), ","))
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (rc *receiver) keep(req *coltracepb.ExportTraceServiceRequest, auth string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.reqs = append(rc.reqs, req)
	rc.auth = append(rc.auth, auth)
}

// ServeHTTP is OTLP/HTTP with binary protobuf bodies.
func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.URL.Path == "/v1/metrics" && r.Header.Get("Content-Type") == "application/x-protobuf" {
		b, err := io.ReadAll(r.Body)
		req := new(colmetricpb.ExportMetricsServiceRequest)
		if err == nil {
			err = proto.Unmarshal(b, req)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out, _ := rc.metrics.Export(r.Context(), req)
		b, _ = proto.Marshal(out)
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(b)
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "not an OTLP/HTTP protobuf export", http.StatusBadRequest)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := new(coltracepb.ExportTraceServiceRequest)
	if err := proto.Unmarshal(b, req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.keep(req, r.Header.Get("Authorization"))
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// spans returns every span received, and the requests' bytes.
func (rc *receiver) spans() ([]*tracepb.Span, []byte) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []*tracepb.Span
	var raw []byte
	for _, req := range rc.reqs {
		b, _ := proto.Marshal(req)
		raw = append(raw, b...)
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				out = append(out, ss.Spans...)
			}
		}
	}
	return out, raw
}

func attr(s *tracepb.Span, key string) *commonpb.AnyValue {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value
		}
	}
	return nil
}

func seqsOf(s *tracepb.Span) []int64 {
	v := attr(s, "fluffy.audit.seqs")
	if v == nil {
		return nil
	}
	var out []int64
	for _, e := range v.GetArrayValue().GetValues() {
		out = append(out, e.GetIntValue())
	}
	return out
}

// secretTask is prompt text that must never reach a span by default.
const secretTask = "write the launch code 7741-PROMPT-TEXT into notes.txt"

// TestTracesReachAnOTLPReceiver runs a replay session's turn through the
// kernel and the session's router as the daemon wires them, with the
// export pointed at a receiver in the test (OTLP over HTTP, then gRPC),
// and checks the span tree (turn → model calls and the tool call → its
// gates and execution), the GenAI attributes, that each span's
// fluffy.audit.seqs are exactly the audit entries of its trace, and that
// no prompt text is sent unless telemetry.include_content is on.
func TestTracesReachAnOTLPReceiver(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("change sets need root here")
	}
	for _, tc := range []struct {
		protocol string
		content  bool
	}{{"http", false}, {"grpc", true}} {
		t.Run(tc.protocol, func(t *testing.T) {
			rc := &receiver{}
			var endpoint string
			if tc.protocol == "http" {
				srv := httptest.NewServer(rc)
				t.Cleanup(srv.Close)
				endpoint = srv.URL
			} else {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				gs := grpc.NewServer()
				coltracepb.RegisterTraceServiceServer(gs, rc)
				colmetricpb.RegisterMetricsServiceServer(gs, &rc.metrics)
				go func() { _ = gs.Serve(ln) }()
				t.Cleanup(gs.Stop)
				endpoint = "http://" + ln.Addr().String()
			}
			tracedTurn(t, rc, config.Telemetry{OTLPEndpoint: endpoint, OTLPProtocol: tc.protocol, HeadersEnv: "OTLP_TEST_HEADERS", IncludeContent: tc.content})
		})
	}
}

func tracedTurn(t *testing.T, rc *receiver, tc config.Telemetry) {
	ctx := t.Context()
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	u := testUser(t, dir, ws)
	u.Environ = append(u.Environ, "OTLP_TEST_HEADERS=authorization=Bearer%20t0k")
	log := u.Logger()
	metrics := telemetry.NewMetrics()
	tr, exp, err := startTelemetry(ctx, u, tc, metrics)
	if err != nil {
		t.Fatal(err)
	}
	al, j, m := sessionStores(t, dir)
	d, err := datadir.New(filepath.Join(dir, "data"))
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
	t.Cleanup(func() { db.Close() })
	script := `{"turn": {"tool_calls": [{"id": "c1", "name": "fs.write", "args": {"path": "notes.txt", "content": "hello\n"}}]}}
{"expect": {"id": "c1", "contains": "wrote "}}
{"turn": {"text": "done"}}
{"end": {}}
`
	// A classify rule the classifier (a replayed model) says does not
	// apply: the policy gate asks it, and the write goes ahead.
	live := &livePolicy{u: u, log: log, audit: al}
	verdict, err := replay.Parse("classifier.jsonl", strings.NewReader(`{"turn": {"text": "VERDICT: no"}}`+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if live.classifier, err = approval.NewClassifier(approval.ClassifierOptions{Provider: replay.New(verdict), Model: "judge", Log: al}); err != nil {
		t.Fatal(err)
	}
	pf := u.PolicyFiles().User
	if err := os.MkdirAll(filepath.Dir(pf), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pf, []byte("rules:\n  - id: secrets\n    effect: block\n    classify: writes a secret\n    match: {tool: fs.write}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k, err := kernel.Start(ctx, kernel.Options{DB: db, Audit: al, DataDir: d,
		Models: func(context.Context, string) (llm.Provider, string, error) {
			s, err := replay.Parse("traced.jsonl", strings.NewReader(script))
			if err != nil {
				return nil, "", err
			}
			return replay.New(s), "test", nil
		},
		Tools:  sessionTools(u, log, nil, live, nil, newSessionBoxes(log, func() resolved { return resolved{} }), nil, memoryDeps{now: time.Now}, nil, nil, observe{tracer: tr}),
		TDD:    &kernel.TDDOptions{Machine: m, Journal: j, Mode: tdd.Explore},
		Tracer: tr, Metrics: metrics, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop(context.WithoutCancel(ctx), "test")
	info, err := k.Create(ctx, kernel.CreateParams{Workspace: ws, Task: secretTask, Model: "replay/test"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := k.Run(ctx, info.ID, nil); err != nil || res.Reason != "done" {
		t.Fatalf("run: %+v, %v", res, err)
	}
	if err := exp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	var mb strings.Builder
	if err := metrics.WritePrometheus(&mb); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(mb.String(), "fluffy_session_turns_total 1\n") || !strings.Contains(mb.String(), "fluffy_session_turns_running 0\n") {
		t.Errorf("turn metrics:\n%s", mb.String())
	}
	// The same registry went to the receiver over OTLP at the shutdown.
	if got := rc.metrics.sum(telemetry.MetricTurns); got != 1 {
		t.Errorf("OTLP metrics: %s = %v, want 1", telemetry.MetricTurns, got)
	}

	spans, raw := rc.spans()
	byName := map[string][]*tracepb.Span{}
	for _, s := range spans {
		byName[s.Name] = append(byName[s.Name], s)
	}
	one := func(name string) *tracepb.Span {
		t.Helper()
		if len(byName[name]) != 1 {
			var names []string
			for _, s := range spans {
				names = append(names, s.Name)
			}
			t.Fatalf("%d spans named %q; spans: %v", len(byName[name]), name, names)
		}
		return byName[name][0]
	}
	turn := one("fluffy.turn")
	if len(turn.ParentSpanId) != 0 {
		t.Error("the turn is not the root span")
	}
	tool := one("execute_tool fs.write")
	childOf := func(s, parent *tracepb.Span) {
		t.Helper()
		if !bytes.Equal(s.ParentSpanId, parent.SpanId) || !bytes.Equal(s.TraceId, turn.TraceId) {
			t.Errorf("span %s is not a child of %s", s.Name, parent.Name)
		}
	}
	childOf(tool, turn)
	chats := byName["chat test"]
	if len(chats) != 2 {
		t.Fatalf("%d model call spans, want 2", len(chats))
	}
	for _, c := range chats {
		childOf(c, turn)
		if attr(c, "gen_ai.operation.name").GetStringValue() != "chat" || attr(c, "gen_ai.request.model").GetStringValue() != "test" ||
			attr(c, "gen_ai.provider.name").GetStringValue() != "replay" || attr(c, "gen_ai.usage.input_tokens").GetIntValue() <= 0 ||
			attr(c, "gen_ai.usage.output_tokens") == nil || attr(c, "gen_ai.response.finish_reasons") == nil {
			t.Errorf("model span lacks GenAI attributes: %v", c.Attributes)
		}
	}
	if attr(tool, "gen_ai.tool.name").GetStringValue() != "fs.write" || attr(tool, "gen_ai.tool.call.id").GetStringValue() != "c1" {
		t.Errorf("tool span attributes: %v", tool.Attributes)
	}
	state, pol, exec := one("fluffy.gate.state"), one("fluffy.gate.policy"), one("fluffy.tool.execution")
	for _, s := range []*tracepb.Span{state, pol, exec} {
		childOf(s, tool)
		if len(seqsOf(s)) == 0 {
			t.Errorf("span %s carries no audit sequence numbers", s.Name)
		}
	}
	if attr(pol, "fluffy.decision").GetStringValue() != "allow" || attr(pol, "fluffy.rule").GetStringValue() == "" {
		t.Errorf("policy gate span: %v", pol.Attributes)
	}
	cls := one("fluffy.policy.classify")
	childOf(cls, pol)
	if attr(cls, "gen_ai.request.model").GetStringValue() != "judge" || attr(cls, "fluffy.decision").GetStringValue() != "no" {
		t.Errorf("classifier span: %v", cls.Attributes)
	}

	// The spans' seqs are exactly the audit entries of the trace, and
	// each of those entries is the kind its span says.
	trace := hex.EncodeToString(turn.TraceId)
	kinds := map[int64]audit.Kind{}
	if err := al.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := al.Reader().Entries(ctx, audit.Filter{Trace: trace}, func(e audit.Entry) error {
		kinds[int64(e.Seq)] = e.Kind
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var fromSpans []int64
	for _, s := range spans {
		fromSpans = append(fromSpans, seqsOf(s)...)
	}
	slices.Sort(fromSpans)
	var fromLog []int64
	for seq := range kinds {
		fromLog = append(fromLog, seq)
	}
	slices.Sort(fromLog)
	if len(fromLog) == 0 || !slices.Equal(fromSpans, fromLog) {
		t.Errorf("span seqs %v, audit entries of trace %s %v", fromSpans, trace, fromLog)
	}
	for _, want := range []struct {
		s    *tracepb.Span
		kind audit.Kind
	}{{state, audit.KindGateState}, {pol, audit.KindGatePolicy}, {cls, audit.KindPolicyClassify}} {
		if seqs := seqsOf(want.s); len(seqs) != 1 || kinds[seqs[0]] != want.kind {
			t.Errorf("span %s seqs %v, want one %s entry", want.s.Name, seqs, want.kind)
		}
	}

	if got := bytes.Contains(raw, []byte("7741-PROMPT-TEXT")); got != tc.IncludeContent {
		t.Errorf("prompt text in the export: %v, include_content %v", got, tc.IncludeContent)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.auth) == 0 || rc.auth[0] != "Bearer t0k" {
		t.Errorf("export headers: authorization %q", rc.auth)
	}
}
