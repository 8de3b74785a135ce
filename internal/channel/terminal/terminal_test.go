package terminal

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/ipc"
)

// sink answers each delivery as the daemon would: it returns a session per
// thread, then (in another goroutine) replies and ends the turn.
type sink struct {
	t     *Terminal
	mu    sync.Mutex
	got   []channel.Inbound
	reply string // "" : the turn ends without a reply
	hold  chan struct{}
}

func (s *sink) Deliver(_ context.Context, in channel.Inbound) (string, error) {
	s.mu.Lock()
	s.got = append(s.got, in)
	s.mu.Unlock()
	id := "s-" + in.Conversation.Room
	go func() {
		if s.hold != nil {
			<-s.hold
		}
		if s.reply != "" {
			_ = s.t.Send(context.Background(), in.Conversation, channel.Outbound{Session: id, Text: s.reply})
		}
		s.t.TurnEnded(context.Background(), in.Conversation, id, "paused", "done")
	}()
	return id, nil
}
func (*sink) Answer(context.Context, channel.Answer) error  { return nil }
func (*sink) Ready(string, bool, error)                     {}
func (*sink) Record(context.Context, channel.Refusal) error { return nil }

func running(t *testing.T, s *sink) *Terminal {
	t.Helper()
	term := New()
	s.t = term
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = term.Run(ctx, s); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	for i := 0; i < 1000; i++ {
		term.mu.Lock()
		ok := term.sink != nil
		term.mu.Unlock()
		if ok {
			return term
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("the channel did not start")
	return nil
}

func TestSayWaitsForTheReplyAndTheTurnsEnd(t *testing.T) {
	s := &sink{reply: "hello back"}
	term := running(t, s)
	var told string
	res, err := term.Say(t.Context(), SayParams{Text: "hello"}, func(id string) { told = id })
	if err != nil {
		t.Fatal(err)
	}
	if res.Session != "s-main" || told != "s-main" || res.Text != "hello back" || res.Status != "paused" {
		t.Errorf("result %+v, told %q", res, told)
	}
	in := s.got[0]
	if in.Untrusted || in.Conversation != (channel.Conversation{Channel: Name, Room: "main", Principal: Principal}) {
		t.Errorf("delivered %+v", in)
	}
}

func TestSayWithoutReplyEnds(t *testing.T) {
	term := running(t, &sink{})
	res, err := term.Say(t.Context(), SayParams{Text: "hi", Thread: "notes"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Session != "s-notes" || res.Text != "" || res.Reason != "done" {
		t.Errorf("result %+v", res)
	}
}

func TestSayGivesUpWithItsCaller(t *testing.T) {
	s := &sink{reply: "late", hold: make(chan struct{})}
	term := running(t, s)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	res, err := term.Say(ctx, SayParams{Text: "hi"}, nil)
	if !errors.Is(err, context.DeadlineExceeded) || res.Session != "s-main" {
		t.Fatalf("res %+v err %v", res, err)
	}
	close(s.hold) // the late reply finds nobody waiting, and blocks nothing
	time.Sleep(10 * time.Millisecond)
	term.mu.Lock()
	n := len(term.waiters)
	term.mu.Unlock()
	if n != 0 {
		t.Errorf("%d waiters left behind", n)
	}
}

func TestSayRefuses(t *testing.T) {
	term := New()
	_, err := term.Say(t.Context(), SayParams{Text: "hi"}, nil)
	var ie *ipc.Error
	if !errors.As(err, &ie) || ie.Code != CodeNotServing {
		t.Errorf("not running: %v", err)
	}
	term = running(t, &sink{})
	for _, p := range []SayParams{{Text: ""}, {Text: "x", Thread: "../etc"}, {Text: "x", Thread: "a b"}} {
		if _, err := term.Say(t.Context(), p, nil); err == nil {
			t.Errorf("%+v was taken", p)
		}
	}
}
