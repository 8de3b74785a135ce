package wiring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/web"
)

// Transcript implements web.Transcript: the session's stored messages,
// each as the events the console shows.
func (s webSessions) Transcript(ctx context.Context, id string) ([][]web.Event, error) {
	msgs, err := s.k.Messages(ctx, id)
	if errors.Is(err, kernel.ErrNotFound) {
		return nil, fmt.Errorf("%w: session %s", web.ErrNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	out := make([][]web.Event, len(msgs))
	for i, m := range msgs {
		out[i] = storedEvents(id, m)
	}
	return out, nil
}

// storedEvents is a stored message as the console's events: an
// assistant's text and tool calls, a user message's text (a person's or
// a channel's message) and tool results. Images are left out.
func storedEvents(session string, m llm.Message) []web.Event {
	var out []web.Event
	for _, b := range m.Content {
		ev := web.Event{Session: session}
		switch {
		case b.Type == llm.BlockText && m.Role == llm.RoleAssistant:
			ev.Type, ev.Text = "text", b.Text
		case b.Type == llm.BlockText:
			ev.Type, ev.Text = web.TypeMessage, b.Text
		case b.Type == llm.BlockToolCall:
			ev.Type, ev.Tool, ev.Args = "tool_call", b.Name, compactJSON(b.Args)
		case b.Type == llm.BlockToolResult:
			ev.Type, ev.Tool, ev.Result, ev.IsError = "tool_result", b.Name, b.Text, b.IsError
		default:
			continue
		}
		out = append(out, ev)
	}
	return out
}

// webHubBaseTimeout bounds reading a session's stored messages when the
// hub sees its first event: the kernel waits on it, once per session.
const webHubBaseTimeout = 2 * time.Second

// publishWeb hands a kernel event to the console's hub. Before the
// hub's first event of a session it tells the hub how many of the
// session's messages were stored before it (web.Hub.Begin): a run saves
// its first messages only after its first event, so those are the
// messages of earlier runs, which a page shows from the store. When the
// kernel is not there yet or the count cannot be read, the hub gets no
// base and pages show its events alone.
func publishWeb(hub *web.Hub, sessions *atomic.Pointer[kernel.Kernel], data any, log *slog.Logger) {
	ev, ok := webEvent(data)
	if !ok {
		return
	}
	if k := sessions.Load(); k != nil && hub.Last(ev.Session) == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), webHubBaseTimeout)
		msgs, err := k.Messages(ctx, ev.Session)
		cancel()
		if err != nil {
			log.Warn("web: the session's stored messages", "session", ev.Session, "err", err)
		} else {
			hub.Begin(ev.Session, len(msgs))
		}
	}
	hub.Publish(ev)
}
