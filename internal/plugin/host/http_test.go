package host_test

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/plugin"
	"github.com/fluffy-agent/fluffy/internal/plugin/host"
)

// TestHTTPTransport: a server with run.transport http (pkg/pluginsdk's
// Main on the socket fluffy names) serves its tools over streamable
// HTTP on a unix socket in its sandbox; its calls and its flood cap go
// as over stdio.
func TestHTTPTransport(t *testing.T) {
	f := newFixture(t)
	f.install(plugin.Manifest{Run: plugin.Run{Transport: "http"}, Sandbox: plugin.Sandbox{Output: 4 << 10}})
	_, reg, rep := f.start(host.Options{})
	if rep.Err != nil || !slices.Contains(rep.Tools, "mcp.adv.echo") {
		t.Fatalf("report %+v", rep)
	}
	res, err := call(t, reg, "mcp.adv.echo", map[string]any{"text": "over http"})
	if err != nil || !strings.Contains(string(res.Output), "over http") {
		t.Fatalf("echo: %q %v", res.Output, err)
	}
	res, err = call(t, reg, "mcp.adv.getenv", map[string]any{"text": "FLUFFY_MCP_SOCKET"})
	if err != nil || !strings.Contains(string(res.Output), host.SocketDir+"/"+host.SocketName) {
		t.Fatalf("getenv: %q %v", res.Output, err)
	}
	// An answer far beyond what a result may be ends the session, not
	// fluffy's memory.
	if res, err := call(t, reg, "mcp.adv.flood", map[string]any{"n": 8 << 20}); err == nil && !res.IsError {
		t.Fatalf("flood answered %d bytes", len(res.Output))
	}
}

// TestHTTPSocketLinkRefused: the server owns the directory its socket is
// in; a symbolic link it leaves there to a host socket is never
// followed (fluffy would otherwise speak to, say, the container
// engine's socket).
func TestHTTPSocketLinkRefused(t *testing.T) {
	f := newFixture(t)
	victim := filepath.Join(openDir(t), "victim.sock")
	l, err := net.Listen("unix", victim)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Chmod(victim, 0o777); err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Close()
			accepted <- struct{}{}
		}
	}()
	f.install(plugin.Manifest{Run: plugin.Run{Transport: "http"}}, "FLUFFY_TEST_PLUGIN_LINK="+victim)
	_, _, rep := f.start(host.Options{StartTimeout: 3 * time.Second})
	if rep.Err == nil {
		t.Fatalf("started: %+v", rep)
	}
	select {
	case <-accepted:
		t.Fatal("fluffy connected to the host socket the server linked to")
	default:
	}
}

// TestHTTPSocketDirBounded: the directory a server with transport http
// may write (its socket's) is on a tmpfs, not the host's temporary
// directory: what the server writes there is charged to its memory
// limit, so a server writing four times its limit there is stopped
// (killed at its memory limit, or refused by the tmpfs), and nothing of
// it lands in the host's temporary directory.
func TestHTTPSocketDirBounded(t *testing.T) {
	tmp := openDir(t)
	t.Setenv("TMPDIR", tmp)
	f := newFixture(t)
	f.install(plugin.Manifest{Run: plugin.Run{Transport: "http"}, Sandbox: plugin.Sandbox{Memory: 64 << 20}})
	_, reg, rep := f.start(host.Options{})
	if rep.Err != nil {
		t.Fatalf("report %+v", rep)
	}
	res, err := call(t, reg, "mcp.adv.fill", map[string]any{"path": host.SocketDir + "/fill", "n": 256})
	if err == nil && !res.IsError {
		t.Errorf("the server wrote 256 MiB into its socket directory: %q", res.Output)
	}
	// The tmpfs's pages are the server's memory: its limit killed it.
	waitEvent(t, f.audit, `"killed":"memory"`)
	if m, _ := filepath.Glob(filepath.Join(tmp, "fluffy-mcp-*")); len(m) > 0 {
		t.Errorf("socket directories in the host's temporary directory: %v", m)
	}
}
