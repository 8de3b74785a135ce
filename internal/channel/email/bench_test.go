package email

import (
	"bytes"
	"context"
	"net/smtp"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BenchmarkDeliver is one message with a small attachment from an SMTP
// client on loopback to Sink.Deliver: MAIL, RCPT, DATA on a connection
// kept open, the checks, the MIME walk, the attachment written.
func BenchmarkDeliver(b *testing.B) {
	s := newSink()
	state := b.TempDir()
	c, err := New(testConfig(), Options{StateDir: state})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, s) }()
	defer func() { cancel(); <-done }()
	<-s.ready
	cl, err := smtp.Dial(c.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	raw := []byte(strings.ReplaceAll(plainMail, "\n", "\r\n"))
	b.SetBytes(int64(len(raw)))
	b.ResetTimer()
	for b.Loop() {
		if err := cl.Mail(person); err != nil {
			b.Fatal(err)
		}
		if err := cl.Rcpt(rcpt); err != nil {
			b.Fatal(err)
		}
		w, err := cl.Data()
		if err != nil {
			b.Fatal(err)
		}
		w.Write(raw)
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if got, _ := s.got(); len(got) != b.N {
		b.Fatalf("delivered %d of %d", len(got), b.N)
	}
}

// BenchmarkReceive is the same message without SMTP: the channel's own
// work per message.
func BenchmarkReceive(b *testing.B) {
	state := b.TempDir()
	c, err := New(testConfig(), Options{StateDir: state, Clock: func() time.Time { return time.Unix(0, 0) }})
	if err != nil {
		b.Fatal(err)
	}
	s := newSink()
	raw := []byte(strings.ReplaceAll(plainMail, "\n", "\r\n"))
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if err := c.receive(context.Background(), s, envelope{from: person}, bytes.NewReader(raw)); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	os.RemoveAll(filepath.Join(state, "attachments"))
}
