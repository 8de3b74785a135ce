package wiring

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/netproxy"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandboxrun"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

func TestEgressRules(t *testing.T) {
	c := config.Net{
		Allow:     []string{"pypi.org"},
		Templates: map[string][]string{"integration-test": {"*.example.com"}, "ai-provider": {"api.anthropic.com"}},
	}
	got := strings.Join(egressRules(c, "integration-test", []string{"127.0.0.1:8080"}), " ")
	if got != "pypi.org *.example.com 127.0.0.1:8080" {
		t.Errorf("rules %q", got)
	}
	if got := egressRules(config.Net{}, "code-executor", nil); len(got) != 0 {
		t.Errorf("rules %q from nothing", got)
	}
}

type failingRecorder struct{ err error }

func (f failingRecorder) RecordEgress(context.Context, netproxy.Record) error { return f.err }

func TestCLIRecorder(t *testing.T) {
	var stderr, log strings.Builder
	boom := errors.New("audit down")
	r := &cliRecorder{stderr: &stderr, json: netproxy.NewJSONRecorder(&log), next: failingRecorder{boom}}
	allow := netproxy.Record{Method: "GET", Host: "a.example", Port: 80, Decision: netproxy.Allowed, Rule: "a.example"}
	deny := netproxy.Record{Method: "CONNECT", Host: "b.example", Port: 443, Decision: netproxy.Denied, Rule: "not-allowed", Reason: "b.example:443 is not on this sandbox's allow-list"}
	if err := r.RecordEgress(t.Context(), allow); !errors.Is(err, boom) {
		t.Errorf("a failing recorder's error was lost: %v", err)
	}
	r.RecordEgress(t.Context(), deny)
	if stderr.String() != "fluffy: egress: CONNECT b.example:443 deny (not-allowed: b.example:443 is not on this sandbox's allow-list)\n" {
		t.Errorf("stderr %q", stderr.String())
	}
	if n := strings.Count(log.String(), "\n"); n != 2 {
		t.Errorf("%d JSON lines", n)
	}
}

func TestModelEndpointRule(t *testing.T) {
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	none := env(nil)
	tests := []struct {
		model    string
		baseURLs map[string]string
		env      func(string) (string, bool)
		want     string
		wantErr  string
	}{
		{model: "openai/gpt-5", env: none, want: "api.openai.com:443"},
		{model: "anthropic/claude-sonnet-4-5", env: none, want: "api.anthropic.com:443"},
		{model: "ollama/qwen3", env: none, want: "127.0.0.1:11434"},
		{model: "ollama/qwen3", env: env(map[string]string{"OLLAMA_HOST": "gpu-box:8080"}), want: "gpu-box:8080"},
		{model: "openai/gpt-5", baseURLs: map[string]string{"openai": "http://10.1.2.3:8000/v1"}, env: none, want: "10.1.2.3:8000"},
		{model: "replay/demo", env: none, want: ""},
		{model: "openai-compat/x", env: none, want: ""},
		{model: "openai/gpt-5", baseURLs: map[string]string{"openai": "ftp://x/"}, env: none, wantErr: "scheme must be http or https"},
		{model: "nonsense", env: none, wantErr: "want provider/name"},
	}
	for _, tt := range tests {
		got, err := modelEndpointRule(tt.model, tt.baseURLs, tt.env)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: err = %v, want %q", tt.model, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s %v: %q, %v; want %q", tt.model, tt.baseURLs, got, err, tt.want)
		}
	}
}

// The proxy's socket directory is private (0700, ours, a fresh random
// name) and lies under $XDG_RUNTIME_DIR only when that directory is
// private too; anything else falls back to TMPDIR.
func TestEgressDir(t *testing.T) {
	tmp := t.TempDir()
	private, open := t.TempDir(), t.TempDir()
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	long := filepath.Join(private, strings.Repeat("d", 90))
	if err := os.Mkdir(long, 0o700); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, xdg, wantParent string
	}{
		{"no runtime dir", "", tmp},
		{"private runtime dir", private, private},
		{"runtime dir open to others", open, tmp},
		{"relative runtime dir", "run", tmp},
		{"missing runtime dir", filepath.Join(private, "missing"), tmp},
		{"runtime dir too long for a socket", long, tmp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := []string{"TMPDIR=" + tmp}
			if tt.xdg != "" {
				env = append(env, "XDG_RUNTIME_DIR="+tt.xdg)
			}
			dir, err := egressDir(&userenv.Env{Environ: env})
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
			if filepath.Dir(dir) != tt.wantParent || !strings.HasPrefix(filepath.Base(dir), "fluffy-egress-") {
				t.Errorf("dir %s, want a fresh directory in %s", dir, tt.wantParent)
			}
			fi, err := os.Lstat(dir)
			if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
				t.Errorf("dir %s: %v, %v: want a 0700 directory", dir, fi.Mode(), err)
			}
			again, err := egressDir(&userenv.Env{Environ: env})
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(again)
			if again == dir {
				t.Errorf("two runs share %s", dir)
			}
		})
	}
}

// fakeSink records what a sandboxrun.Recorder appends and when it flushes.
type fakeSink struct {
	entries []audit.Entry
	flushed int // entries durable at the last Flush
}

func (f *fakeSink) Append(_ context.Context, e audit.Entry) (uint64, error) {
	f.entries = append(f.entries, e)
	return uint64(len(f.entries)), nil
}
func (f *fakeSink) Flush(context.Context) error { f.flushed = len(f.entries); return nil }
func (f *fakeSink) Close() error                { return nil }

// A decision is a net.request made durable at once; an allowed request's
// end is a net.end naming it by seq and id; a refusal has no net.end; a
// refused peer is a net.refused, never a net.request.
func TestAuditRecorderEgress(t *testing.T) {
	sink := &fakeSink{}
	rec := sandboxrun.NewRecorder("", func() (sandboxrun.AuditSink, error) { return sink, nil })
	r := auditEgress{rec}
	ctx := t.Context()
	rec.SetEgress(egressAudit(netproxy.NewAllowList(), nil))
	if err := rec.Start(ctx, sandbox.Spec{Argv: []string{"curl"}, Network: sandbox.NetworkProxy}); err != nil {
		t.Fatal(err)
	}
	if p, _ := sink.entries[0].Payload.(audit.ExecStart); p.Egress == nil {
		t.Errorf("exec.start %v names no allow-list", p)
	}
	sink.entries, sink.flushed = nil, 0
	open := netproxy.Record{ID: "a1", Phase: netproxy.PhaseOpen, Method: "CONNECT", Host: "a.example", Port: 443, Decision: netproxy.Allowed, Rule: "a.example"}
	if err := r.RecordEgress(ctx, open); err != nil {
		t.Fatal(err)
	}
	if len(sink.entries) != 1 || sink.entries[0].Kind != audit.KindNetRequest || sink.flushed != 1 {
		t.Fatalf("after the decision: %+v, %d durable", sink.entries, sink.flushed)
	}
	deny := netproxy.Record{ID: "d1", Phase: netproxy.PhaseOpen, Method: "GET", Host: "b.example", Port: 80, Decision: netproxy.Denied, Rule: "not-allowed", Status: 403}
	if err := r.RecordEgress(ctx, deny); err != nil || sink.flushed != 2 {
		t.Fatalf("refusal: %v, %d durable", err, sink.flushed)
	}
	end := open
	end.Phase, end.Status, end.BytesUp, end.BytesDown = netproxy.PhaseEnd, 200, 10, 20
	if err := r.RecordEgress(ctx, end); err != nil {
		t.Fatal(err)
	}
	last := sink.entries[len(sink.entries)-1]
	p, _ := last.Payload.(audit.NetEnd)
	if last.Kind != audit.KindNetEnd || p.Request != 1 || p.Exec != 1 || p.ID != "a1" || p.BytesUp != 10 {
		t.Errorf("end entry %s %v", last.Kind, p)
	}
	if err := r.RecordPeerRefused(ctx, netproxy.PeerRefusal{Peer: netproxy.Peer{UID: 65534, PID: 7}, Reason: "not ours"}); err != nil {
		t.Fatal(err)
	}
	if k := sink.entries[len(sink.entries)-1].Kind; k != audit.KindNetRefused {
		t.Errorf("peer refusal recorded as %s", k)
	}
	var requests int
	for _, e := range sink.entries {
		if e.Kind == audit.KindNetRequest {
			requests++
		}
	}
	if requests != 2 {
		t.Errorf("%d net.request entries, want 2", requests)
	}
}

// TestTrustProxyCA: a proxy with a TLS swap gives the sandbox one file,
// the system's roots followed by the proxy's CA, mounted read-only at
// sandbox.CABundlePath and named by the TLS clients' variables; a proxy
// without one gives nothing.
func TestTrustProxyCA(t *testing.T) {
	for _, tls := range []bool{true, false} {
		p, err := netproxy.New(netproxy.Options{Recorder: failingRecorder{}, Swaps: []netproxy.Swap{{
			Placeholder: netproxy.PlaceholderPrefix + "abc", Value: []byte("v"), Hosts: []string{"api.example.com"}, TLS: tls}}})
		if err != nil {
			t.Fatal(err)
		}
		e := &egress{proxy: p, served: make(chan struct{})}
		defer e.Close()
		if err := e.trustProxyCA(t.TempDir()); err != nil {
			if errors.Is(err, netproxy.ErrNoSystemRoots) {
				t.Skip("no system certificate bundle here (scripts/deps.sh installs ca-certificates)")
			}
			t.Fatal(err)
		}
		if !tls {
			if len(e.mounts) != 0 || len(e.env) != 0 {
				t.Errorf("without a TLS swap: mounts %v env %v", e.mounts, e.env)
			}
			continue
		}
		if len(e.mounts) != 1 || e.mounts[0].Target != sandbox.CABundlePath || e.mounts[0].Writable {
			t.Fatalf("mounts %v", e.mounts)
		}
		for _, v := range []string{"SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"} {
			if !slices.Contains(e.env, v+"="+sandbox.CABundlePath) {
				t.Errorf("env %v lacks %s", e.env, v)
			}
		}
		b, err := os.ReadFile(e.mounts[0].Source)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasSuffix(b, p.CACert()) || bytes.Count(b, []byte("BEGIN CERTIFICATE")) < 2 {
			t.Errorf("the bundle is not the system's roots and the CA (%d bytes)", len(b))
		}
		if bytes.Contains(b, []byte("PRIVATE KEY")) {
			t.Error("the bundle holds a key")
		}
		if fi, _ := os.Stat(e.mounts[0].Source); fi.Mode().Perm() != 0o644 {
			t.Errorf("mode %v", fi.Mode())
		}
		if fi, _ := os.Stat(filepath.Dir(e.mounts[0].Source)); fi.Mode().Perm() != 0o755 {
			t.Errorf("directory mode %v: the sandbox's user must enter it", fi.Mode())
		}
		e.Close()
		if _, err := os.Stat(e.mounts[0].Source); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the bundle outlives the proxy: %v", err)
		}
	}
}

// A request the proxy swapped secrets into names them (never their
// values) in its net.request, with tls when the proxy terminated it; a
// placeholder sent where its secret is not bound is a refusal with its
// reason, in the CLI's log and a session's alike.
func TestAuditSwaps(t *testing.T) {
	swapped := netproxy.Record{ID: "s1", Phase: netproxy.PhaseOpen, Method: "GET", Host: "api.example.com", Port: 443, Decision: netproxy.Allowed,
		Rule: "api.example.com", Secrets: []string{"secret://env/API_KEY"}, TLS: true}
	refused := netproxy.Record{ID: "r1", Phase: netproxy.PhaseOpen, Method: "GET", Host: "evil.example", Port: 80, Decision: netproxy.Denied,
		Rule: "secret:unbound", Reason: "the request carries the placeholder of secret secret://env/API_KEY", Status: 403}
	check := func(t *testing.T, entries []audit.Entry) {
		t.Helper()
		var got []audit.NetRequest
		for _, e := range entries {
			if p, ok := e.Payload.(audit.NetRequest); ok {
				got = append(got, p)
			}
		}
		if len(got) != 2 {
			t.Fatalf("net.request entries %+v", entries)
		}
		if !slices.Equal(got[0].Secrets, []string{"secret://env/API_KEY"}) || !got[0].TLS {
			t.Errorf("swapped: %+v", got[0])
		}
		if got[1].Rule != "secret:unbound" || got[1].Status != 403 || !strings.Contains(got[1].Reason, "placeholder") || got[1].Secrets != nil {
			t.Errorf("refused: %+v", got[1])
		}
	}
	t.Run("cli", func(t *testing.T) {
		sink := &fakeSink{}
		rec := sandboxrun.NewRecorder("", func() (sandboxrun.AuditSink, error) { return sink, nil })
		if err := rec.Start(t.Context(), sandbox.Spec{Argv: []string{"curl"}, Network: sandbox.NetworkProxy}); err != nil {
			t.Fatal(err)
		}
		for _, r := range []netproxy.Record{swapped, refused} {
			if err := (auditEgress{rec}).RecordEgress(t.Context(), r); err != nil {
				t.Fatal(err)
			}
		}
		check(t, sink.entries)
	})
	t.Run("session", func(t *testing.T) {
		sink := &fakeSink{}
		a := &sessionNetAudit{log: sink, session: "s", call: "c1", open: map[string]uint64{}}
		for _, r := range []netproxy.Record{swapped, refused} {
			if err := a.RecordEgress(t.Context(), r); err != nil {
				t.Fatal(err)
			}
		}
		check(t, sink.entries)
	})
}
