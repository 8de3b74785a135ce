package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

// scriptCmds are extra testscript commands.
var scriptCmds = map[string]func(ts *testscript.TestScript, neg bool, args []string){
	"egress-servers": egressServers,
}

// egressServers starts an HTTP and an HTTPS test server on the host's
// 127.0.0.1 for the rest of the script and sets HTTP_URL, HTTP_HOSTPORT,
// HTTP_PORT, HTTPS_URL, HTTPS_HOSTPORT; ca.pem (in the current directory) is the HTTPS server's
// certificate, for the sandbox to trust. Paths: / answers "hello from the
// host"; /big sends 1 MiB with a Content-Length; /stream sends 1 MiB
// without one; /slow answers after 10 s; /auth and /v1/forecast answer
// with a hash of the request's Authorization.
func egressServers(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: egress-servers")
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Content-Length", fmt.Sprint(1<<20))
			w.Write(make([]byte, 1<<20))
		case "/stream":
			for range 64 {
				w.Write(make([]byte, 16<<10))
				w.(http.Flusher).Flush()
			}
		case "/auth":
			// What the request authorized itself with, hashed: a script
			// checks a credential arrived without printing it.
			fmt.Fprintf(w, "auth sha256 %x\n", sha256.Sum256([]byte(r.Header.Get("Authorization"))))
		case "/v1/forecast":
			// The weather skill's API (examples/skills/weather): the
			// summary carries what the request authorized itself with,
			// hashed, as /auth does.
			fmt.Fprintf(w, `{"summary": "sunny (auth sha256 %x)", "low": 3, "high": 9}`, sha256.Sum256([]byte(r.Header.Get("Authorization"))))
		case "/slow":
			select {
			case <-time.After(10 * time.Second):
			case <-r.Context().Done():
			}
		default:
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "hello from the host (%s %s, %d bytes)\n", r.Method, r.Host, len(b))
		}
	})
	plain := httptest.NewServer(h)
	tls := httptest.NewTLSServer(h)
	ts.Defer(plain.Close)
	ts.Defer(tls.Close)
	u, _ := url.Parse(plain.URL)
	ts.Setenv("HTTP_URL", plain.URL)
	ts.Setenv("HTTP_HOSTPORT", u.Host)
	ts.Setenv("HTTP_PORT", u.Port())
	u, _ = url.Parse(tls.URL)
	ts.Setenv("HTTPS_URL", tls.URL)
	ts.Setenv("HTTPS_HOSTPORT", u.Host)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tls.Certificate().Raw})
	if err := os.WriteFile(ts.MkAbs("ca.pem"), ca, 0o644); err != nil {
		ts.Fatalf("%v", err)
	}
}

// egressRun is an installed fluffy (front binary, sandbox server) with a
// loopback HTTP server whose /hold requests wait until release is called.
type egressRun struct {
	bin, work, runDir, ws string
	env                   []string
	srv                   *httptest.Server
	hits                  chan string // paths as they arrive
	release               func()
}

func newEgressRun(t *testing.T) *egressRun {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("plays another local user: needs root to switch to uid 65534")
	}
	for _, tool := range []string{"curl", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	e := &egressRun{hits: make(chan string, 100)}
	e.bin, e.work, e.runDir, e.env = frontInstall(t)
	e.ws = filepath.Join(e.work, "ws")
	if err := os.MkdirAll(e.ws, 0o700); err != nil {
		t.Fatal(err)
	}
	held := make(chan struct{})
	var once sync.Once
	e.release = func() { once.Do(func() { close(held) }) }
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.hits <- r.URL.Path
		if r.URL.Path == "/hold" {
			select {
			case <-held:
			case <-r.Context().Done():
			case <-time.After(60 * time.Second):
			}
		}
		fmt.Fprintln(w, "hello", r.URL.Path)
	}))
	t.Cleanup(e.srv.Close)
	t.Cleanup(e.release)
	return e
}

func (e *egressRun) hostPort() string { return strings.TrimPrefix(e.srv.URL, "http://") }

// fluffy runs the installed fluffy in the workspace and returns its
// output and exit status.
func (e *egressRun) fluffy(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(e.bin, "fluffy"), args...)
	cmd.Dir, cmd.Env = e.ws, e.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("fluffy %q: %v", args, err)
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

// start starts 'fluffy sandbox run' in the background, the sandboxed
// command's HTTP requests going through the proxy to the loopback server.
func (e *egressRun) start(t *testing.T, script string) (wait func() (string, int)) {
	t.Helper()
	cmd := exec.Command(filepath.Join(e.bin, "fluffy"), "sandbox", "run", "--net", "proxy", "--allow-host", e.hostPort(),
		"--", "/bin/sh", "-c", script)
	cmd.Dir, cmd.Env = e.ws, e.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	return func() (string, int) {
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("fluffy sandbox run did not end")
		}
		return out.String(), cmd.ProcessState.ExitCode()
	}
}

// awaitHit waits until the server has been asked for path.
func (e *egressRun) awaitHit(t *testing.T, path string) {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case p := <-e.hits:
			if p == path {
				return
			}
		case <-timeout:
			t.Fatalf("the server never saw %s", path)
		}
	}
}

// auditEntries lists the audit log's entries of kind as JSON objects.
func (e *egressRun) auditEntries(t *testing.T, kind string) []map[string]any {
	t.Helper()
	out, errOut, code := e.fluffy(t, "audit", "log", "--kind", kind, "--json")
	if code != 0 {
		t.Fatalf("audit log: exit %d: %s", code, errOut)
	}
	var entries []map[string]any
	for line := range strings.Lines(out) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("audit log line %q: %v", line, err)
		}
		entries = append(entries, m)
	}
	return entries
}

// egressSockets finds, as another user would, every egress proxy socket
// on the machine: the paths bound (/proc/net/unix is world-readable) and
// the sandbox-side path through each process's /proc/PID/root.
func egressSockets(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		t.Fatal(err)
	}
	var socks []string
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) == 8 && strings.HasSuffix(f[7], "/egress.sock") && !slices.Contains(socks, f[7]) {
			socks = append(socks, f[7])
		}
	}
	roots, _ := filepath.Glob("/proc/[0-9]*/root/run/fluffy/egress.sock")
	return append(socks, roots...)
}

// Another local user cannot use a run's egress proxy: it finds the
// socket (its path is listed in /proc/net/unix; the sandbox's copy is
// under /proc/PID/root), but the directory keeps it from the path and the
// peer check refuses its connection through the sandbox's copy. Nothing
// reaches the upstream, the owner's audit log gains no net.request, and
// the refusal is recorded as net.refused with the intruder's uid.
func TestEgressSocketRefusesOtherUsers(t *testing.T) {
	e := newEgressRun(t)
	url := e.srv.URL
	wait := e.start(t, "curl -sSf "+url+"/owner && curl -sSf "+url+"/hold")
	e.awaitHit(t, "/owner")
	e.awaitHit(t, "/hold") // the run's proxy is alive and busy

	socks := egressSockets(t)
	if len(socks) == 0 {
		t.Fatal("no egress socket found while a run was alive")
	}
	connected := false // some attempt got past connect(2) to the peer check
	for _, sock := range socks {
		// An absolute-form request, as a proxy client sends it.
		cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
			"curl", "-sS", "--max-time", "10", "--unix-socket", sock, "--request-target", url+"/intruder", url+"/intruder")
		out, err := cmd.CombinedOutput()
		t.Logf("uid 65534 through %s: %v: %s", sock, err, out)
		if err == nil {
			t.Errorf("uid 65534 got an answer through %s: %s", sock, out)
		}
		// curl's exit 7: it could not connect (the directory's mode).
		if cmd.ProcessState.ExitCode() != 7 {
			connected = true
		}
	}
	e.release()
	if out, code := wait(); code != 0 {
		t.Fatalf("the owner's run failed: exit %d: %s", code, out)
	}
	for {
		select {
		case p := <-e.hits:
			if p == "/intruder" {
				t.Errorf("another user's request reached the upstream")
			}
			continue
		default:
		}
		break
	}
	var requests int
	for _, en := range e.auditEntries(t, "net.request") {
		requests++
		t.Logf("net.request %v", en["payload"])
	}
	if requests != 2 {
		t.Errorf("%d net.request entries, want the owner's 2", requests)
	}
	refused := e.auditEntries(t, "net.refused")
	if connected && len(refused) == 0 {
		t.Error("the refused connection is not in the audit log")
	}
	for _, en := range refused {
		if p, _ := en["payload"].(map[string]any); p["peer_uid"] != float64(65534) {
			t.Errorf("net.refused %v: want peer_uid 65534", p)
		}
	}
	if _, errOut, code := e.fluffy(t, "audit", "verify"); code != 0 {
		t.Errorf("audit verify: exit %d: %s", code, errOut)
	}
}

// The decision to open a tunnel is on disk before bytes flow: a kill -9
// of the process running the proxy (the sandbox server) in the middle of
// a CONNECT tunnel leaves the net.request entry (and exec.start names the
// allow-list), and the log verifies.
func TestEgressDecisionSurvivesKill9(t *testing.T) {
	e := newEgressRun(t)
	// --proxytunnel: plain HTTP through a CONNECT tunnel.
	e.start(t, "curl -sSf --proxytunnel "+e.srv.URL+"/hold")
	e.awaitHit(t, "/hold") // the request went through the tunnel
	pids := serverPids(t, socketOf(t, e.runDir))
	if len(pids) != 1 {
		t.Fatalf("sandbox servers: %v, want one", pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(pids[0], 0) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the server outlived kill -9")
		}
	}
	_, port, _ := strings.Cut(e.hostPort(), ":")
	starts := e.auditEntries(t, "exec.start")
	if len(starts) == 0 {
		t.Fatal("no exec.start")
	}
	start := starts[len(starts)-1]
	var found bool
	for _, en := range e.auditEntries(t, "net.request") {
		p, _ := en["payload"].(map[string]any)
		t.Logf("net.request %v", p)
		if p["method"] == "CONNECT" && p["host"] == "127.0.0.1" && fmt.Sprint(p["port"]) == port && p["decision"] == "allow" &&
			p["id"] != "" && p["exec"] == start["seq"] {
			found = true
		}
	}
	if !found {
		t.Errorf("no net.request for the tunnel (of the run at exec.start %v) after kill -9", start["seq"])
	}
	p, _ := start["payload"].(map[string]any)
	eg, _ := p["egress"].(map[string]any)
	if allow, _ := eg["allow"].([]any); eg["mode"] != "proxy" || len(allow) != 1 || allow[0] != e.hostPort() {
		t.Errorf("exec.start egress %v, want mode proxy allowing %s", p["egress"], e.hostPort())
	}
	if _, errOut, code := e.fluffy(t, "audit", "verify"); code != 0 {
		t.Errorf("audit verify after kill -9: exit %d: %s", code, errOut)
	}
}
