// Package terminal is the assistant daemon's channel for the person at
// their own terminal: `fluffy ask MESSAGE` hands a message to the
// assistant through the daemon's kernel socket and waits for the turn's
// reply, answering the session's approval requests on the way (the CLI
// watches them itself). The socket admits only the daemon's own user, so
// the sender is the person: a terminal message is trusted, unlike a
// webhook's payload or an email.
package terminal

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/ipc"
)

// Name is the channel's name; Principal is who its messages are from.
const (
	Name      = "terminal"
	Principal = "terminal"
)

// MethodSay hands a message to the assistant and waits for the turn's
// end: SayParams → SayResult. Before it waits, the calling connection is
// told the session's id (TopicSession, a SessionEvent), so it can answer
// the session's approvals meanwhile.
const (
	MethodSay    = "assistant.say"
	TopicSession = "assistant.session"
)

// SayParams are a message for the assistant. Thread names the
// conversation (default "main"): each thread is one session.
type SayParams struct {
	Text   string `json:"text"`
	Thread string `json:"thread,omitempty"`
}

// SayResult is how the turn ended: the assistant's reply ("" when it gave
// none) and the run's status and reason.
type SayResult struct {
	Session string `json:"session"`
	Text    string `json:"text,omitempty"`
	Status  string `json:"status,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// SessionEvent is TopicSession's data.
type SessionEvent struct {
	Session string `json:"session"`
}

// CodeNotServing is MethodSay's error while the channel is not running.
const CodeNotServing = "not_serving"

var threadName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Terminal is the channel. Build it with New; the daemon runs it and
// registers MethodSay on its kernel socket (Register).
type Terminal struct {
	mu      sync.Mutex
	sink    channel.Sink
	waiters map[string][]chan SayResult // session -> callers waiting, oldest first
}

var (
	_ channel.Channel      = (*Terminal)(nil)
	_ channel.TurnObserver = (*Terminal)(nil)
)

// New returns the channel.
func New() *Terminal { return &Terminal{waiters: map[string][]chan SayResult{}} }

// Name implements channel.Channel.
func (t *Terminal) Name() string { return Name }

// Run implements channel.Channel: the channel is ready as soon as the
// daemon runs it (the socket is the daemon's) until ctx ends.
func (t *Terminal) Run(ctx context.Context, sink channel.Sink) error {
	t.mu.Lock()
	t.sink = sink
	t.mu.Unlock()
	sink.Ready(Name, true, nil)
	<-ctx.Done()
	t.mu.Lock()
	t.sink = nil
	t.mu.Unlock()
	return nil
}

// Send implements channel.Channel: the reply goes to the oldest caller
// waiting on the session. Nobody waiting (the caller gave up) is no
// error: the reply stays in the session's history.
func (t *Terminal) Send(_ context.Context, _ channel.Conversation, msg channel.Outbound) error {
	t.deliver(msg.Session, SayResult{Session: msg.Session, Text: msg.Text})
	return nil
}

// SendApproval implements channel.Channel: a waiting `fluffy ask` answers
// approvals itself (approval.watch), so the request needs no message.
func (t *Terminal) SendApproval(context.Context, channel.Conversation, approval.Request) error {
	return nil
}

// TurnEnded implements channel.TurnObserver: a turn that ended without a
// reply releases its caller too.
func (t *Terminal) TurnEnded(_ context.Context, _ channel.Conversation, session, status, reason string) {
	t.deliver(session, SayResult{Session: session, Status: status, Reason: reason})
}

func (t *Terminal) deliver(session string, r SayResult) {
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.waiters[session]
	if len(q) == 0 {
		return
	}
	q[0] <- r // buffered: a reply, then the turn's end
	if r.Text == "" {
		// The turn's end: this caller is done.
		t.waiters[session] = q[1:]
		if len(q) == 1 {
			delete(t.waiters, session)
		}
	}
}

// Say delivers p as the person's message and waits for its turn's reply
// and end (or ctx). notify is told the session's id before the wait.
func (t *Terminal) Say(ctx context.Context, p SayParams, notify func(session string)) (SayResult, error) {
	if p.Thread == "" {
		p.Thread = "main"
	}
	if !threadName.MatchString(p.Thread) {
		return SayResult{}, fmt.Errorf("thread %q: want 1 to 64 of A-Z a-z 0-9 . _ - starting with a letter or digit", p.Thread)
	}
	if p.Text == "" {
		return SayResult{}, errors.New("an empty message")
	}
	t.mu.Lock()
	sink := t.sink
	t.mu.Unlock()
	if sink == nil {
		return SayResult{}, ipc.Errorf(CodeNotServing, "the terminal channel is not running")
	}
	// Wait from before the delivery: the reply may come at once.
	ch := make(chan SayResult, 2)
	in := channel.Inbound{Conversation: channel.Conversation{Channel: Name, Room: p.Thread, Principal: Principal},
		Text: p.Text, Source: "the person's terminal", Received: time.Now()}
	t.mu.Lock()
	// The session is not known before Deliver; hold the lock so no
	// reply of this conversation can be missed in between.
	session, err := sink.Deliver(ctx, in)
	if err == nil {
		t.waiters[session] = append(t.waiters[session], ch)
	}
	t.mu.Unlock()
	if err != nil {
		return SayResult{}, err
	}
	if notify != nil {
		notify(session)
	}
	res := SayResult{Session: session}
	for {
		select {
		case r := <-ch:
			if r.Text != "" {
				res.Text = r.Text
				continue
			}
			res.Status, res.Reason = r.Status, r.Reason
			return res, nil
		case <-ctx.Done():
			t.drop(session, ch)
			return res, ctx.Err()
		}
	}
}

func (t *Terminal) drop(session string, ch chan SayResult) {
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.waiters[session]
	for i, c := range q {
		if c == ch {
			t.waiters[session] = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(t.waiters[session]) == 0 {
		delete(t.waiters, session)
	}
}

// Register adds MethodSay to mux.
func (t *Terminal) Register(mux *ipc.Mux) error {
	return mux.Handle(MethodSay, func(ctx context.Context, r *ipc.Request) (any, error) {
		var p SayParams
		if err := r.Bind(&p); err != nil {
			return nil, err
		}
		return t.Say(ctx, p, func(session string) {
			if r.Peer != nil {
				_, _ = r.Peer.Notify(TopicSession, SessionEvent{Session: session})
			}
		})
	})
}
