package web_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/sched"
	"github.com/fluffy-agent/fluffy/internal/web"
)

type fakeSessions struct{ m map[string]web.Session }

func (f fakeSessions) List(context.Context) ([]web.Session, error) {
	var out []web.Session
	for _, s := range f.m {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b web.Session) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (f fakeSessions) Get(_ context.Context, id string) (web.Session, error) {
	s, ok := f.m[id]
	if !ok {
		return web.Session{}, web.ErrNotFound
	}
	return s, nil
}

type fakeChanges struct {
	mu        sync.Mutex
	calls     []string
	diff      string
	conflicts []web.Conflict
}

func (f *fakeChanges) Diff(_ context.Context, session string, paths []string) (web.ChangeSet, error) {
	return web.ChangeSet{Changes: []changeset.Change{{Path: "a.go", Op: "modify"}, {Path: "b.go", Op: "add"}}, Diff: f.diff}, nil
}

func (f *fakeChanges) Apply(_ context.Context, session string, paths []string, actor string) (web.ChangeSet, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "apply "+session+" "+strings.Join(paths, ",")+" by "+actor)
	return web.ChangeSet{Conflicts: f.conflicts}, nil
}

func (f *fakeChanges) Discard(_ context.Context, session string, paths []string, actor string) (web.ChangeSet, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "discard "+session+" "+strings.Join(paths, ",")+" by "+actor)
	return web.ChangeSet{}, nil
}

type allowAll struct{}

func (allowAll) Evaluate(context.Context, operation.Operation) (approval.Evaluation, error) {
	return approval.Evaluation{Effect: approval.EffectApprove, Rule: "ask"}, nil
}

type notifier struct{ ch chan approval.Request }

func (n notifier) Notify(_ context.Context, r approval.Request) error {
	n.ch <- r
	return nil
}

type brokerRecorder struct {
	mu  sync.Mutex
	evs []approval.Event
}

func (r *brokerRecorder) Record(_ context.Context, ev approval.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
	return nil
}

// console is a web console over fakes, a real approval broker and a real
// audit log, served by httptest.
type console struct {
	t       testing.TB
	srv     *web.Server
	ts      *httptest.Server
	log     *audit.Log
	reader  *audit.Reader
	hub     *web.Hub
	broker  *approval.Broker
	notify  chan approval.Request
	rec     *brokerRecorder
	changes *fakeChanges
	now     time.Time
	mu      sync.Mutex
}

func newConsole(t testing.TB) *console {
	t.Helper()
	return newConsoleWith(t, nil)
}

func newConsoleWith(t testing.TB, opt func(*web.Options)) *console {
	t.Helper()
	ctx := t.Context()
	dir := t.TempDir()
	l, err := audit.Open(ctx, audit.Options{Path: filepath.Join(dir, "audit.db"), KeyDir: filepath.Join(dir, "keys"), CheckpointEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	r, err := audit.OpenReader(ctx, filepath.Join(dir, "audit.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	k, err := audit.LoadKey(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	c := &console{t: t, log: l, reader: r, hub: web.NewHub(), notify: make(chan approval.Request, 4), rec: &brokerRecorder{},
		changes: &fakeChanges{diff: "--- a/a.go\n+++ b/a.go\n@@ -1 +1 @@\n-old\n+new\n"}, now: time.Now()}
	c.broker, err = approval.NewBroker(approval.Options{Evaluator: allowAll{}, Notifier: notifier{c.notify}, Recorder: c.rec})
	if err != nil {
		t.Fatal(err)
	}
	sessions := fakeSessions{m: map[string]web.Session{
		"s1": {ID: "s1", Kind: "coding", Status: "running", Task: "fix <b>it</b>", Workspace: "/repo"},
	}}
	o := web.Options{Sessions: sessions, Approvals: c.broker, Changes: c.changes, Log: web.ReaderLog{R: r, Verifier: k.Verifier},
		Audit: l, Hub: c.hub, Now: c.clock}
	if opt != nil {
		opt(&o)
	}
	c.srv, err = web.New(o)
	if err != nil {
		t.Fatal(err)
	}
	c.ts = httptest.NewServer(c.srv)
	t.Cleanup(c.ts.Close)
	c.srv.SetAddr(c.ts.Listener.Addr().String())
	return c
}

func (c *console) clock() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *console) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// client is a browser: a cookie jar, no redirects followed.
func (c *console) client() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// login returns a logged-in client and the page's CSRF token.
func (c *console) login() (*http.Client, string) {
	c.t.Helper()
	link, err := c.srv.LoginURL("user:alice")
	if err != nil {
		c.t.Fatal(err)
	}
	cl := c.client()
	resp, err := cl.Get(link)
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		c.t.Fatalf("login: %s", resp.Status)
	}
	body := c.get(cl, "/sessions", http.StatusOK)
	_, rest, ok := strings.Cut(body, `name="csrf-token" content="`)
	if !ok {
		c.t.Fatalf("no CSRF token in the page:\n%s", body)
	}
	tok, _, _ := strings.Cut(rest, `"`)
	return cl, tok
}

func (c *console) get(cl *http.Client, path string, want int) string {
	c.t.Helper()
	resp, err := cl.Get(c.ts.URL + path)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		b.WriteString(sc.Text())
		b.WriteByte('\n')
	}
	if resp.StatusCode != want {
		c.t.Fatalf("GET %s: %s, want %d\n%s", path, resp.Status, want, b.String())
	}
	return b.String()
}

// post sends a form as this console's own page would (Origin set), with
// extra headers applied last.
func (c *console) post(cl *http.Client, path string, form url.Values, hdr map[string]string) *http.Response {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.ts.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", c.ts.URL)
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	if h, ok := hdr["Host"]; ok {
		req.Host = h
	}
	resp, err := cl.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// refusals are the channel.refused entries recorded, as "reason".
func (c *console) refusals() []string {
	c.t.Helper()
	var out []string
	err := c.reader.Entries(c.t.Context(), audit.Filter{Kind: audit.KindChannelRefused}, func(e audit.Entry) error {
		d, err := audit.DecodePayload(e.Kind, e.Payload.(json.RawMessage))
		if err != nil {
			return err
		}
		p := d.(audit.ChannelRefused)
		if p.Channel != web.Name {
			c.t.Errorf("refusal of channel %q", p.Channel)
		}
		out = append(out, p.Reason)
		return nil
	})
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

func TestLoginLinkOnceThenCookie(t *testing.T) {
	c := newConsole(t)
	link, err := c.srv.LoginURL("user:alice")
	if err != nil {
		t.Fatal(err)
	}
	cl := c.client()
	resp, err := cl.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/sessions" {
		t.Fatalf("login: %s to %q", resp.Status, resp.Header.Get("Location"))
	}
	ck := resp.Cookies()
	if len(ck) != 1 || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode || ck[0].Secure {
		t.Fatalf("cookie: %+v, want one HttpOnly SameSite=Strict (not Secure without TLS)", ck)
	}
	c.get(cl, "/sessions", http.StatusOK)
	// The same link again, from another browser: refused.
	resp, err = c.client().Get(link)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("reused link: %s, want 403", resp.Status)
	}
	// A link older than two minutes: refused.
	late, _ := c.srv.LoginURL("user:alice")
	c.advance(web.LoginTTL + time.Second)
	resp, err = c.client().Get(late)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("expired link: %s, want 403", resp.Status)
	}
	if got, want := c.refusals(), []string{web.RefusedLogin, web.RefusedLogin}; !slices.Equal(got, want) {
		t.Errorf("refusals recorded: %v, want %v", got, want)
	}
	n := 0
	_ = c.reader.Entries(t.Context(), audit.Filter{Kind: audit.KindWebLogin}, func(e audit.Entry) error {
		n++
		d, err := audit.DecodePayload(e.Kind, e.Payload.(json.RawMessage))
		if err != nil {
			return err
		}
		if p := d.(audit.WebLogin); p.Principal != "user:alice" {
			t.Errorf("login recorded for %q", p.Principal)
		}
		return nil
	})
	if n != 1 {
		t.Errorf("%d web.login entries, want 1", n)
	}
}

func TestRefusedRequestsAreRecorded(t *testing.T) {
	c := newConsole(t)
	cl, tok := c.login()
	form := url.Values{"task": {"x"}}
	// Without the CSRF token.
	if r := c.post(cl, "/sessions", form, nil); r.StatusCode != http.StatusForbidden {
		t.Errorf("no CSRF token: %s, want 403", r.Status)
	}
	// With a wrong one.
	bad := url.Values{"task": {"x"}, "csrf": {tok + "x"}}
	if r := c.post(cl, "/sessions", bad, nil); r.StatusCode != http.StatusForbidden {
		t.Errorf("wrong CSRF token: %s, want 403", r.Status)
	}
	good := url.Values{"task": {"x"}, "csrf": {tok}}
	// From another origin, even with the token.
	if r := c.post(cl, "/sessions", good, map[string]string{"Origin": "http://evil.example"}); r.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin: %s, want 403", r.Status)
	}
	// Neither Origin nor Referer: not known to be this console's page.
	if r := c.post(cl, "/sessions", good, map[string]string{"Origin": ""}); r.StatusCode != http.StatusForbidden {
		t.Errorf("no origin: %s, want 403", r.Status)
	}
	// A page of evil.example whose name resolves to 127.0.0.1 (DNS
	// rebinding): its requests carry Host: evil.example.
	req, _ := http.NewRequest(http.MethodGet, c.ts.URL+"/sessions", nil)
	req.Host = "evil.example:" + c.ts.URL[strings.LastIndex(c.ts.URL, ":")+1:]
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("forged Host: %s, want 421", resp.Status)
	}
	// A cookie another daemon issued.
	other := newConsole(t)
	ocl, _ := other.login()
	u, _ := url.Parse(other.ts.URL)
	foreign := ocl.Jar.Cookies(u)
	req, _ = http.NewRequest(http.MethodGet, c.ts.URL+"/sessions", nil)
	req.AddCookie(foreign[0])
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("another daemon's cookie: %s, want 401", resp.Status)
	}
	want := []string{web.RefusedCSRF, web.RefusedCSRF, web.RefusedOrigin, web.RefusedOrigin, web.RefusedHost, web.RefusedCookie}
	if got := c.refusals(); !slices.Equal(got, want) {
		t.Errorf("refusals recorded: %v, want %v", got, want)
	}
	// The right token from the console's own page passes the checks (the
	// daemon's channel is not running here: 503, not 403).
	if r := c.post(cl, "/sessions", good, nil); r.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a good request: %s, want 503 (no sink)", r.Status)
	}
}

func TestSecurityHeaders(t *testing.T) {
	c := newConsole(t)
	cl, _ := c.login()
	resp, err := cl.Get(c.ts.URL + "/sessions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") {
		t.Errorf("CSP allows inline code: %q", csp)
	}
	if resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("headers: %v", resp.Header)
	}
}

// hostile is model output that tries to run script and fetch an image
// from elsewhere.
const hostile = "<script>alert(1)</script> and ![x](https://evil.example/p.png) <img src=https://evil.example/q.png>"

func TestModelOutputIsEscaped(t *testing.T) {
	c := newConsole(t)
	cl, _ := c.login()
	c.hub.Publish(web.Event{Session: "s1", Type: "text", Text: hostile})
	c.hub.Publish(web.Event{Session: "s1", Type: "tool_result", Tool: "fs.read", Result: hostile, Decision: "<b>allow</b>"})
	page := c.get(cl, "/sessions/s1", http.StatusOK)
	for _, bad := range []string{"<script>alert", "<img", "<b>it</b>", "<b>allow"} {
		if strings.Contains(page, bad) {
			t.Errorf("page contains %q unescaped", bad)
		}
	}
	if !strings.Contains(page, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("the text is not shown escaped:\n%s", page)
	}
	// The stream renders the same way.
	got := readStream(t, cl, c.ts.URL+"/sessions/s1/events", "", 2)
	for _, ev := range got {
		if strings.Contains(ev.data, "<script>alert") || strings.Contains(ev.data, "<img") {
			t.Errorf("stream event %s unescaped: %s", ev.id, ev.data)
		}
	}
}

type sse struct{ id, event, data string }

// readStream reads n events of an SSE stream (sending lastID as
// Last-Event-ID when set) and closes it.
func readStream(t *testing.T, cl *http.Client, u, lastID string, n int) []sse {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %s", resp.Status)
	}
	var out []sse
	var cur sse
	sc := bufio.NewScanner(resp.Body)
	for len(out) < n && sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.event != "" {
				out = append(out, cur)
			}
			cur = sse{}
		case strings.HasPrefix(line, "id: "):
			cur.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			cur.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			cur.data += line[6:] + "\n"
		}
	}
	return out
}

func TestStreamResumesAfterLastEventID(t *testing.T) {
	c := newConsole(t)
	cl, _ := c.login()
	for i := range 5 {
		c.hub.Publish(web.Event{Session: "s1", Type: "text", Text: "part " + string(rune('a'+i))})
	}
	// A page that saw events 1 and 2 reconnects: 3, 4, 5, then what is
	// published while it listens, with no gap and no repeat.
	go func() {
		// Published once the stream has subscribed or before: either way
		// it comes after 5.
		c.hub.Publish(web.Event{Session: "s1", Type: "text", Text: "part f"})
	}()
	got := readStream(t, cl, c.ts.URL+"/sessions/s1/events", "2", 4)
	var ids []string
	for _, e := range got {
		ids = append(ids, e.id)
	}
	if want := []string{"3", "4", "5", "6"}; !slices.Equal(ids, want) {
		t.Fatalf("resumed ids %v, want %v", ids, want)
	}
	if !strings.Contains(got[3].data, "part f") {
		t.Errorf("event 6: %q", got[3].data)
	}
}

func TestStreamTooFarBehindReloads(t *testing.T) {
	h := web.NewHub()
	for range 5000 {
		h.Publish(web.Event{Session: "s", Type: "text"})
	}
	if _, complete := h.Since("s", 10); complete {
		t.Fatal("events after 10 were forgotten, yet Since says complete")
	}
	evs, complete := h.Since("s", 4990)
	if !complete || len(evs) != 10 || evs[0].ID != 4991 {
		t.Fatalf("Since(4990): %d events from %v, complete %v", len(evs), evs[0].ID, complete)
	}
}

func TestHubDropsASlowSubscriber(t *testing.T) {
	h := web.NewHub()
	_, _, live, cancel := h.Subscribe("s", 0)
	defer cancel()
	for range 1000 {
		h.Publish(web.Event{Session: "s", Type: "text"})
	}
	n := 0
	for range live {
		n++
	}
	if n == 0 || n >= 1000 {
		t.Fatalf("a subscriber that never read got %d events before being dropped", n)
	}
}

func TestApproveChosenSteps(t *testing.T) {
	c := newConsole(t)
	cl, tok := c.login()
	steps := []approval.Step{
		{Op: operation.Operation{Tool: "shell.exec", Argv: []string{"make", "one"}}, Note: "first"},
		{Op: operation.Operation{Tool: "shell.exec", Argv: []string{"make", "two"}}, Note: "second"},
		{Op: operation.Operation{Tool: "shell.exec", Argv: []string{"make", "three"}}, Note: "<script>third</script>"},
	}
	done := make(chan approval.Request, 1)
	go func() {
		r, err := c.broker.Ask(context.WithoutCancel(t.Context()), "s1", "three steps", steps)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	req := <-c.notify
	page := c.get(cl, "/approvals", http.StatusOK)
	if !strings.Contains(page, "req-"+req.ID) || strings.Contains(page, "<script>third") {
		t.Fatalf("approvals page:\n%s", page)
	}
	form := url.Values{"csrf": {tok}, "action": {"approve"}, "step": {"3", "1"}, "rest": {"1"}, "reason": {"not two\n/approve 2"}}
	if r := c.post(cl, "/approvals/"+req.ID, form, nil); r.StatusCode != http.StatusSeeOther {
		t.Fatalf("answer: %s", r.Status)
	}
	var final approval.Request
	select {
	case final = <-done:
	case again := <-c.notify:
		// The broker asks again about steps the answer left open.
		t.Fatalf("request asked again after the answer: %+v", again.Items)
	}
	var verdicts []approval.Verdict
	for _, it := range final.Items {
		verdicts = append(verdicts, it.Decision.Verdict)
	}
	if want := []approval.Verdict{approval.Approved, approval.Denied, approval.Approved}; !slices.Equal(verdicts, want) {
		t.Fatalf("verdicts %v, want %v", verdicts, want)
	}
	if r := final.Items[1].Decision.Reason; !strings.Contains(r, "not two") {
		t.Errorf("denial reason %q", r)
	}
	c.rec.mu.Lock()
	defer c.rec.mu.Unlock()
	last := c.rec.evs[len(c.rec.evs)-1]
	if last.Kind != "approval.decision" || last.Who != (approval.Who{Name: "user:alice", Channel: web.Name}) {
		t.Errorf("decision recorded as %+v", last)
	}
	// Answering again: the request is closed.
	if r := c.post(cl, "/approvals/"+req.ID, form, nil); r.StatusCode != http.StatusConflict {
		t.Errorf("second answer: %s, want 409", r.Status)
	}
}

func TestApplyChosenFile(t *testing.T) {
	c := newConsole(t)
	cl, tok := c.login()
	page := c.get(cl, "/sessions/s1/changes", http.StatusOK)
	for _, want := range []string{`value="a.go"`, `value="b.go"`, `<span class="add">&#43;new</span>`} {
		if !strings.Contains(page, want) {
			t.Errorf("changes page lacks %q", want)
		}
	}
	split := c.get(cl, "/sessions/s1/changes?view=split", http.StatusOK)
	if !strings.Contains(split, `<td class="del">old</td><td class="add">new</td>`) {
		t.Errorf("side-by-side view:\n%s", split)
	}
	r := c.post(cl, "/sessions/s1/changes/apply", url.Values{"csrf": {tok}, "path": {"b.go"}}, nil)
	if r.StatusCode != http.StatusSeeOther {
		t.Fatalf("apply: %s", r.Status)
	}
	if want := []string{"apply s1 b.go by user:alice@web"}; !slices.Equal(c.changes.calls, want) {
		t.Errorf("calls %v, want %v", c.changes.calls, want)
	}
}

func TestDiffPages(t *testing.T) {
	c := newConsole(t)
	var b strings.Builder
	b.WriteString("--- a/big\n+++ b/big\n@@ -1,5000 +1,5000 @@\n")
	for i := range 5000 {
		b.WriteString("+line " + string(rune('0'+i%10)) + "\n")
	}
	c.changes.diff = b.String()
	cl, _ := c.login()
	first := c.get(cl, "/sessions/s1/changes", http.StatusOK)
	if n := strings.Count(first, `<span class="add">`); n != 997 {
		t.Errorf("page 1 shows %d added lines, want 997 (1000 lines less the 3 headers)", n)
	}
	if !strings.Contains(first, "page 1 of 6") {
		t.Errorf("no paging on a 5,003-line diff")
	}
	last := c.get(cl, "/sessions/s1/changes?page=6", http.StatusOK)
	if n := strings.Count(last, `<span class="add">`); n != 3 {
		t.Errorf("page 6 shows %d lines, want 3", n)
	}
}

func TestAuditEntryAndProof(t *testing.T) {
	c := newConsole(t)
	ctx := t.Context()
	var last uint64
	for i := range 250 {
		seq, err := c.log.Append(ctx, audit.Entry{Kind: audit.KindUserNote, Actor: audit.ActorUser, Payload: map[string]any{"n": i, "text": "<script>x</script>"}})
		if err != nil {
			t.Fatal(err)
		}
		last = seq
	}
	if _, err := c.log.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	cl, _ := c.login()
	page := c.get(cl, "/audit?kind=user.note", http.StatusOK)
	if !strings.Contains(page, `/audit/`+strconv.FormatUint(last, 10)+`"`) || !strings.Contains(page, "Older entries") {
		t.Fatalf("audit page lacks the newest entry or paging")
	}
	_, older, _ := strings.Cut(page, `before=`)
	older, _, _ = strings.Cut(older, `"`)
	page2 := c.get(cl, "/audit?kind=user.note&before="+older, http.StatusOK)
	if strings.Contains(page2, `/audit/`+strconv.FormatUint(last, 10)+`"`) || strings.Contains(page2, `/audit/`+older+`"`) {
		t.Errorf("page 2 shows an entry of page 1")
	}
	if n := strings.Count(page2, `<tr class="item"`); n != 100 {
		t.Errorf("page 2 shows %d entries, want 100", n)
	}
	entry := c.get(cl, "/audit/5", http.StatusOK)
	if !strings.Contains(entry, "verified: the entry is in the tree") {
		t.Errorf("entry page does not show a verified proof:\n%s", entry)
	}
	if strings.Contains(entry, "<script>x") {
		t.Errorf("payload not escaped")
	}
}

// TestBehindAProxy: through a serve.web.hosts name (a TLS reverse proxy)
// the cookie is Secure and only the https origin of that name may change
// state.
func TestBehindAProxy(t *testing.T) {
	c := newConsoleWith(t, func(o *web.Options) { o.Hosts = []string{"fluffy.example.org"} })
	link, _ := c.srv.LoginURL("user:alice")
	req, _ := http.NewRequest(http.MethodGet, link, nil)
	req.Host = "fluffy.example.org"
	cl := c.client()
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ck := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || len(ck) != 1 || !ck[0].Secure {
		t.Fatalf("login through the proxy: %s, cookies %+v, want one Secure cookie", resp.Status, ck)
	}
	page := func() string {
		req, _ := http.NewRequest(http.MethodGet, c.ts.URL+"/sessions", nil)
		req.Host = "fluffy.example.org"
		req.AddCookie(ck[0])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
		}
		return b.String()
	}()
	_, rest, _ := strings.Cut(page, `name="csrf-token" content="`)
	tok, _, _ := strings.Cut(rest, `"`)
	post := func(origin string) int {
		req, _ := http.NewRequest(http.MethodPost, c.ts.URL+"/logout", strings.NewReader(url.Values{"csrf": {tok}}.Encode()))
		req.Host = "fluffy.example.org"
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		req.AddCookie(ck[0])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post("http://fluffy.example.org"); got != http.StatusForbidden {
		t.Errorf("plain-http origin through the proxy: %d, want 403", got)
	}
	if got := post("https://fluffy.example.org"); got != http.StatusOK {
		t.Errorf("the proxy's https origin: %d, want 200", got)
	}
}

type fakePolicy struct{}

func (fakePolicy) Effective(_ context.Context, ws string) (web.PolicyView, error) {
	return web.PolicyView{Workspace: ws, Default: "approve", Files: []web.PolicyFile{{Name: "project policy", Path: ws + "/.fluffy/policy.yaml", Present: true}},
		Rules: []web.PolicyRule{{ID: "no-<b>rm</b>", Effect: "block", Layer: "project", Source: ws + "/.fluffy/policy.yaml:3", Description: "never <script>rm</script>"}}}, nil
}

func (fakePolicy) Explain(_ context.Context, ws string, q web.PolicyQuery) (web.PolicyDecision, error) {
	return web.PolicyDecision{Effect: "block", Rule: "no-rm", Layer: "project", Reason: "asked " + q.Tool + " " + q.Shell,
		Matched: []web.PolicyMatch{{Rule: "no-rm", Effect: "block", Layer: "project", Subject: q.Shell}}}, nil
}

func TestPolicyPage(t *testing.T) {
	c := newConsoleWith(t, func(o *web.Options) { o.Policy = fakePolicy{} })
	cl, _ := c.login()
	page := c.get(cl, "/policy?workspace=/repo&tool=shell.exec&shell="+url.QueryEscape("rm -rf /"), http.StatusOK)
	for _, want := range []string{"no-&lt;b&gt;rm&lt;/b&gt;", "/repo/.fluffy/policy.yaml:3", `<strong class="effect-block">block</strong>`, "asked shell.exec rm -rf /"} {
		if !strings.Contains(page, want) {
			t.Errorf("policy page lacks %q", want)
		}
	}
	if strings.Contains(page, "<script>rm") {
		t.Errorf("a rule's description is not escaped")
	}
	// A directory no session works on: the daemon does not read its
	// policy.
	c.get(cl, "/policy?workspace=/etc", http.StatusNotFound)
}

// TestHubForgetsIdleSessions: the hub keeps a bounded number of
// sessions, forgetting the least recently active one no page watches.
func TestHubForgetsIdleSessions(t *testing.T) {
	h := web.NewHub()
	_, _, _, cancel := h.Subscribe("watched", 0)
	defer cancel()
	h.Publish(web.Event{Session: "watched", Type: "text"})
	for i := range 1000 {
		h.Publish(web.Event{Session: "s" + strconv.Itoa(i), Type: "text"})
	}
	if h.Last("watched") != 1 {
		t.Errorf("a watched session was forgotten")
	}
	if h.Last("s0") != 0 || h.Last("s999") != 1 {
		t.Errorf("s0 kept (%d) or s999 forgotten (%d): want the oldest idle ones forgotten", h.Last("s0"), h.Last("s999"))
	}
}

// TestApplyConflictShowsThreeVersions: an apply that conflicts wrote
// nothing; the page says so and shows each conflict's versions.
func TestApplyConflictShowsThreeVersions(t *testing.T) {
	c := newConsole(t)
	c.changes.conflicts = []web.Conflict{{Path: "a.go", Explain: "base: <old>\nyours: <mine>\ntheirs: <new>"}}
	cl, tok := c.login()
	req, _ := http.NewRequest(http.MethodPost, c.ts.URL+"/sessions/s1/changes/apply", strings.NewReader(url.Values{"csrf": {tok}, "all": {"1"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", c.ts.URL)
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
	}
	page := b.String()
	if resp.StatusCode != http.StatusConflict || !strings.Contains(page, "nothing was applied") || !strings.Contains(page, "Conflict: a.go") ||
		!strings.Contains(page, "yours: &lt;mine&gt;") {
		t.Fatalf("conflict page: %s\n%s", resp.Status, page)
	}
}

// fakeSecrets counts how often the backends are asked for their state.
type fakeSecrets struct {
	v     web.SecretsView
	mu    sync.Mutex
	asked int
}

func (f *fakeSecrets) Backends(context.Context) ([]web.SecretBackend, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked++
	return f.v.Backends, nil
}

func (f *fakeSecrets) Secrets(context.Context) (web.SecretsView, error) {
	return web.SecretsView{Uses: f.v.Uses, Error: f.v.Error}, nil
}

func (f *fakeSecrets) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked
}

// TestSecretsStateKept: two views within SecretStateTTL ask the backends
// once, the page says how old the states are; after the TTL, or after
// Refresh (a state change: CSRF), they are asked again.
func TestSecretsStateKept(t *testing.T) {
	f := &fakeSecrets{v: web.SecretsView{Backends: []web.SecretBackend{{Name: "bw", State: "unlocked"}}}}
	c := newConsoleWith(t, func(o *web.Options) { o.Secrets = f })
	cl, csrf := c.login()
	c.get(cl, "/secrets", http.StatusOK)
	c.advance(10 * time.Second)
	if page := c.get(cl, "/secrets", http.StatusOK); !strings.Contains(page, "asked 10s ago") {
		t.Errorf("the page does not say the states' age:\n%s", page)
	}
	if n := f.count(); n != 1 {
		t.Fatalf("two views within %s asked the backends %d times, want 1", web.SecretStateTTL, n)
	}
	c.advance(web.SecretStateTTL)
	c.get(cl, "/secrets", http.StatusOK)
	if n := f.count(); n != 2 {
		t.Fatalf("a view after %s: the backends were asked %d times, want 2", web.SecretStateTTL, n)
	}
	if resp := c.post(cl, "/secrets/refresh", url.Values{}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("refresh without a CSRF token: %s", resp.Status)
	}
	if resp := c.post(cl, "/secrets/refresh", url.Values{"csrf": {csrf}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("refresh: %s", resp.Status)
	}
	if page := c.get(cl, "/secrets", http.StatusOK); !strings.Contains(page, "asked 0s ago") {
		t.Errorf("after a refresh:\n%s", page)
	}
	if n := f.count(); n != 3 {
		t.Fatalf("a view after a refresh: the backends were asked %d times, want 3", n)
	}
}

// TestSecretsPage: the credentials page names each use and backend,
// escaped.
func TestSecretsPage(t *testing.T) {
	c := newConsoleWith(t, func(o *web.Options) {
		o.Secrets = &fakeSecrets{v: web.SecretsView{
			Backends: []web.SecretBackend{{Name: "age", State: "locked", Detail: "no <i>passphrase</i>"}, {Name: "env", State: "unlocked"}},
			Uses: []web.SecretUse{{Ref: "env:GH_TOKEN", Backend: "env", As: "proxy", Name: "GH_TOKEN", Bind: []string{"api.github.com"}, Commands: []string{"gh", "git"}},
				{Ref: "secret://age/hook<script>", Backend: "age", By: "serve.webhooks deploy"}}}}
	})
	cl, _ := c.login()
	page := c.get(cl, "/secrets", http.StatusOK)
	for _, want := range []string{`<a href="/secrets" aria-current="page">Credentials</a>`, "<code>env:GH_TOKEN</code>", "proxy GH_TOKEN", "api.github.com", "gh, git",
		`<td class="state-locked">locked</td>`, "no &lt;i&gt;passphrase&lt;/i&gt;", "secret://age/hook&lt;script&gt;", "serve.webhooks deploy"} {
		if !strings.Contains(page, want) {
			t.Errorf("credentials page lacks %q\n%s", want, page)
		}
	}
	if strings.Contains(page, "hook<script>") {
		t.Errorf("a reference is not escaped")
	}
}

type fakeSchedules struct{ v web.ScheduleView }

func (f fakeSchedules) Schedules(context.Context) (web.ScheduleView, error) { return f.v, nil }

// TestSchedulesPage: the jobs with their next and last runs, and what the
// scheduler runs and why the rest waits, escaped.
func TestSchedulesPage(t *testing.T) {
	next := time.Date(2026, 11, 28, 7, 0, 0, 0, time.UTC)
	c := newConsoleWith(t, func(o *web.Options) {
		o.Schedules = fakeSchedules{web.ScheduleView{
			Jobs: []web.CronJob{{Name: "digest", Schedule: "0 7 * * *", TimeZone: "UTC", Missed: "skip", Next: next,
				Runs: []web.CronRun{{ID: "r2", ScheduledFor: next.Add(-24 * time.Hour), Trigger: "schedule", Outcome: "failed", Detail: "no <script>channel</script>"},
					{ID: "r1", ScheduledFor: next.Add(-48 * time.Hour), Trigger: "schedule", Outcome: "delivered", Session: "s1"}}}},
			Scheduler: &sched.Status{Aging: "30s", Limits: map[string]int64{"global": 4}, Use: map[string]int64{"global": 1},
				Queued:  map[string]int{"background": 1},
				Running: []sched.TaskStatus{{ID: "t1", Class: "interactive", Session: "s1", Label: "turn 3", Since: next}},
				Waiting: []sched.TaskStatus{{ID: "t2", Class: "background", Label: "retention", Since: next, Why: "global limit 1/1 <b>held</b>"}}},
		}}
	})
	cl, _ := c.login()
	page := c.get(cl, "/schedules", http.StatusOK)
	for _, want := range []string{`<a href="/schedules" aria-current="page">Schedules</a>`, "digest", "<code>0 7 * * *</code> (UTC)",
		`datetime="2026-11-28T07:00:00Z"`, `<span class="outcome-failed">failed</span>`, "no &lt;script&gt;channel&lt;/script&gt;",
		`<a href="/sessions/s1">s1</a>`, "global 1/4", "1 background", "turn 3", "global limit 1/1 &lt;b&gt;held&lt;/b&gt;"} {
		if !strings.Contains(page, want) {
			t.Errorf("schedules page lacks %q\n%s", want, page)
		}
	}
	if strings.Contains(page, "<script>channel") || strings.Contains(page, "<b>held") {
		t.Errorf("a run's detail or a task's reason is not escaped")
	}
}

// manyFiles is a memory of n files, f000.md on, listed out of order.
type manyFiles int

func (n manyFiles) Files(context.Context) ([]web.MemoryFile, error) {
	var out []web.MemoryFile
	for i := int(n) - 1; i >= 0; i-- {
		out = append(out, web.MemoryFile{Path: fmt.Sprintf("memory/f%03d.md", i), Size: int64(i)})
	}
	return out, nil
}

func (manyFiles) Search(context.Context, string) (web.MemoryResult, error) {
	return web.MemoryResult{}, nil
}

// TestMemoryPaging: 250 files are three pages of at most a hundred, in
// path order, each file on exactly one page, linked by the path they
// follow.
func TestMemoryPaging(t *testing.T) {
	c := newConsoleWith(t, func(o *web.Options) { o.Memory = manyFiles(250) })
	cl, _ := c.login()
	seen := map[string]int{}
	path, pages := "/memory", 0
	for path != "" && pages < 5 {
		page := c.get(cl, path, http.StatusOK)
		pages++
		n := strings.Count(page, "<code>memory/f")
		if n > 100 {
			t.Errorf("page %d lists %d files", pages, n)
		}
		for _, l := range strings.Split(page, "<code>")[1:] {
			p, _, _ := strings.Cut(l, "</code>")
			seen[p]++
		}
		path = ""
		if _, rest, ok := strings.Cut(page, `&amp;after=`); ok {
			after, _, _ := strings.Cut(rest, `"`)
			path = "/memory?after=" + after
		}
	}
	if pages != 3 || len(seen) != 250 {
		t.Fatalf("%d pages, %d files seen, want 3 and 250", pages, len(seen))
	}
	for p, k := range seen {
		if k != 1 {
			t.Errorf("%s on %d pages", p, k)
		}
	}
	if page := c.get(cl, "/memory?after=memory/f099.md", http.StatusOK); !strings.Contains(page, "<code>memory/f100.md</code>") ||
		strings.Contains(page, "<code>memory/f099.md</code>") || !strings.Contains(page, "250 files") {
		t.Errorf("the page after f099:\n%s", page)
	}
}

type fakeMemory struct{}

func (fakeMemory) Files(context.Context) ([]web.MemoryFile, error) {
	return []web.MemoryFile{{Path: "MEMORY.md", Size: 42, Modified: time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)},
		{Path: "memory/<img src=x>.md", Size: 7}}, nil
}

func (fakeMemory) Search(_ context.Context, q string) (web.MemoryResult, error) {
	return web.MemoryResult{Note: "full text only", Hits: []web.MemoryHit{{Path: "memory/2026-11-27.md", Line: 3, EndLine: 5, Heading: "Notes",
		Snippet: "asked " + q + ": <script>alert(1)</script>"}}}, nil
}

// TestMemoryPage: the memory files and a search's hits with file:line;
// memory content is hostile like model output, so it is escaped.
func TestMemoryPage(t *testing.T) {
	c := newConsoleWith(t, func(o *web.Options) { o.Memory = fakeMemory{} })
	cl, _ := c.login()
	page := c.get(cl, "/memory?q="+url.QueryEscape("deploy <b>day</b>"), http.StatusOK)
	for _, want := range []string{`<a href="/memory" aria-current="page">Memory</a>`, "<code>MEMORY.md</code>", "42 bytes",
		"memory/&lt;img src=x&gt;.md", "<code>memory/2026-11-27.md:3-5</code> Notes", "full text only",
		"asked deploy &lt;b&gt;day&lt;/b&gt;: &lt;script&gt;alert(1)&lt;/script&gt;", `value="deploy &lt;b&gt;day&lt;/b&gt;"`} {
		if !strings.Contains(page, want) {
			t.Errorf("memory page lacks %q\n%s", want, page)
		}
	}
	if strings.Contains(page, "<script>alert") || strings.Contains(page, "<img src=x>") {
		t.Errorf("memory content is not escaped")
	}
	// Without a query: the files, no search.
	if page := c.get(cl, "/memory", http.StatusOK); strings.Contains(page, "Hits") || !strings.Contains(page, "MEMORY.md") {
		t.Errorf("memory page without a query:\n%s", page)
	}
}

type fakeSkills struct{ v web.SkillsView }

func (f fakeSkills) Skills(context.Context) (web.SkillsView, error) { return f.v, nil }

// TestSkillsPage: each skill with its scope, runtime, state (a refused
// one with why), granted hosts, credential names and pin; a skill's
// description is its author's text, rendered inert.
func TestSkillsPage(t *testing.T) {
	c := newConsoleWith(t, func(o *web.Options) {
		o.Skills = fakeSkills{web.SkillsView{Skills: []web.SkillInfo{
			{Name: "weather", Description: "Forecasts <script>alert(1)</script>", Scope: "user", Dir: "/h/.config/fluffy/skills/weather",
				Image: "Dockerfile", State: web.SkillInstalled, Network: []string{"api.weather.example"},
				Credentials: []string{"secret://age/weather as env WEATHER_KEY"}, Digest: "sha256:abc123", Source: "https://example.org/w.git", Signer: "dev@example.org"},
			{Name: "notes", Description: "notes", Scope: "user", Dir: "/h/.config/fluffy/skills/notes", State: web.SkillRefused,
				Reason: "skill notes: files changed since pinned: run.sh", Digest: "sha256:def"},
			{Name: "lint", Description: "lint", Scope: "project", Dir: "/repo/.fluffy/skills/lint", Runtime: "native", State: web.SkillInForce}},
			Problems: []string{"/repo/.fluffy/skills/bad/SKILL.md: name: <b>missing</b>"}}}
	})
	cl, _ := c.login()
	page := c.get(cl, "/skills", http.StatusOK)
	for _, want := range []string{`<a href="/skills" aria-current="page">Skills</a>`, "Forecasts &lt;script&gt;alert(1)&lt;/script&gt;",
		"its image (Dockerfile)", "api.weather.example", "<code>secret://age/weather as env WEATHER_KEY</code>", "sha256:abc123", "signed by dev@example.org",
		`<span class="state-refused">refused</span>: skill notes: files changed since pinned: run.sh`, "native", "not installed",
		"name: &lt;b&gt;missing&lt;/b&gt;"} {
		if !strings.Contains(page, want) {
			t.Errorf("skills page lacks %q\n%s", want, page)
		}
	}
	if strings.Contains(page, "<script>alert") || strings.Contains(page, "<b>missing") {
		t.Errorf("a skill's text is not escaped")
	}
}

// fakePlugins records the approvals asked of it; changed makes the next
// one find other held tools.
type fakePlugins struct {
	v       web.PluginsView
	mu      sync.Mutex
	asked   []string
	changed bool
}

func (f *fakePlugins) Plugins(context.Context) (web.PluginsView, error) { return f.v, nil }

func (f *fakePlugins) ApproveTools(_ context.Context, name string, seen map[string]string, actor string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := slices.Sorted(maps.Keys(seen))
	var parts []string
	for _, k := range keys {
		parts = append(parts, k+"="+seen[k])
	}
	f.asked = append(f.asked, name+" "+strings.Join(parts, ",")+" by "+actor)
	if f.changed {
		return 0, web.ErrToolsChanged
	}
	if name != "notes" {
		return 0, web.ErrNotFound
	}
	return len(seen), nil
}

func (f *fakePlugins) approvals() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.asked)
}

// TestPluginsPage: a plugin's state and reason, digest (and that its
// folder changed), capabilities, pinned tools and the held changes with
// their diff; the server's descriptions are rendered inert.
func TestPluginsPage(t *testing.T) {
	c := newConsoleWith(t, func(o *web.Options) {
		o.Plugins = &fakePlugins{v: web.PluginsView{Plugins: []web.PluginInfo{{Name: "notes", Version: "1.2.0", State: "disabled",
			Reason: "digest changed", Digest: "sha256:aaa", Now: "sha256:bbb", Dir: "/p/notes", Command: "./server",
			Capabilities: []string{"read-workspace", "network"}, Credentials: []string{"env:NOTES_TOKEN as env TOKEN"},
			Tools: []web.PluginTool{{Name: "search", Description: "Search the notes"}},
			Held: []web.HeldTool{{Name: "search", Fields: []web.ToolField{{Field: "description", Old: "Search the notes", New: "Search <img src=x onerror=alert(1)>"}}},
				{Name: "delete", New: true, Fields: []web.ToolField{{Field: "schema", New: `{"type":"object"}`}}}}}}}}
	})
	cl, _ := c.login()
	page := c.get(cl, "/plugins", http.StatusOK)
	for _, want := range []string{`<a href="/plugins" aria-current="page">Plugins</a>`, "notes 1.2.0", `<span class="state-disabled">disabled</span> (digest changed)`,
		"sha256:aaa", "the folder changed since approval", "sha256:bbb", "read-workspace, network", "<code>env:NOTES_TOKEN as env TOKEN</code>",
		"<code>mcp.notes.search</code> Search the notes", "fluffy plugin approve-tools notes", "changed tool <code>mcp.notes.search</code>",
		`<span class="del">- description: Search the notes</span>`, `<span class="add">+ description: Search &lt;img src=x onerror=alert(1)&gt;</span>`,
		"new tool <code>mcp.notes.delete</code>", `<span class="add">+ schema: {&#34;type&#34;:&#34;object&#34;}</span>`} {
		if !strings.Contains(page, want) {
			t.Errorf("plugins page lacks %q\n%s", want, page)
		}
	}
	if strings.Contains(page, "<img src=x") {
		t.Errorf("a tool's description is not escaped")
	}
	if strings.Contains(page, `<span class="del">- schema`) {
		t.Errorf("a new tool shows a pinned side")
	}
}

// fakeTranscript is a stored conversation of three messages.
type fakeTranscript struct{}

func (fakeTranscript) Transcript(_ context.Context, id string) ([][]web.Event, error) {
	if id != "s1" {
		return nil, web.ErrNotFound
	}
	return [][]web.Event{
		{{Type: web.TypeMessage, Text: "first task <b>x</b>"}},
		{{Type: "text", Text: "stored answer <script>alert(1)</script>"}, {Type: "tool_call", Tool: "fs.read", Args: `{"path":"a"}`}},
		{{Type: "tool_result", Tool: "fs.read", Result: "second run's result"}},
	}, nil
}

// TestSessionHistory: a session page shows the stored conversation
// first (escaped) and then the hub's events; the hub's base cuts the
// store where its events begin, so nothing shows twice; the stream
// continues after the hub's newest event.
func TestSessionHistory(t *testing.T) {
	c := newConsoleWith(t, func(o *web.Options) { o.Transcript = fakeTranscript{} })
	cl, _ := c.login()
	// A session that ran before the daemon started: all of it, from the
	// store; the stream starts at the beginning.
	page := c.get(cl, "/sessions/s1", http.StatusOK)
	for _, want := range []string{"first task &lt;b&gt;x&lt;/b&gt;", "stored answer &lt;script&gt;alert(1)&lt;/script&gt;",
		`<code class="tool">fs.read</code>`, "second run&#39;s result", `data-stream="/sessions/s1/events?after=0"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q\n%s", want, page)
		}
	}
	if strings.Contains(page, "<script>alert") || strings.Contains(page, `id="ev-0"`) {
		t.Errorf("stored events are not escaped, or carry a stream id")
	}
	// A page that watched the stream leaves the hub a log of the
	// session, with no event: the page still shows the whole store.
	_, _, _, cancel := c.hub.Subscribe("s1", 0)
	cancel()
	if page := c.get(cl, "/sessions/s1", http.StatusOK); !strings.Contains(page, "second run&#39;s result") || !strings.Contains(page, "first task") {
		t.Errorf("after a page watched the stream, the history is gone:\n%s", page)
	}
	// It runs again: two messages were stored before the hub's first
	// event; the third is the hub's to show.
	c.hub.Begin("s1", 2)
	c.hub.Publish(web.Event{Session: "s1", Type: "tool_result", Tool: "fs.read", Result: "second run's result"})
	c.hub.Publish(web.Event{Session: "s1", Type: "text", Text: "live answer"})
	page = c.get(cl, "/sessions/s1", http.StatusOK)
	if n := strings.Count(page, "second run&#39;s result"); n != 1 {
		t.Errorf("the message at the seam shows %d times\n%s", n, page)
	}
	c.hub.Begin("s1", 3) // too late: the hub has events of s1
	page = c.get(cl, "/sessions/s1", http.StatusOK)
	if n := strings.Count(page, "second run&#39;s result"); n != 1 {
		t.Errorf("a late Begin moved the seam: the message shows %d times", n)
	}
	first, live := strings.Index(page, "first task"), strings.Index(page, "live answer")
	if first < 0 || live < first || !strings.Contains(page, `id="ev-2"`) || !strings.Contains(page, `data-stream="/sessions/s1/events?after=2"`) {
		t.Errorf("the stored history, then the hub's events, then the stream after 2:\n%s", page)
	}
}

// longTranscript is a stored conversation longer than a page shows.
type longTranscript int

func (n longTranscript) Transcript(context.Context, string) ([][]web.Event, error) {
	out := make([][]web.Event, n)
	for i := range out {
		out[i] = []web.Event{{Type: "text", Text: fmt.Sprintf("stored %d.", i)}}
	}
	return out, nil
}

// TestSessionHistoryBounded: a conversation of 5,000 stored messages
// shows its newest 4,096 and says how many it left out.
func TestSessionHistoryBounded(t *testing.T) {
	c := newConsoleWith(t, func(o *web.Options) { o.Transcript = longTranscript(5000) })
	cl, _ := c.login()
	page := c.get(cl, "/sessions/s1", http.StatusOK)
	if strings.Contains(page, ">stored 903.<") || !strings.Contains(page, ">stored 904.<") || !strings.Contains(page, ">stored 4999.<") ||
		!strings.Contains(page, "The 904 oldest events") {
		t.Errorf("the page does not show the newest 4096 stored events and the count left out")
	}
}

// TestPluginsApproveTools: the page's form approves exactly the held
// descriptions it showed, as the principal on "web"; without the CSRF
// token nothing is asked and the refusal is recorded; when the server
// offered others meanwhile, the page says nothing was approved.
func TestPluginsApproveTools(t *testing.T) {
	f := &fakePlugins{v: web.PluginsView{Plugins: []web.PluginInfo{{Name: "notes", State: "enabled",
		Held: []web.HeldTool{{Name: "search", SHA256: "aa11", Fields: []web.ToolField{{Field: "description", Old: "a", New: "b"}}},
			{Name: "rm", New: true, SHA256: "bb22", Fields: []web.ToolField{{Field: "schema", New: "{}"}}}}}}}}
	c := newConsoleWith(t, func(o *web.Options) { o.Plugins = f })
	cl, csrf := c.login()
	page := c.get(cl, "/plugins", http.StatusOK)
	for _, want := range []string{`action="/plugins/notes/approve-tools"`, `name="seen" value="search:aa11"`, `name="seen" value="rm:bb22"`} {
		if !strings.Contains(page, want) {
			t.Errorf("plugins page lacks %q\n%s", want, page)
		}
	}
	form := url.Values{"seen": {"search:aa11", "rm:bb22"}}
	if resp := c.post(cl, "/plugins/notes/approve-tools", form, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("without a CSRF token: %s", resp.Status)
	}
	if got := f.approvals(); len(got) != 0 {
		t.Fatalf("approved without a CSRF token: %v", got)
	}
	if r := c.refusals(); !slices.Contains(r, "csrf") {
		t.Errorf("refusals %v lack csrf", r)
	}
	form.Set("csrf", csrf)
	resp := c.post(cl, "/plugins/notes/approve-tools", form, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/plugins" {
		t.Fatalf("approve: %s %s", resp.Status, resp.Header.Get("Location"))
	}
	if got := f.approvals(); !slices.Equal(got, []string{"notes rm=bb22,search=aa11 by user:alice@web"}) {
		t.Errorf("approvals: %v", got)
	}
	if page := c.get(cl, "/plugins", http.StatusOK); !strings.Contains(page, "Approved 2 held tool description(s) of notes.") {
		t.Errorf("no confirmation:\n%s", page)
	}
	if page := c.get(cl, "/plugins", http.StatusOK); strings.Contains(page, "Approved") {
		t.Errorf("the confirmation shows twice:\n%s", page)
	}
	f.mu.Lock()
	f.changed = true
	f.mu.Unlock()
	if resp := c.post(cl, "/plugins/notes/approve-tools", form, nil); resp.StatusCode != http.StatusConflict {
		t.Errorf("held tools changed meanwhile: %s", resp.Status)
	}
}
