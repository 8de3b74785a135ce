package web

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// streamPing is how often an idle stream sends a comment, so proxies and
// the browser keep it open.
const streamPing = 25 * time.Second

// stream is a session's live events as Server-Sent Events. Each event is
// the rendered list item of the session page (escaped on the server),
// its id the hub's: after a reconnect the browser sends Last-Event-ID and
// the stream resumes after it, from the hub's kept events, without a gap
// or a repeat. A page too far behind gets a "reload" event.
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := s.o.Sessions.Get(r.Context(), id); err != nil {
		s.fail(w, r, err)
		return
	}
	after := uint64(0)
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = r.URL.Query().Get("after")
	}
	if last != "" {
		n, err := strconv.ParseUint(last, 10, 64)
		if err != nil {
			http.Error(w, "Last-Event-ID must be a number", http.StatusBadRequest)
			return
		}
		after = n
	}
	rc := http.NewResponseController(w)
	// The server's write timeout is for pages; a stream lives on.
	_ = rc.SetWriteDeadline(time.Time{})
	backlog, complete, live, cancel := s.o.Hub.Subscribe(id, after)
	defer cancel()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if !complete {
		_, _ = fmt.Fprint(w, "event: reload\ndata: the page missed events; reload it\n\n")
		_ = rc.Flush()
		return
	}
	for _, ev := range backlog {
		if err := s.writeEvent(w, ev); err != nil {
			return
		}
	}
	_, _ = fmt.Fprint(w, ": ready\n\n")
	if err := rc.Flush(); err != nil {
		return
	}
	ping := time.NewTicker(streamPing)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case ev, ok := <-live:
			if !ok {
				// Dropped as too slow: the browser reconnects with
				// Last-Event-ID and catches up from the kept events.
				return
			}
			if err := s.writeEvent(w, ev); err != nil {
				return
			}
		case <-ping.C:
			_, _ = fmt.Fprint(w, ": ping\n\n")
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// writeEvent writes one event: its id and the rendered item, one data
// line per line of HTML.
func (s *Server) writeEvent(w http.ResponseWriter, ev Event) error {
	var buf bytes.Buffer
	if err := s.pages["session"].ExecuteTemplate(&buf, "event", ev); err != nil {
		return err
	}
	var out strings.Builder
	fmt.Fprintf(&out, "id: %d\nevent: ev\n", ev.ID)
	for line := range strings.SplitSeq(strings.TrimRight(buf.String(), "\n"), "\n") {
		out.WriteString("data: ")
		out.WriteString(strings.TrimSuffix(line, "\r"))
		out.WriteByte('\n')
	}
	out.WriteByte('\n')
	_, err := w.Write([]byte(out.String()))
	return err
}
