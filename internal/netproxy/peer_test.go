package netproxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestOwnerOrDescendant(t *testing.T) {
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	me := os.Getpid()
	allow := OwnerOrDescendant(1000, me)
	tests := []struct {
		name string
		peer Peer
		ok   bool
	}{
		{"the owner", Peer{UID: 1000, PID: 1}, true},
		{"the owner, pid not visible", Peer{UID: 1000}, true},
		{"the proxy's own process", Peer{UID: 65534, PID: me}, true},
		{"a child (a sandbox as nobody)", Peer{UID: 65534, PID: child.Process.Pid}, true},
		{"another uid, not a descendant", Peer{UID: 65534, PID: os.Getppid()}, false},
		{"another uid, init", Peer{UID: 65534, PID: 1}, false},
		{"another uid, pid not visible", Peer{UID: 65534}, false},
		{"another uid, no such pid", Peer{UID: 65534, PID: 1 << 30}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := allow(tt.peer); (err == nil) != tt.ok {
				t.Errorf("OwnerOrDescendant(%+v) = %v, want ok %v", tt.peer, err, tt.ok)
			}
		})
	}
}

func TestStatParent(t *testing.T) {
	tests := []struct {
		in   string
		want int
		ok   bool
	}{
		{"123 (sh) S 45 123 123 0", 45, true},
		{"123 (a) b) S 7 1 1", 7, true}, // a name with ") b"
		{"123 (x) 9 S 8 1", 0, false},   // the fields after the name are the state, then the parent
		{"123 (sh", 0, false},
		{"123 (sh) S", 0, false},
		{"123 (sh) S -4", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, err := statParent([]byte(tt.in))
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("statParent(%q) = %d, %v; want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func FuzzStatParent(f *testing.F) {
	f.Add([]byte("123 (sh) S 45 123 123 0"))
	f.Add([]byte("1 ()) R 0"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if ppid, err := statParent(b); err == nil && ppid < 0 {
			t.Errorf("negative parent %d from %q", ppid, b)
		}
	})
}

// peerRec is a memRecorder that is also told of refused peers.
type peerRec struct {
	memRecorder
	mu      sync.Mutex
	refused []PeerRefusal
}

func (p *peerRec) RecordPeerRefused(_ context.Context, r PeerRefusal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refused = append(p.refused, r)
	return nil
}

// A refused peer's connection is closed unread: nothing reaches the
// upstream, no request is recorded, and the recorder hears of the first
// refusal of that uid only.
func TestPeerRefused(t *testing.T) {
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer up.Close()
	al, _ := ParseAllowList([]string{"127.0.0.1:" + port(t, up.URL)})
	rec := &peerRec{}
	p, err := New(Options{Allow: al, Recorder: rec, AllowPeer: func(pe Peer) error { return fmt.Errorf("uid %d: not today", pe.UID) }})
	if err != nil {
		t.Fatal(err)
	}
	sock := t.TempDir() + "/egress.sock"
	ln, err := ListenUnix(sock, -1)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, %v: want 0600", fi.Mode(), err)
	}
	served := make(chan error, 1)
	go func() { served <- p.Serve(ln) }()
	defer func() { p.Close(); <-served }()
	for range 3 {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET %s/ HTTP/1.1\r\n\r\n", up.URL)
		if b, _ := io.ReadAll(bufio.NewReader(c)); len(b) != 0 {
			t.Errorf("a refused peer got %q", b)
		}
		c.Close()
	}
	if hits.Load() != 0 || len(rec.every()) != 0 {
		t.Errorf("%d upstream hits, records %+v", hits.Load(), rec.every())
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.refused) != 1 || rec.refused[0].Peer.UID != os.Geteuid() || rec.refused[0].Peer.PID != os.Getpid() ||
		!strings.Contains(rec.refused[0].Reason, "not today") {
		t.Errorf("refusals recorded: %+v", rec.refused)
	}
}

// A connection without peer credentials (TCP) is refused unless the
// proxy was told to accept them.
func TestUncredentialedRefused(t *testing.T) {
	p, err := New(Options{Recorder: &memRecorder{}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- p.Serve(ln) }()
	defer func() { p.Close(); <-served }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET http://127.0.0.1:1/ HTTP/1.1\r\n\r\n")
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Errorf("a TCP client got %q", b)
	}
}

// The decision is recorded before anything reaches the upstream, for a
// plain request and a tunnel, and the end record carries its ID.
func TestDecisionRecordedAhead(t *testing.T) {
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1); io.WriteString(w, "ok") }))
	defer up.Close()
	rec := &memRecorder{}
	var atOpen []int64
	rec.onOpen = func(Record) { atOpen = append(atOpen, hits.Load()) }
	e := startProxy(t, Options{Recorder: rec}, "127.0.0.1:"+port(t, up.URL))
	if resp, body := e.raw(t, fmt.Sprintf("GET %s/ HTTP/1.1\r\nConnection: close\r\n\r\n", up.URL)); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	c := dialTunnel(t, e, strings.TrimPrefix(up.URL, "http://"))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	io.ReadAll(c)
	c.Close()
	recs := e.rec.wait(t, 2)
	all := rec.every()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(atOpen) != 2 || atOpen[0] != 0 || atOpen[1] != 1 {
		t.Errorf("upstream hits when each decision was recorded: %v, want [0 1]", atOpen)
	}
	if len(all) != 4 {
		t.Fatalf("records %+v, want open and end for each request", all)
	}
	// Each request's decision comes before its end. The two requests'
	// records may interleave (the first's end is written after the
	// client has its answer, maybe after the second's decision), so
	// they are matched by ID, not by position.
	seen := map[string]bool{}
	for i, r := range recs {
		openAt, endAt := -1, -1
		for j, a := range all {
			switch {
			case a.ID == r.ID && a.Phase == PhaseOpen:
				openAt = j
			case a.ID == r.ID && a.Phase == PhaseEnd:
				endAt = j
			}
		}
		if r.Phase != PhaseEnd || r.ID == "" || openAt < 0 || openAt > endAt || all[openAt].Decision != Allowed {
			t.Errorf("request %d: end %+v; every record %+v", i, r, all)
		}
		if seen[r.ID] {
			t.Error("two requests share an ID")
		}
		seen[r.ID] = true
	}
}

// The socket is 0600 and, when asked, belongs to the sandbox's user.
func TestListenUnixOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another uid needs root")
	}
	sock := t.TempDir() + "/egress.sock"
	ln, err := ListenUnix(sock, 65534)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o600 || st.Uid != 65534 || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("socket %v owned by %d: want a 0600 socket of uid 65534", fi.Mode(), st.Uid)
	}
}
