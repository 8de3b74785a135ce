package telemetry

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Metrics are the daemon's counters, gauges and histograms, written in
// the Prometheus text format (WritePrometheus) for /metrics on the health
// listener, and read as a Snapshot by the OTLP export
// (internal/telemetry/otlp). The nil *Metrics is valid and counts nothing.
//
// The exposition is written here rather than with the Prometheus client
// library: a dozen series do not need its dependency tree, and the
// format is small and stable.
type Metrics struct {
	start  time.Time // when counting began: the cumulative series' start
	mu     sync.Mutex
	series map[string]*series // by name
	funcs  []gaugeFunc
}

// Metric names.
const (
	MetricTurns           = "fluffy_session_turns_total"
	MetricTurnsRunning    = "fluffy_session_turns_running"
	MetricToolCalls       = "fluffy_tool_calls_total"
	MetricApprovalsWait   = "fluffy_approvals_waiting"
	MetricSandboxStart    = "fluffy_sandbox_start_seconds"
	MetricAuditAppend     = "fluffy_audit_append_seconds"
	MetricInboxQueue      = "fluffy_serve_queued_messages"
	MetricChannelMessages = "fluffy_channel_messages_total"
	MetricAuditQueue      = "fluffy_audit_queued_entries"
	MetricSchedQueue      = "fluffy_sched_queued_tasks"
)

var help = map[string]string{
	MetricTurns:           "Session turns (runs of a session) started.",
	MetricTurnsRunning:    "Session turns running now.",
	MetricToolCalls:       "Tool calls by outcome: the policy's effect (allow, approve, block), the gate that refused it, or runtime.",
	MetricApprovalsWait:   "Tool calls waiting for a person's approval now.",
	MetricSandboxStart:    "Time from a sandboxed command's request to the start of the command, by start mode.",
	MetricAuditAppend:     "Time the router's audit appends take (a synchronous kind waits for the disk).",
	MetricInboxQueue:      "Messages fluffy serve has queued for sessions' next turns.",
	MetricChannelMessages: "Inbound channel messages by channel.",
	MetricAuditQueue:      "Audit entries appended and not yet on disk.",
	MetricSchedQueue:      "Tasks (model calls, sandboxed commands) waiting for the scheduler.",
}

// buckets of the latency histograms, in seconds: 100 µs to 10 s.
var buckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

type series struct {
	kind   string              // counter, gauge, histogram
	values map[string]float64  // counters and gauges, by label text
	hists  map[string]*histVal // histograms, by label text
	pairs  map[string][]string // the label pairs of each label text
}

type histVal struct {
	counts []uint64 // per bucket, not cumulative
	sum    float64
	n      uint64
}

type gaugeFunc struct {
	name string
	fn   func() float64
}

// NewMetrics returns an empty registry.
func NewMetrics() *Metrics { return &Metrics{start: time.Now(), series: map[string]*series{}} }

// labels renders label pairs (name, value, name, value...) sorted by name.
func labels(kv []string) string {
	if len(kv) == 0 {
		return ""
	}
	type pair struct{ k, v string }
	ps := make([]pair, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		ps = append(ps, pair{kv[i], kv[i+1]})
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].k < ps[j].k })
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p.k)
		b.WriteString(`="`)
		b.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(p.v))
		b.WriteByte('"')
	}
	return b.String()
}

func (m *Metrics) get(name, kind string) *series {
	s := m.series[name]
	if s == nil {
		s = &series{kind: kind, values: map[string]float64{}, hists: map[string]*histVal{}, pairs: map[string][]string{}}
		m.series[name] = s
	}
	return s
}

// Add adds d to the counter or gauge name with the label pairs kv.
func (m *Metrics) Add(name string, d float64, kv ...string) {
	if m == nil {
		return
	}
	kind := KindCounter
	if !strings.HasSuffix(name, "_total") {
		kind = KindGauge
	}
	l := labels(kv)
	m.mu.Lock()
	s := m.get(name, kind)
	s.values[l] += d
	s.keepPairs(l, kv)
	m.mu.Unlock()
}

// Observe records a duration in the histogram name.
func (m *Metrics) Observe(name string, d time.Duration, kv ...string) {
	if m == nil {
		return
	}
	l := labels(kv)
	v := d.Seconds()
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.get(name, KindHistogram)
	h := s.hists[l]
	if h == nil {
		h = &histVal{counts: make([]uint64, len(buckets))}
		s.hists[l] = h
		s.keepPairs(l, kv)
	}
	if i := sort.SearchFloat64s(buckets, v); i < len(buckets) {
		h.counts[i]++
	}
	h.sum += v
	h.n++
}

// keepPairs remembers the label pairs behind the label text l.
func (s *series) keepPairs(l string, kv []string) {
	if _, ok := s.pairs[l]; !ok {
		s.pairs[l] = slices.Clone(kv[:len(kv)&^1])
	}
}

// GaugeFunc makes name a gauge read from fn at each scrape.
func (m *Metrics) GaugeFunc(name string, fn func() float64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.funcs = append(m.funcs, gaugeFunc{name, fn})
	m.mu.Unlock()
}

// WritePrometheus writes every series in the Prometheus text exposition
// format (version 0.0.4), names sorted.
func (m *Metrics) WritePrometheus(w io.Writer) error {
	var b strings.Builder
	m.mu.Lock()
	funcs := slices.Clone(m.funcs)
	names := make([]string, 0, len(m.series))
	for n := range m.series {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := m.series[n]
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", n, help[n], n, s.kind)
		if s.kind == KindHistogram {
			writeHists(&b, n, s.hists)
			continue
		}
		for _, l := range sortedKeys(s.values) {
			fmt.Fprintf(&b, "%s%s %s\n", n, braces(l), num(s.values[l]))
		}
	}
	m.mu.Unlock()
	// Outside the lock: a gauge function may take its own locks.
	for _, f := range funcs {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n%s %s\n", f.name, help[f.name], f.name, f.name, num(f.fn()))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeHists(b *strings.Builder, n string, hs map[string]*histVal) {
	ls := make([]string, 0, len(hs))
	for l := range hs {
		ls = append(ls, l)
	}
	sort.Strings(ls)
	for _, l := range ls {
		h := hs[l]
		sep := ""
		if l != "" {
			sep = ","
		}
		var cum uint64
		for i, ub := range buckets {
			cum += h.counts[i]
			fmt.Fprintf(b, "%s_bucket{%s%sle=\"%s\"} %d\n", n, l, sep, num(ub), cum)
		}
		fmt.Fprintf(b, "%s_bucket{%s%sle=\"+Inf\"} %d\n", n, l, sep, h.n)
		fmt.Fprintf(b, "%s_sum%s %s\n%s_count%s %d\n", n, braces(l), num(h.sum), n, braces(l), h.n)
	}
}

func sortedKeys(m map[string]float64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func braces(l string) string {
	if l == "" {
		return ""
	}
	return "{" + l + "}"
}

func num(v float64) string {
	if math.IsInf(v, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// Kinds of a Family.
const (
	KindCounter   = "counter"
	KindGauge     = "gauge"
	KindHistogram = "histogram"
)

// Family is one metric at a Snapshot: its name, help text, kind and a
// Point per label set, in the label text's order.
type Family struct {
	Name, Help, Kind string
	Points           []Point
}

// Point is one series' value. Labels are name, value pairs as recorded.
// A counter or gauge has Value; a histogram has Counts (per bucket of
// Buckets, not cumulative, then the overflow past the last bound), Sum
// and Count.
type Point struct {
	Labels []string
	Value  float64
	Counts []uint64
	Sum    float64
	Count  uint64
}

// Buckets are the histograms' upper bounds in seconds.
func Buckets() []float64 { return slices.Clone(buckets) }

// Start is when the registry began counting: the start of every
// cumulative series.
func (m *Metrics) Start() time.Time {
	if m == nil {
		return time.Time{}
	}
	return m.start
}

// Snapshot returns every series now, names sorted, the gauge functions
// read (outside the registry's lock, as a scrape reads them).
func (m *Metrics) Snapshot() []Family {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	funcs := slices.Clone(m.funcs)
	names := make([]string, 0, len(m.series))
	for n := range m.series {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]Family, 0, len(names)+len(funcs))
	for _, n := range names {
		s := m.series[n]
		f := Family{Name: n, Help: help[n], Kind: s.kind}
		if s.kind == KindHistogram {
			for _, l := range slices.Sorted(maps.Keys(s.hists)) {
				h := s.hists[l]
				over := h.n
				for _, c := range h.counts {
					over -= c
				}
				f.Points = append(f.Points, Point{Labels: s.pairs[l], Counts: append(slices.Clone(h.counts), over), Sum: h.sum, Count: h.n})
			}
		} else {
			for _, l := range sortedKeys(s.values) {
				f.Points = append(f.Points, Point{Labels: s.pairs[l], Value: s.values[l]})
			}
		}
		out = append(out, f)
	}
	m.mu.Unlock()
	for _, g := range funcs {
		out = append(out, Family{Name: g.name, Help: help[g.name], Kind: KindGauge, Points: []Point{{Value: g.fn()}}})
	}
	return out
}
