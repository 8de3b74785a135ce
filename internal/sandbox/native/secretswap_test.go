package native

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/netproxy"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// swapProbeEnv makes the test binary, mounted into a sandbox, run
// swapProbeMain instead of the tests.
const swapProbeEnv = "FLUFFY_SWAP_PROBE"

// swapMask hides the secret from the probe: it is told value^swapMask and
// compares memory against that, so the value itself never exists in the
// probe's memory unless something put it there.
const swapMask = 0x5a

// swapProbeMain runs inside the sandbox: it sends the placeholder from
// $API_KEY to each URL of $FLUFFY_SWAP_URLS through the proxy, then
// searches its own environment and memory (/proc/self/mem) for the
// secret's value, given masked in $FLUFFY_SWAP_MASKED.
func swapProbeMain() int {
	fail := func(format string, a ...any) int {
		fmt.Printf("probe: "+format+"\n", a...)
		return 1
	}
	key := os.Getenv("API_KEY")
	masked, err := hex.DecodeString(os.Getenv("FLUFFY_SWAP_MASKED"))
	if err != nil || len(masked) == 0 || key == "" {
		return fail("no placeholder or masked value")
	}
	pu, _ := url.Parse("http://" + sandbox.ProxyListen)
	// Go never proxies loopback addresses on its own: name the proxy.
	// TLS roots come from SSL_CERT_FILE, as for any Go program.
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}, Timeout: 20 * time.Second}
	for _, u := range strings.Fields(os.Getenv("FLUFFY_SWAP_URLS")) {
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := c.Do(req)
		if err != nil {
			return fail("%s: %v", u, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "ok" {
			return fail("%s: %d %q", u, resp.StatusCode, b)
		}
	}
	env, err := os.ReadFile("/proc/self/environ")
	if err != nil {
		return fail("environ: %v", err)
	}
	if containsMasked(env, masked) && os.Getenv("FLUFFY_SWAP_CONTROL") == "" {
		return fail("the value is in the environment")
	}
	value, placeholder, scanned, err := scanOwnMemory(masked, []byte(key))
	switch {
	case err != nil:
		return fail("memory: %v", err)
	case value:
		return fail("the value is in memory")
	case !placeholder:
		return fail("the placeholder was not found in %d bytes of memory: the scan does not work", scanned)
	}
	fmt.Printf("probe: value absent, placeholder present in %d bytes of memory\n", scanned)
	return 0
}

// containsMasked reports whether b holds the bytes that masked hides.
func containsMasked(b, masked []byte) bool {
	first := masked[0] ^ swapMask
	for i := 0; i+len(masked) <= len(b); i++ {
		if b[i] != first {
			continue
		}
		k := 1
		for k < len(masked) && b[i+k]^swapMask == masked[k] {
			k++
		}
		if k == len(masked) {
			return true
		}
	}
	return false
}

// scanOwnMemory reads every readable mapping of this process through
// /proc/self/mem and reports whether the masked value and the
// placeholder occur in it.
func scanOwnMemory(masked, placeholder []byte) (value, ph bool, scanned int64, err error) {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return false, false, 0, err
	}
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		return false, false, 0, err
	}
	defer mem.Close()
	buf := make([]byte, 1<<20)
	overlap := max(len(masked), len(placeholder))
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[1][0] != 'r' || (len(f) >= 6 && f[5] == "[vvar]") {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		for off := start; off < end; {
			n := min(uint64(len(buf)), end-off)
			k, _ := mem.ReadAt(buf[:n], int64(off))
			if k <= 0 {
				break
			}
			scanned += int64(k)
			value = value || containsMasked(buf[:k], masked)
			ph = ph || bytes.Contains(buf[:k], placeholder)
			if off+uint64(k) >= end {
				break
			}
			// Step back so a match across the chunk boundary is seen.
			off += uint64(max(k-overlap, 1))
		}
	}
	return value, ph, scanned, sc.Err()
}

// apiLog is a test API: it keeps each request's Authorization header
// and query, and answers "ok" (never echoing them).
type apiLog struct {
	mu   sync.Mutex
	seen []string
}

func (a *apiLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.seen = append(a.seen, r.Header.Get("Authorization")+" "+r.URL.RawQuery)
	a.mu.Unlock()
	io.WriteString(w, "ok")
}

func (a *apiLog) all() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen...)
}

// TestSecretSwap runs processes in a real sandbox that hold only a
// placeholder: curl's, Python's and a Go program's requests reach the
// bound hosts (plain HTTP, and HTTPS the proxy terminates with its CA,
// which the sandbox trusts through the mounted bundle) with the real
// value; the placeholder sent to an unbound host is refused and
// audited; an HTTPS host no secret is bound to stays a tunnel, whose
// certificate is the server's own; and the sandboxed process's
// environment and memory hold the placeholder, never the value. It runs
// as root and, through TestSuiteUnprivileged, as an ordinary user.
func TestSecretSwap(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl missing (scripts/deps.sh installs it)")
	}
	const placeholder = "fluffy-secret-Q7w2ZxPlaceholder9"
	value := "sk-live-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-never-in-the-sandbox"
	rt := newRuntime(t, Options{AllowDegraded: true})

	api, tapi, unbound := &apiLog{}, &apiLog{}, &apiLog{}
	plainSrv := httptest.NewServer(api)
	defer plainSrv.Close()
	tlsSrv := httptest.NewTLSServer(tapi)
	defer tlsSrv.Close()
	unboundSrv := httptest.NewServer(unbound)
	defer unboundSrv.Close()
	tunnelSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "tunnelled") }))
	defer tunnelSrv.Close()
	hostOf := func(s *httptest.Server) string { u, _ := url.Parse(s.URL); return u.Host }
	al, err := netproxy.ParseAllowList([]string{hostOf(plainSrv), hostOf(tlsSrv), hostOf(unboundSrv), hostOf(tunnelSrv)})
	if err != nil {
		t.Fatal(err)
	}
	upstream := x509.NewCertPool()
	upstream.AddCert(tlsSrv.Certificate())
	rec := &egressRecs{}
	p, err := netproxy.New(netproxy.Options{Allow: al, Recorder: rec, UpstreamRoots: upstream, Swaps: []netproxy.Swap{{
		Placeholder: placeholder, Value: []byte(value), Hosts: []string{hostOf(plainSrv), hostOf(tlsSrv)}, TLS: true, Name: "secret://env/API_KEY",
	}}})
	if err != nil {
		t.Fatal(err)
	}
	// /var/tmp: writable by the unprivileged rerun, whose TMPDIR is not.
	dir, err := os.MkdirTemp("/var/tmp", "fluffy-egress-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	uid := -1
	if os.Geteuid() == 0 {
		uid = SandboxUID
	}
	ln, err := netproxy.ListenUnix(dir+"/egress.sock", uid)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { p.Serve(ln); close(served) }()
	defer func() { p.Close(); <-served }()

	// The sandbox trusts the system's roots and the proxy's CA; the
	// tunnelled test server's own certificate is added as a public
	// server's would be among the system's roots.
	bundle, err := netproxy.TrustBundle(p.CACert())
	if err != nil {
		t.Skipf("%v (scripts/deps.sh installs ca-certificates)", err)
	}
	bundle = append(bundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tunnelSrv.Certificate().Raw})...)
	// The probe is this test binary, copied where the sandbox may read
	// it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	probeDir, err := os.MkdirTemp("/var/tmp", "fluffy-probe-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(probeDir)
	if err := os.Chmod(probeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	self = probeDir + "/probe"
	if err := os.WriteFile(self, b, 0o755); err != nil {
		t.Fatal(err)
	}
	// The bundle's directory must be one the sandbox's user can enter
	// (root's sandboxes run as another uid), unlike the socket's.
	if err := os.WriteFile(probeDir+"/ca-bundle.pem", bundle, 0o644); err != nil {
		t.Fatal(err)
	}
	env := append([]string{"PATH=/usr/bin:/bin", "API_KEY=" + placeholder}, netproxy.ClientEnv(sandbox.ProxyListen, sandbox.ProxySocketPath, al)...)
	env = append(env, netproxy.CAEnv(sandbox.CABundlePath)...)
	spec := func(argv ...string) sandbox.Spec {
		return sandbox.Spec{Argv: argv, Env: env, Network: sandbox.NetworkProxy, ProxySocket: dir + "/egress.sock", Seccomp: "standard-net",
			Mounts: []sandbox.Mount{{Source: probeDir + "/ca-bundle.pem", Target: sandbox.CABundlePath}, {Source: self, Target: "/opt/probe"}}}
	}
	sh := func(script string) sandbox.Result { return run(t, rt, spec("/bin/sh", "-c", script)) }

	// Plain HTTP and terminated HTTPS: the bound hosts get the value.
	res := sh(curl + ` -sS -H "Authorization: Bearer $API_KEY" "` + plainSrv.URL + `/v1?key=$API_KEY"`)
	if string(res.Stdout) != "ok" {
		t.Fatalf("plain HTTP: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	res = sh(curl + ` -sS -v -H "Authorization: Bearer $API_KEY" "` + tlsSrv.URL + `/v1?key=$API_KEY"`)
	if string(res.Stdout) != "ok" || !strings.Contains(string(res.Stderr), "O=fluffy") {
		t.Fatalf("HTTPS: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	want := "Bearer " + value + " key=" + url.QueryEscape(value)
	if got := api.all(); len(got) != 1 || got[0] != want {
		t.Errorf("the plain API saw %q, want %q", got, want)
	}
	if got := tapi.all(); len(got) != 1 || got[0] != want {
		t.Errorf("the HTTPS API saw %q, want %q", got, want)
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		// OpenSSL's clients find the CA through SSL_CERT_FILE. (The
		// system's python: one under the person's home is not in the
		// sandbox.)
		res = run(t, rt, spec("/usr/bin/python3", "-c", `import os, urllib.request as u
r = u.Request("`+tlsSrv.URL+`/py", headers={"Authorization": "Bearer " + os.environ["API_KEY"]})
print(u.urlopen(r, timeout=20).read().decode(), end="")`))
		if string(res.Stdout) != "ok" {
			t.Errorf("python: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
		}
		if got := tapi.all(); len(got) != 2 || got[1] != "Bearer "+value+" " {
			t.Errorf("python's request arrived as %q", got)
		}
	}

	// An unbound host: refused, audited, nothing sent.
	res = sh(curl + ` -sS -w ' %{http_code}' -H "Authorization: Bearer $API_KEY" ` + unboundSrv.URL + `/`)
	if !strings.Contains(string(res.Stdout), `refused by rule "secret:unbound"`) || !strings.HasSuffix(string(res.Stdout), " 403") {
		t.Errorf("unbound host: stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	if got := unbound.all(); len(got) != 0 {
		t.Errorf("the unbound host got %q", got)
	}
	refused := false
	for _, r := range rec.all() {
		if r.Decision == netproxy.Denied && r.Rule == "secret:unbound" && r.Host == "127.0.0.1" {
			refused = true
		}
		if strings.Contains(fmt.Sprintf("%+v", r), value) {
			t.Errorf("an audit record holds the value: %+v", r)
		}
	}
	if !refused {
		t.Errorf("no secret:unbound refusal among the records: %+v", rec.all())
	}

	// A TLS host no secret is bound to stays a tunnel: the server's own
	// certificate, not one of the proxy's CA.
	res = sh(curl + ` -sS -v ` + tunnelSrv.URL + `/`)
	if string(res.Stdout) != "tunnelled" || strings.Contains(string(res.Stderr), "O=fluffy") || !strings.Contains(string(res.Stderr), "O=Acme Co") {
		t.Errorf("tunnel: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}

	// A process that used the placeholder holds only the placeholder.
	masked := []byte(value)
	for i := range masked {
		masked[i] ^= swapMask
	}
	probe := spec("/opt/probe")
	probe.Env = append(append([]string(nil), env...), swapProbeEnv+"=1", "FLUFFY_SWAP_MASKED="+hex.EncodeToString(masked),
		"FLUFFY_SWAP_URLS="+plainSrv.URL+"/probe "+tlsSrv.URL+"/probe")
	res = run(t, rt, probe)
	if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "probe: value absent, placeholder present") {
		t.Errorf("probe: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	t.Log(strings.TrimSpace(string(res.Stdout)))
	if got := tapi.all(); got[len(got)-1] != "Bearer "+value+" " {
		t.Errorf("the probe's HTTPS request arrived as %q", got)
	}
	// The control: given the value (in its environment, which lies in
	// its memory), the same scan finds it.
	probe.Env = append(probe.Env, "FLUFFY_SWAP_CONTROL=1", "LEAKED="+value)
	if res = run(t, rt, probe); res.ExitCode == 0 || !strings.Contains(string(res.Stdout), "probe: the value is in memory") {
		t.Errorf("control probe: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}
