package web_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/web"
)

// ttfb GETs path and returns the time to the response's first byte and
// to its end.
func ttfb(tb testing.TB, cl *http.Client, u string) (first, all time.Duration) {
	tb.Helper()
	var got time.Time
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotFirstResponseByte: func() { got = time.Now() }}))
	t0 := time.Now()
	resp, err := cl.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		tb.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET %s: %s", u, resp.Status)
	}
	return got.Sub(t0), time.Since(t0)
}

// report adds the median and p99 of ds as metrics.
func report(b *testing.B, name string, ds []time.Duration) {
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, name+"-p50-ms")
	b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds())/1000, name+"-p99-ms")
}

// BenchmarkSessionPage: time to first byte and to the end of a session's
// page holding 500 kept events.
func BenchmarkSessionPage(b *testing.B) {
	c := newConsole(b)
	cl, _ := c.login()
	for i := range 500 {
		c.hub.Publish(web.Event{Session: "s1", Type: "text", Text: strings.Repeat("model text ", 20) + strconv.Itoa(i)})
	}
	var first, all []time.Duration
	for b.Loop() {
		f, a := ttfb(b, cl, c.ts.URL+"/sessions/s1")
		first, all = append(first, f), append(all, a)
	}
	report(b, "ttfb", first)
	report(b, "full", all)
}

// BenchmarkStreamFirstEvent: from opening a session's stream to its
// first event, and from publishing an event to a listening page reading
// it.
func BenchmarkStreamFirstEvent(b *testing.B) {
	c := newConsole(b)
	cl, _ := c.login()
	c.hub.Publish(web.Event{Session: "s1", Type: "text", Text: "hello"})
	var open, live []time.Duration
	for b.Loop() {
		ctx, cancel := context.WithCancel(b.Context())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.ts.URL+"/sessions/s1/events?after="+strconv.FormatUint(c.hub.Last("s1")-1, 10), nil)
		t0 := time.Now()
		resp, err := cl.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		r := bufio.NewReader(resp.Body)
		waitEvent := func() {
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					b.Fatal(err)
				}
				if strings.HasPrefix(line, "event: ev") {
					return
				}
			}
		}
		waitEvent()
		open = append(open, time.Since(t0))
		t1 := time.Now()
		c.hub.Publish(web.Event{Session: "s1", Type: "text", Text: "next"})
		waitEvent()
		live = append(live, time.Since(t1))
		cancel()
		resp.Body.Close()
	}
	report(b, "open", open)
	report(b, "live", live)
}

// BenchmarkAuditPage: the audit log's newest page and a page in the
// middle, over 10,000 entries.
func BenchmarkAuditPage(b *testing.B) {
	c := newConsole(b)
	for i := range 10_000 {
		if _, err := c.log.Append(b.Context(), audit.Entry{Kind: audit.KindUserNote, Actor: audit.ActorUser, Session: "s" + strconv.Itoa(i%50),
			Payload: map[string]any{"n": i, "text": "a note"}}); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.log.Flush(b.Context()); err != nil {
		b.Fatal(err)
	}
	cl, _ := c.login()
	var newest, middle, session []time.Duration
	for b.Loop() {
		_, a := ttfb(b, cl, c.ts.URL+"/audit")
		newest = append(newest, a)
		_, a = ttfb(b, cl, c.ts.URL+"/audit?before=5000")
		middle = append(middle, a)
		_, a = ttfb(b, cl, c.ts.URL+"/audit?session=s7")
		session = append(session, a)
	}
	report(b, "newest", newest)
	report(b, "middle", middle)
	report(b, "session", session)
}

// BenchmarkDiffPage: a change set whose diff has 5,000 lines, its first
// page (of five) in the unified and the side-by-side view.
func BenchmarkDiffPage(b *testing.B) {
	c := newConsole(b)
	var d strings.Builder
	d.WriteString("--- a/big.go\n+++ b/big.go\n@@ -1,2500 +1,2500 @@\n")
	for i := range 2500 {
		d.WriteString("-\told line " + strconv.Itoa(i) + "\n+\tnew line " + strconv.Itoa(i) + "\n")
	}
	c.changes.diff = d.String()
	cl, _ := c.login()
	var unified, split []time.Duration
	for b.Loop() {
		_, a := ttfb(b, cl, c.ts.URL+"/sessions/s1/changes")
		unified = append(unified, a)
		_, a = ttfb(b, cl, c.ts.URL+"/sessions/s1/changes?view=split")
		split = append(split, a)
	}
	report(b, "unified", unified)
	report(b, "split", split)
}

// BenchmarkNewPages: time to first byte of the skills page (50 skills),
// the plugins page (20 plugins of 10 tools, 2 held each), the memory page
// (the first 100 of 5,000 files) and a session page whose 4,096 events
// come from its stored conversation.
func BenchmarkNewPages(b *testing.B) {
	var sk web.SkillsView
	for i := range 50 {
		sk.Skills = append(sk.Skills, web.SkillInfo{Name: "skill" + strconv.Itoa(i), Description: strings.Repeat("does things ", 10), Scope: "user",
			Dir: "/home/me/.config/fluffy/skills/skill" + strconv.Itoa(i), State: web.SkillInstalled, Network: []string{"api.example.org"},
			Credentials: []string{"secret://age/k as env K"}, Digest: "sha256:" + strings.Repeat("ab", 32)})
	}
	var pl web.PluginsView
	for i := range 20 {
		p := web.PluginInfo{Name: "plugin" + strconv.Itoa(i), Version: "1.0", State: "enabled", Digest: "sha256:" + strings.Repeat("cd", 32),
			Capabilities: []string{"read-workspace", "network"}}
		for j := range 10 {
			p.Tools = append(p.Tools, web.PluginTool{Name: "tool" + strconv.Itoa(j), Description: strings.Repeat("a tool ", 10)})
		}
		for j := range 2 {
			p.Held = append(p.Held, web.HeldTool{Name: "tool" + strconv.Itoa(j), Fields: []web.ToolField{{Field: "schema", Old: `{"type":"object"}`, New: `{"type":"object","properties":{}}`}}})
		}
		pl.Plugins = append(pl.Plugins, p)
	}
	c := newConsoleWith(b, func(o *web.Options) {
		o.Skills, o.Plugins, o.Memory, o.Transcript = fakeSkills{sk}, &fakePlugins{v: pl}, manyFiles(5000), longTranscript(4096)
	})
	cl, _ := c.login()
	for _, page := range []struct{ name, path string }{{"skills", "/skills"}, {"plugins", "/plugins"}, {"memory", "/memory"}, {"history", "/sessions/s1"}} {
		var first []time.Duration
		for range max(b.N, 1) {
			f, _ := ttfb(b, cl, c.ts.URL+page.path)
			first = append(first, f)
		}
		report(b, page.name, first)
	}
}
