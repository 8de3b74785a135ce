package netproxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/netproxy/forward"
)

const netnsChild = "__netproxy-test-netns"

// netnsChildMain runs in a fresh network namespace, as a sandbox would:
// loopback up, forwarder on 127.0.0.1, then requests through it and
// around it. args: proxy socket, allowed URL, denied URL.
func netnsChildMain(args []string) int {
	sock, allowed, denied := args[0], args[1], args[2]
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, format+"\n", a...)
		return 1
	}
	// Before loopback is up nothing can listen on 127.0.0.1.
	if err := forward.LoopbackUp(); err != nil {
		return fail("loopback: %v", err)
	}
	stop, err := forward.Start(context.Background(), DefaultListen, sock)
	if err != nil {
		return fail("forwarder: %v", err)
	}
	defer stop()
	pu, _ := url.Parse("http://" + DefaultListen)
	tr := &http.Transport{Proxy: http.ProxyURL(pu)}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := c.Get(allowed)
	if err != nil {
		return fail("allowed: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "host side" {
		return fail("allowed: %d %q", resp.StatusCode, b)
	}
	resp, err = c.Get(denied)
	if err != nil {
		return fail("denied: %v", err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(b), "not-allowed") {
		return fail("denied: %d %q", resp.StatusCode, b)
	}
	// Around the proxy: the host's loopback server is not in this
	// namespace, and there is no other interface.
	u, _ := url.Parse(allowed)
	if conn, err := net.DialTimeout("tcp", u.Host, 2*time.Second); err == nil {
		conn.Close()
		return fail("direct connection to %s succeeded", u.Host)
	}
	ifs, err := net.Interfaces()
	if err != nil || len(ifs) != 1 || ifs[0].Name != "lo" {
		return fail("interfaces: %v %v", ifs, err)
	}
	return 0
}

// TestInNetworkNamespace runs the sandbox side for real: a child in its
// own user and network namespace reaches an allow-listed server on the
// host's loopback only through the forwarder and the proxy's unix socket.
func TestInNetworkNamespace(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "host side") }))
	defer up.Close()
	sock, rec := unixProxy(t, "127.0.0.1:"+port(t, up.URL))
	cmd := exec.Command(os.Args[0], netnsChild, sock, up.URL, "http://denied.example/")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}},
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if strings.Contains(err.Error(), "operation not permitted") || strings.Contains(err.Error(), "permission denied") {
			t.Skipf("user namespaces unavailable here: %v", err)
		}
		t.Fatalf("child: %v\n%s", err, out)
	}
	recs := rec.wait(t, 2)
	if recs[0].Decision != Allowed || recs[1].Decision != Denied {
		t.Errorf("records:\n%s", fmtRecs(recs))
	}
}

func TestClientEnv(t *testing.T) {
	al, _ := ParseAllowList([]string{"example.com"})
	got := strings.Join(ClientEnv("127.0.0.1:3128", "/run/fluffy/egress.sock", al), " ")
	want := "HTTP_PROXY=http://127.0.0.1:3128 http_proxy=http://127.0.0.1:3128 HTTPS_PROXY=http://127.0.0.1:3128 https_proxy=http://127.0.0.1:3128 NO_PROXY=localhost,127.0.0.1,::1 no_proxy=localhost,127.0.0.1,::1 FLUFFY_EGRESS_SOCKET=/run/fluffy/egress.sock"
	if got != want {
		t.Errorf("ClientEnv = %s", got)
	}
	al, _ = ParseAllowList([]string{"example.com", "127.0.0.1:8080"})
	if got := ClientEnv("127.0.0.1:3128", "/run/fluffy/egress.sock", al); got[4] != "NO_PROXY=" {
		t.Errorf("with a loopback rule: %v", got)
	}
}

func TestJSONRecorder(t *testing.T) {
	var b strings.Builder
	j := NewJSONRecorder(&b)
	r := Record{ID: "0123abcd", Phase: PhaseEnd, Time: time.Date(2026, 11, 22, 1, 2, 3, 4e6, time.UTC), Sandbox: "sb", Method: "CONNECT", Host: "example.com", Port: 443,
		Addr: "93.184.216.34:443", Decision: Allowed, Rule: "example.com", Status: 200, BytesUp: 10, BytesDown: 20, Duration: 1500 * time.Millisecond}
	if err := j.RecordEgress(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	want := `{"time":"2026-11-22T01:02:03.004Z","sandbox":"sb","method":"CONNECT","host":"example.com","port":443,"addr":"93.184.216.34:443","decision":"allow","rule":"example.com","status":200,"bytes_up":10,"bytes_down":20,"ms":1500,"phase":"end","id":"0123abcd"}` + "\n"
	if b.String() != want {
		t.Errorf("got  %s\nwant %s", b.String(), want)
	}
	if s := r.Summary(); s != "CONNECT example.com:443 allow by example.com, 10 up, 20 down" {
		t.Errorf("Summary %q", s)
	}
	d := Record{Method: "GET", Host: "evil.test", Port: 80, Decision: Denied, Rule: "not-allowed", Reason: "evil.test:80 is not on this sandbox's allow-list"}
	if s := d.Summary(); s != "GET evil.test:80 deny (not-allowed: evil.test:80 is not on this sandbox's allow-list)" {
		t.Errorf("Summary %q", s)
	}
}
