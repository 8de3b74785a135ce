package llm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Assembler joins a streamed response into complete tool calls. Adapters
// feed it what their wire format gives (a call starting, argument
// fragments in any split, a call ending) and forward the events it
// returns, so that every provider yields the same normalized events:
//
//   - each call gets an id: the provider's, or "call_<n>" when the
//     provider sends none (Gemini, some OpenAI-compatible servers), or a
//     suffixed one when the provider repeats an id within a response;
//   - argument fragments are concatenated in order and must form one
//     JSON object; empty arguments become {};
//   - several calls may be open at once, keyed by the provider's index.
//
// An Assembler is for one response and is not safe for concurrent use.
type Assembler struct {
	open  map[int]*partial
	order []int
	ids   map[string]bool
	n     int
}

type partial struct {
	id, name string
	args     bytes.Buffer
	sig      []byte
}

// ArgsError is a tool call whose joined arguments are not a JSON object.
type ArgsError struct {
	ID, Name string
	Args     string
	Err      error
}

func (e *ArgsError) Error() string {
	return fmt.Sprintf("tool call %s (%s): arguments are not a JSON object: %v", e.ID, e.Name, e.Err)
}

func (e *ArgsError) Unwrap() error { return e.Err }

// Start opens call index. id may be empty.
func (a *Assembler) Start(index int, id, name string) Event {
	if a.open == nil {
		a.open = map[int]*partial{}
		a.ids = map[string]bool{}
	}
	a.n++
	if id == "" {
		id = fmt.Sprintf("call_%d", a.n)
	}
	for base, i := id, 2; a.ids[id]; i++ {
		id = fmt.Sprintf("%s_%d", base, i)
	}
	a.ids[id] = true
	a.open[index] = &partial{id: id, name: name}
	a.order = append(a.order, index)
	return Event{Type: EventToolCallStart, Index: index, ID: id, Name: name}
}

// Started reports whether call index is open.
func (a *Assembler) Started(index int) bool {
	_, ok := a.open[index]
	return ok
}

// Delta appends an argument fragment to call index. A fragment for a
// call never started opens one without a name (an error at End).
func (a *Assembler) Delta(index int, fragment string) Event {
	p, ok := a.open[index]
	if !ok {
		a.Start(index, "", "")
		p = a.open[index]
	}
	p.args.WriteString(fragment)
	return Event{Type: EventToolCallDelta, Index: index, ID: p.id, Text: fragment}
}

// SetArgs replaces the arguments of call index with a complete value
// (providers that send whole arguments at once).
func (a *Assembler) SetArgs(index int, args string) {
	if p, ok := a.open[index]; ok {
		p.args.Reset()
		p.args.WriteString(args)
	}
}

// SetSignature attaches opaque provider data to call index.
func (a *Assembler) SetSignature(index int, sig []byte) {
	if p, ok := a.open[index]; ok {
		p.sig = sig
	}
}

// End closes call index and returns its complete call.
func (a *Assembler) End(index int) (Event, error) {
	p, ok := a.open[index]
	if !ok {
		return Event{}, fmt.Errorf("tool call %d ended but never started", index)
	}
	delete(a.open, index)
	for i, x := range a.order {
		if x == index {
			a.order = append(a.order[:i], a.order[i+1:]...)
			break
		}
	}
	if p.name == "" {
		return Event{}, fmt.Errorf("tool call %s has no name", p.id)
	}
	args, err := NormalizeArgs(p.args.Bytes())
	if err != nil {
		return Event{}, &ArgsError{ID: p.id, Name: p.name, Args: p.args.String(), Err: err}
	}
	return Event{Type: EventToolCallEnd, Index: index, ID: p.id, Name: p.name,
		Call: &ToolCall{ID: p.id, Name: p.name, Args: args, Signature: p.sig}}, nil
}

// EndAll closes every open call in the order they started (for wire
// formats with no per-call end marker).
func (a *Assembler) EndAll() ([]Event, error) {
	var evs []Event
	for len(a.order) > 0 {
		ev, err := a.End(a.order[0])
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// Open returns how many calls are still open.
func (a *Assembler) Open() int { return len(a.open) }

// NormalizeArgs checks that raw is exactly one JSON object and returns it
// compacted. Empty or whitespace-only input is the empty object.
func NormalizeArgs(raw []byte) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage("{}"), nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, fmt.Errorf("got %s, want an object", jsonKind(v))
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after the object")
	}
	if rest := strings.TrimSpace(string(raw[dec.InputOffset():])); rest != "" {
		return nil, fmt.Errorf("trailing data after the object")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	}
	return "a value"
}
