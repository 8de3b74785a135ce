package ipc

import (
	"context"
	"runtime"
	"testing"
)

// BenchmarkPing measures one request/response round trip over the socket.
func BenchmarkPing(b *testing.B) {
	ts := startServerB(b)
	c, err := Dial(context.Background(), ts.path, ClientOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Ping(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPingParallel: round trips from concurrent callers sharing one
// connection.
func BenchmarkPingParallel(b *testing.B) {
	ts := startServerB(b)
	c, err := Dial(context.Background(), ts.path, ClientOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := c.Ping(context.Background()); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkEvents measures pushed-event throughput: the server publishes
// small events (a session's streamed output) and one client drains them.
func BenchmarkEvents(b *testing.B) {
	ts := startServerB(b)
	c, err := Dial(context.Background(), ts.path, ClientOptions{EventBuffer: 1024})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if err := c.Subscribe(context.Background(), "session.*"); err != nil {
		b.Fatal(err)
	}
	type chunk struct {
		Session string `json:"session"`
		Text    string `json:"text"`
	}
	ev := chunk{Session: "s-0123456789", Text: "the model streams a few words at a time, "}
	done := make(chan int)
	n := b.N
	go func() {
		got := 0
		for range c.Events() {
			got++
			if got == n {
				break
			}
		}
		done <- got
	}()
	b.ResetTimer()
	for i := 0; i < n; i++ {
		for {
			k, err := ts.Publish("session.output", ev)
			if err != nil {
				b.Fatal(err)
			}
			if k == 1 {
				break
			}
			b.Fatal("the subscriber was disconnected")
		}
		// Stay under the queue bound: the benchmark measures throughput,
		// not the slow-consumer policy.
		if i%128 == 127 {
			for ts.queued() > 64 {
				runtime.Gosched()
			}
		}
	}
	if got := <-done; got != n {
		b.Fatalf("received %d of %d events", got, n)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
}

func startServerB(b *testing.B) *testServer {
	b.Helper()
	s, err := NewServer(ServerOptions{Mux: NewMux(), QueueLen: 1024})
	if err != nil {
		b.Fatal(err)
	}
	path := b.TempDir() + "/" + SocketName
	ln, err := Listen(path)
	if err != nil {
		b.Fatal(err)
	}
	ts := &testServer{Server: s, path: path, errc: make(chan error, 1)}
	go func() { ts.errc <- s.Serve(ln) }()
	b.Cleanup(func() {
		_ = s.Shutdown(context.Background())
		<-ts.errc
	})
	return ts
}

// queued is the longest outgoing queue, for the benchmark's pacing.
func (s *Server) queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := 0
	for c := range s.conns {
		m = max(m, len(c.out))
	}
	return m
}
