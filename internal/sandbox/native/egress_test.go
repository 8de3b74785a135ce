package native

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/netproxy"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

type egressRecs struct {
	mu   sync.Mutex
	recs []netproxy.Record
}

func (e *egressRecs) RecordEgress(_ context.Context, r netproxy.Record) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.recs = append(e.recs, r)
	return nil
}

func (e *egressRecs) all() []netproxy.Record {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]netproxy.Record(nil), e.recs...)
}

// TestEgressProxy runs curl in a sandbox with network mode proxy: the
// allow-listed server on the host's loopback answers through the proxy,
// anything else is refused, and going around the proxy finds no network.
// It runs as root (the socket arrives as a detached mount) and, through
// TestSuiteUnprivileged, as an ordinary user (the socket path is bound).
func TestEgressProxy(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl missing (scripts/deps.sh installs it)")
	}
	rt := newRuntime(t, Options{AllowDegraded: true})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "from the host") }))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	al, err := netproxy.ParseAllowList([]string{u.Host})
	if err != nil {
		t.Fatal(err)
	}
	rec := &egressRecs{}
	p, err := netproxy.New(netproxy.Options{Allow: al, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	// /var/tmp: writable by the unprivileged rerun, whose TMPDIR is not.
	dir, err := os.MkdirTemp("/var/tmp", "fluffy-egress-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := dir + "/egress.sock"
	// The socket is 0600: it belongs to the sandbox's host user.
	uid := -1
	if os.Geteuid() == 0 {
		uid = SandboxUID
	}
	ln, err := netproxy.ListenUnix(sock, uid)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { p.Serve(ln); close(served) }()
	defer func() { p.Close(); <-served }()

	env := append([]string{"PATH=/usr/bin:/bin"}, netproxy.ClientEnv(sandbox.ProxyListen, sandbox.ProxySocketPath, al)...)
	spec := func(args ...string) sandbox.Spec {
		return sandbox.Spec{Argv: append([]string{curl, "-sS"}, args...), Env: env, Network: sandbox.NetworkProxy,
			ProxySocket: sock, Seccomp: "standard-net"}
	}
	res := run(t, rt, spec(up.URL))
	if res.ExitCode != 0 || string(res.Stdout) != "from the host" {
		t.Fatalf("allowed: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	res = run(t, rt, spec("-w", " %{http_code}", "http://denied.example/"))
	if !strings.Contains(string(res.Stdout), `refused by rule "not-allowed"`) || !strings.HasSuffix(string(res.Stdout), " 403") {
		t.Errorf("denied: stdout %q", res.Stdout)
	}
	res = run(t, rt, spec("--noproxy", "*", up.URL))
	if res.ExitCode == 0 {
		t.Errorf("a connection around the proxy succeeded: %q", res.Stdout)
	}
	// Without network mode proxy, the proxy variables lead nowhere.
	none := spec(up.URL)
	none.Network = ""
	if res := run(t, rt, none); res.ExitCode == 0 {
		t.Errorf("network none reached the proxy: %q", res.Stdout)
	}
	// Each request's last record: an allowed one's end, a refusal.
	recs := slices.DeleteFunc(rec.all(), func(r netproxy.Record) bool { return r.Phase == netproxy.PhaseOpen && r.Decision == netproxy.Allowed })
	if len(recs) != 2 || recs[0].Decision != netproxy.Allowed || recs[1].Decision != netproxy.Denied || recs[1].Host != "denied.example" {
		t.Errorf("audit records: %+v", recs)
	}
}

func TestProxyNeedsSocket(t *testing.T) {
	s := sandbox.Spec{Argv: []string{"/bin/true"}, Network: sandbox.NetworkProxy}
	if err := s.Validate(); err == nil {
		t.Error("network mode proxy without a socket validated")
	}
	s.ProxySocket = "/run/x.sock"
	if err := s.Validate(); err != nil {
		t.Error(err)
	}
}
