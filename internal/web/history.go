package web

import (
	"context"
	"net/http"
)

// TypeMessage is the type of an event that shows a person's (or a
// channel's) message to the model, from a session's stored conversation.
const TypeMessage = "message"

// Transcript is a session's stored conversation, which outlives the
// daemon. Transcript returns one entry per stored message, oldest
// first, each as the events it shows as: model text, tool calls, tool
// results (without the gates' decisions, which the audit log keeps), a
// message (TypeMessage). ErrNotFound for an unknown session.
type Transcript interface {
	Transcript(ctx context.Context, session string) ([][]Event, error)
}

// storedKeep bounds the stored events a session page shows, newest
// kept, as the hub bounds its own (hubKeep): a long conversation's page
// stays quick to render and read.
const storedKeep = hubKeep

// history is what a session page shows: the stored conversation from
// before the hub's first event of the session, then the hub's events.
// The stored messages are read before the hub, so a run that starts in
// between has its messages counted in the hub's base, not shown twice;
// the stream continues after the hub's newest event.
type history struct {
	Stored   []Event
	Events   []Event
	Complete bool
	// Omitted counts the oldest stored events left out (storedKeep).
	Omitted int
	// Error is why the stored conversation could not be read.
	Error string
}

func (s *Server) history(r *http.Request, id string) history {
	var stored [][]Event
	var err error
	if s.o.Transcript != nil {
		stored, err = s.o.Transcript.Transcript(r.Context(), id)
	}
	evs, complete, base, known := s.o.Hub.view(id)
	h := history{Events: evs, Complete: complete}
	if err != nil {
		s.log.Warn("session history", "session", id, "err", err)
		h.Error = err.Error()
		return h
	}
	if known {
		// The hub holds everything from its base on; without a base
		// (it saw the session before it could ask), the store cannot be
		// cut without a gap or a repeat, and the page shows the hub
		// alone as before.
		if base < 0 {
			stored = nil
		} else if base < len(stored) {
			stored = stored[:base]
		}
	}
	for _, m := range stored {
		h.Stored = append(h.Stored, m...)
	}
	if n := len(h.Stored) - storedKeep; n > 0 {
		h.Stored, h.Omitted = h.Stored[n:], n
	}
	return h
}
