package llm

import (
	"fmt"
	"iter"
	"strings"
)

// Response is a whole model turn, built from its stream.
type Response struct {
	Message Message
	Usage   Usage
	Stop    StopReason
}

// Collect drains a stream into a Response, calling each (when non-nil)
// for every event as it arrives. Text deltas are merged into one text
// block placed before the tool calls, which keep their stream order. A
// stream that ends without a stop event is an error, as is a tool call
// left open.
func Collect(stream iter.Seq2[Event, error], each func(Event)) (Response, error) {
	var (
		text    strings.Builder
		calls   []Block
		r       Response
		stopped bool
		open    = map[int]bool{}
	)
	for ev, err := range stream {
		if err != nil {
			return r, err
		}
		if each != nil {
			each(ev)
		}
		switch ev.Type {
		case EventText:
			text.WriteString(ev.Text)
		case EventToolCallStart:
			open[ev.Index] = true
		case EventToolCallEnd:
			delete(open, ev.Index)
			if ev.Call != nil {
				calls = append(calls, ev.Call.Block())
			}
		case EventUsage:
			if ev.Usage != nil {
				r.Usage = *ev.Usage
			}
		case EventStop:
			r.Stop = ev.Stop
			stopped = true
		}
	}
	if !stopped {
		return r, fmt.Errorf("stream ended without a stop reason")
	}
	if len(open) > 0 {
		return r, fmt.Errorf("stream ended with %d tool call(s) still open", len(open))
	}
	r.Message.Role = RoleAssistant
	if text.Len() > 0 {
		r.Message.Content = append(r.Message.Content, Text(text.String()))
	}
	r.Message.Content = append(r.Message.Content, calls...)
	if len(calls) > 0 && r.Stop == StopEnd {
		r.Stop = StopToolUse
	}
	return r, nil
}
