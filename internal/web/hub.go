package web

import (
	"sync"
)

// Event is one thing that happened in a session, as the console shows
// it. Everything in it but the numbers may come from the model or a tool
// and is escaped wherever it is rendered.
type Event struct {
	// ID numbers a session's events for the console, from 1, across
	// runs: the stream's Last-Event-ID. The hub assigns it.
	ID      uint64 `json:"id"`
	Session string `json:"session"`
	// Type is the kernel's event type (text, tool_call, tool_result,
	// approval, stats, warning, error, done, ...).
	Type string `json:"type"`
	Turn int    `json:"turn,omitempty"`
	// Text is model text, a warning, or an approval's prompt.
	Text string `json:"text,omitempty"`
	// Tool, Args: a tool call; Result, IsError and Decision (the gates'
	// summary, "allow: rule r12"): its result.
	Tool     string `json:"tool,omitempty"`
	Args     string `json:"args,omitempty"`
	Result   string `json:"result,omitempty"`
	IsError  bool   `json:"is_error,omitempty"`
	Decision string `json:"decision,omitempty"`
	// Approval is the id of the request a TypeApproval event waits on.
	Approval string `json:"approval,omitempty"`
	// Reason is why a run or turn stopped; Fault what failed.
	Reason string `json:"reason,omitempty"`
	Fault  string `json:"fault,omitempty"`
	// Status is the status line: model, turns, cost, TDD state and mode.
	Status *Status `json:"status,omitempty"`
}

// Status is a session's status line.
type Status struct {
	Model string  `json:"model"`
	Turns int     `json:"turns"`
	Cost  float64 `json:"cost"`
	TDD   string  `json:"tdd,omitempty"`
	Mode  string  `json:"mode,omitempty"`
}

// hubKeep is how many recent events the hub keeps per session: a page
// opened or reconnecting within them gets every event it missed; one
// further behind is told to reload.
const hubKeep = 4096

// hubSessions is how many sessions' events the hub keeps: past it, the
// session whose newest event is oldest and that no page watches is
// forgotten (its page then starts from what comes next).
const hubSessions = 256

// hubSubscriberQueue bounds what a slow page has not read yet; when it is
// full the page is dropped (its stream closes, and EventSource reconnects
// with Last-Event-ID, which replays from the kept events).
const hubSubscriberQueue = 256

// Hub keeps each session's recent events and hands new ones to the pages
// that watch it. Publish never blocks on a page: a subscriber whose queue
// is full is closed, and reconnecting replays what it missed.
type Hub struct {
	mu       sync.Mutex // guards the fields below
	sessions map[string]*sessionLog
	tick     uint64 // counts publications, for sessionLog.touched
}

type sessionLog struct {
	touched uint64 // Hub.tick at its newest event
	// base is how many of the session's stored messages were stored
	// before its first event here (Begin); -1 when not known.
	base   int
	next   uint64
	events []Event // the newest hubKeep, ascending IDs
	subs   map[*subscriber]struct{}
}

type subscriber struct {
	ch     chan Event
	closed bool
}

// NewHub returns an empty hub.
func NewHub() *Hub { return &Hub{sessions: map[string]*sessionLog{}} }

// Publish numbers ev within its session, keeps it and hands it to the
// session's subscribers.
func (h *Hub) Publish(ev Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.logLocked(ev.Session)
	h.tick++
	l.touched = h.tick
	l.next++
	ev.ID = l.next
	l.events = append(l.events, ev)
	if len(l.events) > hubKeep {
		// Copy down rather than reslice, so the array does not grow
		// without bound.
		n := copy(l.events, l.events[len(l.events)-hubKeep:])
		l.events = l.events[:n]
	}
	for s := range l.subs {
		select {
		case s.ch <- ev:
		default:
			h.dropLocked(l, s)
		}
	}
}

func (h *Hub) logLocked(session string) *sessionLog {
	l := h.sessions[session]
	if l == nil {
		if len(h.sessions) >= hubSessions {
			h.forgetLocked()
		}
		l = &sessionLog{subs: map[*subscriber]struct{}{}, touched: h.tick, base: -1}
		h.sessions[session] = l
	}
	return l
}

// Begin tells the hub, before the first event of session it keeps, how
// many messages of the session's stored conversation were stored before
// that event: a page shows those from the store and the rest from the
// hub, with no gap and no repeat. It does nothing once the hub keeps an
// event of session (Last is not 0).
func (h *Hub) Begin(session string, base int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l := h.logLocked(session); l.next == 0 {
		l.base = base
	}
}

// view is what a session page shows of the hub: the kept events (as
// Since from 0), and the base Begin gave (-1: unknown); known is false
// when the hub has had no event of session (a page watching it makes its
// log, but no event).
func (h *Hub) view(session string) (evs []Event, complete bool, base int, known bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.sessions[session]
	evs, complete = sinceLocked(l, 0)
	if l == nil || l.next == 0 {
		return evs, complete, -1, false
	}
	return evs, complete, l.base, true
}

// forgetLocked drops the least recently active session no page watches.
func (h *Hub) forgetLocked() {
	var oldest string
	var at uint64
	for id, l := range h.sessions {
		if len(l.subs) == 0 && (oldest == "" || l.touched < at) {
			oldest, at = id, l.touched
		}
	}
	if oldest != "" {
		delete(h.sessions, oldest)
	}
}

func (h *Hub) dropLocked(l *sessionLog, s *subscriber) {
	if !s.closed {
		s.closed = true
		close(s.ch)
	}
	delete(l.subs, s)
}

// Since returns the kept events of session after ID after, and whether
// they are complete: false when events after it were already forgotten
// (the page must reload).
func (h *Hub) Since(session string, after uint64) ([]Event, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return sinceLocked(h.sessions[session], after)
}

func sinceLocked(l *sessionLog, after uint64) ([]Event, bool) {
	if l == nil || len(l.events) == 0 {
		return nil, l == nil || after >= l.next
	}
	first := l.events[0].ID
	if after+1 < first {
		return append([]Event(nil), l.events...), false
	}
	if after >= l.next {
		return nil, true
	}
	return append([]Event(nil), l.events[after+1-first:]...), true
}

// Subscribe returns the kept events after ID after (complete as for
// Since) and a channel of the events published from now on, with no gap
// and no repeat between the two. The channel is closed when the
// subscriber falls behind or cancel is called.
func (h *Hub) Subscribe(session string, after uint64) (backlog []Event, complete bool, live <-chan Event, cancel func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.logLocked(session)
	backlog, complete = sinceLocked(l, after)
	s := &subscriber{ch: make(chan Event, hubSubscriberQueue)}
	l.subs[s] = struct{}{}
	return backlog, complete, s.ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.dropLocked(l, s)
	}
}

// Last is the ID of session's newest event, 0 when it has none.
func (h *Hub) Last(session string) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l := h.sessions[session]; l != nil {
		return l.next
	}
	return 0
}
