package ipc

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// socketPair returns the two ends of a connected unix stream socket pair.
func socketPair(t testing.TB) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// FuzzServerInput feeds arbitrary bytes to a served connection: the server
// must neither panic nor hang, must end the connection once the input
// ends, and everything it sends must be well-formed frames.
func FuzzServerInput(f *testing.F) {
	hello := frame(`{"type":"hello","hello":{"min":1,"max":1}}`)
	f.Add(hello)
	f.Add(append(append([]byte{}, hello...), frame(`{"type":"request","id":1,"method":"ping"}`)...))
	f.Add(append(append([]byte{}, hello...), frame(`{"type":"request","id":1,"method":"echo","params":{"text":"x"}}`)...))
	f.Add(append(append([]byte{}, hello...), frame(`{"type":"request","id":2,"method":"subscribe","params":{"topics":["a.*"]}}`)...))
	f.Add(append(append([]byte{}, hello...), frame(`{"type":"request","id":3,"method":"block"}{"type":"cancel","id":3}`)...))
	f.Add(append(append([]byte{}, hello...), header(0xFFFFFFFF)...))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	s, err := NewServer(ServerOptions{Mux: testMux(f, nil), MaxFrame: 4096, HandshakeTimeout: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		srv, peer := socketPair(t)
		defer peer.Close()
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.serveConn(srv)
		}()
		_ = peer.SetDeadline(time.Now().Add(10 * time.Second))
		go func() {
			_, _ = peer.Write(in)
			_ = peer.CloseWrite()
		}()
		for {
			p, err := ReadFrame(peer, HardMaxFrame)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatal("the server neither answered nor closed within 10s")
				}
				break // reset after a fatal frame: fine
			}
			if _, err := DecodeMessage(p); err != nil {
				t.Fatalf("the server sent a malformed message %q: %v", p, err)
			}
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the connection goroutine did not end")
		}
	})
}
