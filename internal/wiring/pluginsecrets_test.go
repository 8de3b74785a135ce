package wiring

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/plugin"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native"
	"github.com/fluffy-agent/fluffy/internal/secret"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// TestPluginCredentials: a plugin's declared credential goes through the
// broker's declared-use path: the policy's secret operation allows it,
// it is recorded as secret.use for plugin:NAME (never the value), the
// server gets it in its environment and nothing else of the broker's,
// and the session's redaction strips it; a policy that blocks secrets
// refuses the start, recorded too.
func TestPluginCredentials(t *testing.T) {
	s := newSecretSession(t, allowSecrets, defaultUses, nil)
	ss := s.sec.forSession(s.live, s.cs.Workspace(), s.session, s.tee, nil, s.cs)
	creds := []plugin.Credential{{Ref: s.sec.uses[0].Ref.String(), As: "env", Name: "API_TOKEN"}}
	got, err := ss.plugin(t.Context(), "wc", creds)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Env, []string{"API_TOKEN=" + s.value}) || len(got.Mounts) != 0 {
		t.Fatalf("env %q, mounts %v", got.Env, got.Mounts)
	}
	if r := string(got.Redact([]byte("echo " + s.value))); strings.Contains(r, s.value) || !strings.Contains(r, "[REDACTED]") {
		t.Errorf("redacted: %q", r)
	}
	got.Close()
	var uses []audit.SecretUse
	for _, e := range s.tee.entries {
		if b, _ := json.Marshal(e.Payload); strings.Contains(string(b), s.value) {
			t.Errorf("audit %s holds the value: %s", e.Kind, b)
		}
		if p, ok := e.Payload.(audit.SecretUse); ok {
			uses = append(uses, p)
		}
	}
	if len(uses) != 1 || uses[0].Call != "plugin:wc" || uses[0].Decision != "allowed" || uses[0].Rule != "my-secrets" || uses[0].Name != "API_TOKEN" {
		t.Fatalf("secret.use %+v", uses)
	}
	// stdin is the server's MCP stream: refused before anything.
	if _, err := ss.plugin(t.Context(), "wc", []plugin.Credential{{Ref: creds[0].Ref, As: "stdin"}}); !errors.Is(err, ErrSecretRefused) {
		t.Errorf("stdin use: %v", err)
	}
}

// TestPluginCredentialsBlocked: the policy's secret operation decides a
// plugin's credentials as any other use: blocked, the server gets none.
func TestPluginCredentialsBlocked(t *testing.T) {
	block := "rules:\n  - id: no-secrets\n    effect: block\n    match:\n      action: secret\n"
	s := newSecretSession(t, block, defaultUses, nil)
	ss := s.sec.forSession(s.live, s.cs.Workspace(), s.session, s.tee, nil, s.cs)
	creds := []plugin.Credential{{Ref: s.sec.uses[0].Ref.String(), As: "env", Name: "API_TOKEN"}}
	if _, err := ss.plugin(t.Context(), "wc", creds); !errors.Is(err, ErrSecretRefused) {
		t.Fatalf("blocked use: %v", err)
	}
	var refused bool
	for _, e := range s.tee.entries {
		if p, ok := e.Payload.(audit.SecretUse); ok && p.Call == "plugin:wc" && p.Decision == "refused" && p.Rule == "no-secrets" {
			refused = true
		}
	}
	if !refused {
		t.Fatalf("no refusal recorded: %+v", s.tee.entries)
	}
}

// TestPluginProxyCredential: a plugin's proxy credential takes the
// command path's swap. The server holds a placeholder only (what it
// sends shows it, never the value); its egress proxy swaps the value in
// for the bound host, and refuses the placeholder sent to another
// declared host; with tls the server trusts the proxy's CA; the use is
// recorded as secret.use for plugin:net without the value, the request
// as net.request naming the secret.
func TestPluginProxyCredential(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts sandboxes")
	}
	// Go's clients never proxy loopback: the servers listen on one of
	// the host's other addresses, which net.allow_addrs lets the proxy
	// reach.
	ip := hostAddr(t)
	var mu sync.Mutex
	var got []string
	serve := func(tag string) *httptest.Server {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			got = append(got, tag+r.Header.Get("Authorization"))
			mu.Unlock()
			io.WriteString(w, "ok")
		}))
		srv.Listener = ln
		srv.Start()
		t.Cleanup(srv.Close)
		return srv
	}
	bound, other := serve(""), serve("other:")
	bh, oh := strings.TrimPrefix(bound.URL, "http://"), strings.TrimPrefix(other.URL, "http://")
	s := newSecretSession(t, allowSecrets, func(keyFile string) string {
		return "    - {ref: file:" + keyFile + ", as: env, name: TOKEN, commands: [printenv]}\n" +
			"net:\n  allow_addrs: [" + ip + "/32]\n"
	}, nil)
	ss := s.sec.forSession(s.live, s.cs.Workspace(), s.session, s.tee, nil, s.cs)

	pdir := t.TempDir()
	for _, d := range []string{pdir, filepath.Dir(pdir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.Command("go", "build", "-o", filepath.Join(pdir, "netplugin"), "./testdata/netplugin")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	store := plugin.NewMemStore()
	store.Put(plugin.Record{Dir: pdir, State: plugin.Enabled, Manifest: plugin.Manifest{Name: "net",
		Run: plugin.Run{Command: []string{"./netplugin"}}, Network: []string{bh, oh},
		Credentials:  []plugin.Credential{{Ref: s.sec.uses[0].Ref.String(), As: "proxy", Name: "API_KEY", Bind: []string{bh}, TLS: true}},
		Capabilities: []plugin.Capability{plugin.CapNetwork, plugin.CapSecrets}}})
	p := newSessionPlugins(s.u, slog.New(slog.DiscardHandler), store)
	defer p.Close()
	rt, err := native.New(native.Options{Self: s.u.Self})
	if err != nil {
		t.Fatal(err)
	}
	reg := tool.NewRegistry()
	env := kernel.Env{Session: s.session, Workspace: s.cs.Workspace(), ChangeSet: s.cs, Audit: s.tee}
	if err := p.register(t.Context(), env, reg, rt, "native", nil, ss); err != nil {
		t.Fatal(err)
	}
	get := func(url string) string {
		t.Helper()
		tl, err := reg.Lookup("mcp.net.get")
		if err != nil {
			rec, _ := store.Get(t.Context(), "net")
			t.Fatalf("%v (plugin %s: %s)", err, rec.State, rec.Reason)
		}
		a, err := tl.Decode(json.RawMessage(`{"url":"` + url + `/","auth":"API_KEY"}`))
		if err != nil {
			t.Fatal(err)
		}
		res, err := tl.Run(t.Context(), a)
		if err != nil {
			t.Fatal(err)
		}
		return string(res.Output)
	}
	out := get(bound.URL)
	if !strings.Contains(out, "status 200") || !strings.Contains(out, "sent Bearer "+secret.PlaceholderPrefix) || strings.Contains(out, s.value) {
		t.Fatalf("the bound host: %s", out)
	}
	if out := get(other.URL); strings.Contains(out, "status 200") || strings.Contains(out, s.value) {
		t.Fatalf("the placeholder to a host it is not bound to: %s", out)
	}
	mu.Lock()
	if len(got) != 1 || got[0] != "Bearer "+s.value {
		t.Errorf("the servers got %q; want the bound one to get the value and the other nothing", got)
	}
	mu.Unlock()
	// tls: the server trusts the proxy's CA (beside the system's roots),
	// so the proxy can swap inside HTTPS to the bound host.
	tl, err := reg.Lookup("mcp.net.cafile")
	if err != nil {
		t.Fatal(err)
	}
	a, err := tl.Decode(json.RawMessage(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tl.Run(t.Context(), a)
	if err != nil || res.IsError || !regexp.MustCompile(regexp.QuoteMeta(sandbox.CABundlePath)+`: [1-9][0-9]* certificates`).Match(res.Output) {
		t.Errorf("the CA bundle in the server's sandbox: %q %v", res.Output, err)
	}
	var uses, reqs []string
	s.tee.mu.Lock()
	for _, e := range s.tee.entries {
		b, _ := json.Marshal(e.Payload)
		if strings.Contains(string(b), s.value) {
			t.Errorf("audit %s holds the value: %s", e.Kind, b)
		}
		switch e.Kind {
		case audit.KindSecretUse:
			uses = append(uses, string(b))
		case audit.KindNetRequest:
			reqs = append(reqs, string(b))
		}
	}
	s.tee.mu.Unlock()
	if len(uses) != 1 || !strings.Contains(uses[0], `"call":"plugin:net"`) || !strings.Contains(uses[0], `"as":"proxy"`) || !strings.Contains(uses[0], `"decision":"allowed"`) {
		t.Errorf("secret.use entries %v", uses)
	}
	if len(reqs) != 2 || !strings.Contains(reqs[0], `"sandbox":"plugin:net"`) || !strings.Contains(reqs[0], `"secrets"`) || !strings.Contains(reqs[1], `"decision":"deny"`) {
		t.Errorf("net.request entries %v", reqs)
	}
}

// TestPluginCredentialsEnabledLate: a kernel that started with no
// secret broker (nothing declared a use) builds one when a session
// finds a plugin enabled since that declares credentials: the plugin
// gets them without a restart, the use is decided and recorded as any.
func TestPluginCredentialsEnabledLate(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts sandboxes")
	}
	s, bxs := pluginSessions(t)
	bxs.plugins.late = &lateSecrets{build: func() (*kernelSecrets, error) { return newPluginKernelSecrets(s.u, s.log) }}
	policy := "rules:\n  - id: run-anything\n    effect: allow\n    match:\n      action: exec\n" +
		"  - id: my-secrets\n    effect: allow\n    match:\n      action: secret\n"
	if err := os.WriteFile(filepath.Join(s.dir, "config", "fluffy", "policy.yaml"), []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(s.dir, "token")
	if err := os.WriteFile(token, []byte("tok-late-7d3e\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A session before: no plugin declares credentials, no broker.
	s.open("before")
	if bxs.plugins.late.built() != nil {
		t.Fatal("a broker was built with no plugin declaring credentials")
	}
	// Enabled since: the wordcount server again, declaring one.
	store := bxs.plugins.store.(*plugin.MemStore)
	rec, err := store.Get(t.Context(), "wordcount")
	if err != nil {
		t.Fatal(err)
	}
	rec.Manifest.Name = "wc_late"
	rec.Manifest.Credentials = []plugin.Credential{{Ref: "file:" + token, As: "env", Name: "TOKEN"}}
	rec.Manifest.Capabilities = append(rec.Manifest.Capabilities, plugin.CapSecrets)
	store.Put(rec)
	r, id, _ := s.open("after")
	got, err := store.Get(t.Context(), "wc_late")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != plugin.Running {
		t.Fatalf("the plugin enabled late: %s (%s)", got.State, got.Reason)
	}
	var names []string
	for _, d := range r.Definitions() {
		names = append(names, d.Name)
	}
	if !slices.Contains(names, "mcp__wc_late__count") {
		t.Fatalf("tools %v", names)
	}
	if err := s.al.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	var uses []string
	err = s.al.Reader().Entries(t.Context(), audit.Filter{}, func(e audit.Entry) error {
		if e.Session == id && e.Kind == audit.KindSecretUse {
			b, _ := json.Marshal(e.Payload)
			uses = append(uses, string(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(uses) != 1 || !strings.Contains(uses[0], `"call":"plugin:wc_late"`) || !strings.Contains(uses[0], `"decision":"allowed"`) {
		t.Fatalf("secret.use entries %v", uses)
	}
}
