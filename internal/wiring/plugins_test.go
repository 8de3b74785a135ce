package wiring

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/plugin"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native"
	"github.com/fluffy-agent/fluffy/internal/tdd"
	"github.com/fluffy-agent/fluffy/internal/tool"
	"github.com/fluffy-agent/fluffy/internal/userenv"
	"github.com/fluffy-agent/fluffy/pkg/pluginsdk"
)

// TestSessionPlugins: an enabled plugin's tools appear in a session's
// tools beside the built-in ones, and a call takes the router's road
// (policy, exec.start of class plugin, exec.end) to the server in its
// sandbox, which reads the session's workspace; the session's end stops
// the server.
// pluginSessions is newNativeSessions whose sessions get the wordcount
// example plugin, built for the test.
func pluginSessions(tb testing.TB) (*nativeSessions, *sessionBoxes) {
	tb.Helper()
	store := plugin.NewMemStore()
	var bxs *sessionBoxes
	s := newNativeSessions(tb, func(u *userenv.Env, log *slog.Logger) *sessionBoxes {
		bxs = newSessionBoxes(log, func() resolved {
			return resolved{name: "native", native: func() (aheadRuntime, error) {
				return native.New(native.Options{Self: u.Self, Logger: log})
			}}
		})
		bxs.plugins = newSessionPlugins(u, log, store)
		return bxs
	})
	// As root the sandbox runs as another user, who must reach the
	// plugin's folder and the workspace by their paths.
	for _, d := range []string{s.dir, filepath.Dir(s.dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	pdir := filepath.Join(s.dir, "wordcount")
	build := exec.Command("go", "build", "-o", filepath.Join(pdir, "wordcount"), ".")
	build.Dir = filepath.Join("..", "..", "examples", "plugins", "wordcount")
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("go build: %v\n%s", err, out)
	}
	m, err := pluginsdk.ReadManifest(build.Dir)
	if err != nil {
		tb.Fatal(err)
	}
	store.Put(plugin.Record{Manifest: m, Dir: pdir, State: plugin.Enabled})
	return s, bxs
}

func TestSessionPlugins(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts sandboxes")
	}
	s, bxs := pluginSessions(t)
	r, id, _ := s.open("a")
	var names []string
	for _, d := range r.Definitions() {
		names = append(names, d.Name)
	}
	if !slices.Contains(names, "mcp__wordcount__count_file") || !slices.Contains(names, "fs__read") {
		t.Fatalf("tools %v", names)
	}
	args, _ := json.Marshal(map[string]string{"path": "file.txt"})
	res, err := r.Call(t.Context(), llm.ToolCall{ID: "p1", Name: "mcp__wordcount__count_file", Args: args})
	if err != nil || res.IsError || !strings.Contains(res.Content, `"words":1`) || !strings.Contains(res.Content, "untrusted data") {
		t.Fatalf("count_file: %v %+v", err, res)
	}
	if err := s.al.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	err = s.al.Reader().Entries(t.Context(), audit.Filter{}, func(e audit.Entry) error {
		if e.Session == id {
			b, _ := json.Marshal(e.Payload)
			if e.Kind == audit.KindExecStart && !strings.Contains(string(b), `"class":"plugin"`) {
				t.Errorf("exec.start %s", b)
			}
			kinds = append(kinds, string(e.Kind))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"plugin.tools", "plugin.server", "gate.policy", "exec.start", "exec.end"} {
		if !slices.Contains(kinds, k) {
			t.Errorf("no %s among %v", k, kinds)
		}
	}
	bxs.EndSession(id)
	bxs.plugins.mu.Lock()
	left := len(bxs.plugins.hosts)
	bxs.plugins.mu.Unlock()
	if left != 0 {
		t.Errorf("%d plugin hosts left after the session ended", left)
	}
	// A sub-agent's session gets no tool outside the set it was given:
	// no plugin's.
	reg := tool.NewRegistry()
	rt, err := native.New(native.Options{Self: s.u.Self})
	if err != nil {
		t.Fatal(err)
	}
	if err := bxs.plugins.register(t.Context(), kernel.Env{Session: "child", Workspace: s.dir, Audit: s.al, Narrowing: &kernel.Narrowing{Tools: []string{"fs.read"}}}, reg, rt, "native", nil, nil); err != nil {
		t.Fatal(err)
	}
	if len(reg.List()) != 0 {
		t.Errorf("a sub-agent got plugin tools: %d", len(reg.List()))
	}
	// The kernel's stop leaves the plugin stopped, not running.
	r2, _, _ := s.open("b")
	if len(r2.Definitions()) == 0 {
		t.Fatal("no tools")
	}
	store := bxs.plugins.store.(*plugin.MemStore)
	if rec, _ := store.Get(t.Context(), "wordcount"); rec.State != plugin.Running {
		t.Fatalf("state %s while a session runs", rec.State)
	}
	bxs.Close()
	if rec, _ := store.Get(t.Context(), "wordcount"); rec.State != plugin.Stopped || rec.Reason != "the kernel stopped" && rec.Reason != "its sessions ended" {
		t.Errorf("state %s (%s) after the kernel's stop", rec.State, rec.Reason)
	}
}

// BenchmarkSessionToolCall is the per-call cost of tools through a
// session's router, each call's wall time kept for its median and p99:
// fs.read (a built-in on the fast path), shell.exec (a built-in in a
// sandbox started per call), and a plugin tool (an MCP call to the
// server running in its sandbox; docs/benchmarks.md).
func BenchmarkSessionToolCall(b *testing.B) {
	s, _ := pluginSessions(b)
	r, _, _ := s.open("bench")
	for _, c := range []struct{ name, tool, args string }{
		{"builtin-fs.read", "fs__read", `{"path":"file.txt"}`},
		{"builtin-shell.exec", "shell__exec", `{"command":"true"}`},
		{"plugin-wordcount.count", "mcp__wordcount__count", `{"text":"a b c"}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			var ds []time.Duration
			for b.Loop() {
				t0 := time.Now()
				res, err := r.Call(b.Context(), llm.ToolCall{ID: "b", Name: c.tool, Args: json.RawMessage(c.args)})
				ds = append(ds, time.Since(t0))
				if err != nil || res.IsError {
					b.Fatalf("%s: %v %s", c.tool, err, res.Content)
				}
			}
			slices.Sort(ds)
			b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), "median-us")
			b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds()), "p99-us")
		})
	}
}

// TestPluginEgress: a plugin that declares a host reaches it through
// its egress proxy, and nothing else; each request is recorded under the
// session as the sandbox plugin:NAME.
func TestPluginEgress(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts sandboxes")
	}
	// Go's clients never proxy loopback: the server listens on one of
	// the host's other addresses, which net.allow_addrs lets the proxy
	// reach.
	ip := hostAddr(t)
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello from the host") }))
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	declared := strings.TrimPrefix(srv.URL, "http://")
	s, bxs := pluginSessions(t)
	if err := os.WriteFile(filepath.Join(s.dir, "config", "fluffy", "config.yaml"), []byte("net:\n  allow_addrs: ["+ip+"/32]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pdir := filepath.Join(s.dir, "netplugin")
	build := exec.Command("go", "build", "-o", filepath.Join(pdir, "netplugin"), "./testdata/netplugin")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	store := bxs.plugins.store.(*plugin.MemStore)
	// Only the network plugin runs here.
	if err := store.SetState(t.Context(), "wordcount", plugin.Disabled, "not this test's"); err != nil {
		t.Fatal(err)
	}
	store.Put(plugin.Record{Dir: pdir, State: plugin.Enabled, Manifest: plugin.Manifest{Name: "net",
		Run: plugin.Run{Command: []string{"./netplugin"}}, Network: []string{declared}, Capabilities: []plugin.Capability{plugin.CapNetwork}}})
	r, id, _ := s.open("net")
	get := func(url string) string {
		args, _ := json.Marshal(map[string]string{"url": url})
		res, err := r.Call(t.Context(), llm.ToolCall{ID: "g", Name: "mcp__net__get", Args: args})
		if err != nil {
			t.Fatal(err)
		}
		return res.Content
	}
	if out := get(srv.URL); !strings.Contains(out, "hello from the host") {
		t.Fatalf("the declared host: %s", out)
	}
	if out := get("http://undeclared.example/"); strings.Contains(out, "status 200") {
		t.Fatalf("an undeclared host: %s", out)
	}
	if err := s.al.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	var reqs []string
	err = s.al.Reader().Entries(t.Context(), audit.Filter{}, func(e audit.Entry) error {
		if e.Session == id && e.Kind == audit.KindNetRequest {
			b, _ := json.Marshal(e.Payload)
			reqs = append(reqs, string(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || !strings.Contains(reqs[0], `"sandbox":"plugin:net"`) || !strings.Contains(reqs[1], "undeclared.example") || !strings.Contains(reqs[1], `"decision":"deny"`) {
		t.Fatalf("net.request entries %v", reqs)
	}
}

// hostAddr is an IPv4 address of this host's other than loopback.
func hostAddr(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Skip("this host has no IPv4 address but loopback")
	return ""
}

// TestIdleSessionLetsPluginsGo: when the kernel drops an idle external
// session's router (kernel.Idler), the session's plugin servers stop;
// the router built for its next call starts them again and its calls
// work.
func TestIdleSessionLetsPluginsGo(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts sandboxes")
	}
	s, bxs := pluginSessions(t)
	r, id, cs := s.open("idle")
	count := func(r agent.Tools) {
		t.Helper()
		res, err := r.Call(t.Context(), llm.ToolCall{ID: "c", Name: "mcp__wordcount__count", Args: json.RawMessage(`{"text":"a b"}`)})
		if err != nil || res.IsError || !strings.Contains(res.Content, `"words":2`) {
			t.Fatalf("count: %v %+v", err, res)
		}
	}
	count(r)
	var idler kernel.Idler = bxs
	idler.IdleSession(id)
	bxs.plugins.mu.Lock()
	left := len(bxs.plugins.hosts)
	bxs.plugins.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d plugin hosts left after the session went idle", left)
	}
	st, err := tdd.Resume(t.Context(), s.j, s.m, id, tdd.Explore)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := s.tools(t.Context(), kernel.Env{Session: id, Workspace: cs.Workspace(), ChangeSet: cs, TDD: st, Audit: s.al})
	if err != nil {
		t.Fatal(err)
	}
	count(r2)
}
