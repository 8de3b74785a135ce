package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Kind names what an entry records. Kinds are dotted lower-case words;
// Synchronous says which path Append takes for each.
type Kind string

// The kinds fluffy writes, and their payload types, are in catalogue.go.
// Others are accepted if they are well formed (see ValidKind) and take the
// buffered path, except the audit.* kinds, which only the log itself
// writes (LogOnly).

// Actors fluffy writes itself.
const (
	// ActorKernel is fluffy's own actor: the log writes its audit.prune
	// records with it, and a verifier accepts a pruned start only behind
	// one of those.
	ActorKernel = "kernel"
	// ActorUser is the person at the terminal.
	ActorUser = "user"
)

// ErrReservedKind is returned by Append for the kinds only the log writes
// itself (audit.*: Prune writes audit.prune). Verifiers trust an
// audit.prune entry as the record of a pruning, so no caller may write one.
var ErrReservedKind = errors.New("kind reserved to the audit log itself")

// LogOnly reports whether only the log itself writes entries of kind k:
// the audit.* kinds. Append refuses them.
func (k Kind) LogOnly() bool { return strings.HasPrefix(string(k), "audit.") }

// NotRun is the error an exec.end entry carries for a command that did
// not run because its exec.start could not be made durable (why): the
// writer queues it right behind that exec.start, so that once the log can
// write again it never shows a start without its outcome.
func NotRun(why error) string {
	return "not run: the audit log could not make exec.start durable: " + why.Error()
}

// ValidKind reports whether k is well formed: 1 to 64 bytes of a-z, 0-9,
// '.', '_' and '-', starting with a letter.
func ValidKind(k Kind) bool {
	if len(k) == 0 || len(k) > 64 || k[0] < 'a' || k[0] > 'z' {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// TimeFormat is the entry time's layout: UTC, always nine fractional
// digits, so times sort as strings.
const TimeFormat = "2006-01-02T15:04:05.000000000Z"

// Entry is one record of the log.
type Entry struct {
	// Seq is the sequence number, from 1, without gaps. Append assigns it.
	Seq uint64
	// Time is when the event happened; Append fills a zero Time with now.
	// Stored in UTC with nanoseconds.
	Time time.Time
	// Session is the agent session, "" for events outside one.
	Session string
	// Parent and Root place a sub-agent's session in its tree: the
	// session that spawned it and the top of the tree. Both are "" for
	// a top-level session's entries and outside sessions, and are then
	// absent from the encoding, so such entries encode as they always did.
	Parent string
	Root   string
	Kind   Kind
	// Actor is who caused the event: "agent", "user:alice", "kernel",
	// "cli", a sub-agent id...
	Actor string
	// Payload is a JSON object: for the kinds fluffy writes, the kind's
	// catalogue type (catalogue.go); otherwise a json.RawMessage or []byte
	// holding JSON text, an *Object (already canonical: taken as it is), or
	// any value encoding/json marshals to an object. Nil means {}. It is stored
	// canonicalized (RFC 8785).
	Payload any
	// Trace is the id of the OpenTelemetry trace the entry was written
	// under (32 lower-case hex digits), "" when none: Append fills it from
	// a traced context. An entry without one encodes exactly as before
	// the member existed.
	Trace string
}

// wireEntry is the JSON shape of an entry. Canonical encoding sorts the
// members, so field order here does not matter.
type wireEntry struct {
	Actor   string          `json:"actor"`
	Kind    Kind            `json:"kind"`
	Parent  string          `json:"parent"`
	Payload json.RawMessage `json:"payload"`
	Root    string          `json:"root"`
	Seq     uint64          `json:"seq"`
	Session string          `json:"session"`
	Time    string          `json:"time"`
	Trace   string          `json:"trace,omitempty"`
}

// maxSeq keeps sequence numbers exact in every JSON implementation (2^53-1).
const maxSeq = 1<<53 - 1

// payloadJSON returns the canonical JSON object of a payload.
func payloadJSON(p any) ([]byte, error) {
	var raw []byte
	switch v := p.(type) {
	case nil:
		return []byte("{}"), nil
	case rawPayload:
		return v, nil
	case *Object:
		if v.err != nil {
			return nil, fmt.Errorf("audit: payload: %w", v.err)
		}
		return v.Bytes(), nil
	case Object:
		// Passed by value (encoding/json would see no fields and write {}).
		return payloadJSON(&v)
	case json.RawMessage:
		raw = v
	case []byte:
		raw = v
	default:
		var err error
		if raw, err = json.Marshal(v); err != nil {
			return nil, fmt.Errorf("audit: payload: %w", err)
		}
	}
	c, err := Canonicalize(raw)
	if err != nil {
		return nil, fmt.Errorf("audit: payload: %w", err)
	}
	if len(c) == 0 || c[0] != '{' {
		return nil, fmt.Errorf("audit: payload: %w: must be a JSON object", ErrNotCanonical)
	}
	return c, nil
}

// Encode returns the canonical bytes of e: the RFC 8785 form of
// {"actor","kind","parent"?,"payload","root"?,"seq","session","time"},
// parent and root only when set. These bytes are what
// the hash chain covers and what an export holds, one entry per line.
func (e Entry) Encode() ([]byte, error) {
	if !ValidKind(e.Kind) {
		return nil, fmt.Errorf("audit: invalid kind %q", e.Kind)
	}
	if e.Seq == 0 || e.Seq > maxSeq {
		return nil, fmt.Errorf("audit: sequence number %d out of range", e.Seq)
	}
	if e.Trace != "" && !validTrace(e.Trace) {
		return nil, fmt.Errorf("audit: trace id %q: want 32 lower-case hex digits", e.Trace)
	}
	p, err := payloadJSON(e.Payload)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(p)+len(e.Actor)+len(e.Session)+len(e.Parent)+len(e.Root)+160)
	b = append(b, `{"actor":`...)
	b = appendString(b, e.Actor)
	b = append(b, `,"kind":`...)
	b = appendString(b, string(e.Kind))
	if e.Parent != "" {
		b = append(b, `,"parent":`...)
		b = appendString(b, e.Parent)
	}
	b = append(b, `,"payload":`...)
	b = append(b, p...)
	if e.Root != "" {
		b = append(b, `,"root":`...)
		b = appendString(b, e.Root)
	}
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, e.Seq, 10)
	b = append(b, `,"session":`...)
	b = appendString(b, e.Session)
	b = append(b, `,"time":`...)
	b = append(b, '"')
	b = e.Time.UTC().AppendFormat(b, TimeFormat)
	b = append(b, '"')
	if e.Trace != "" {
		b = append(b, `,"trace":"`...)
		b = append(b, e.Trace...)
		b = append(b, '"')
	}
	return append(b, '}'), nil
}

// validTrace reports whether s is an OpenTelemetry trace id as the log
// stores it: 32 lower-case hex digits, not all zero.
func validTrace(s string) bool {
	if len(s) != 32 || strings.Count(s, "0") == 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ParseEntry decodes the canonical bytes of an entry strictly: they must
// be exactly what Encode produces (canonical JSON, the six members, parent
// and root only when not empty, trace only when the entry has one, no
// others, valid kind, time and sequence number). The Payload of the result
// is a json.RawMessage.
func ParseEntry(b []byte) (Entry, error) {
	c, err := Canonicalize(b)
	if err != nil {
		return Entry{}, fmt.Errorf("audit: entry: %w", err)
	}
	if !bytes.Equal(c, b) {
		return Entry{}, fmt.Errorf("audit: entry: %w: bytes differ from their canonical form", ErrNotCanonical)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var w wireEntry
	if err := dec.Decode(&w); err != nil {
		return Entry{}, fmt.Errorf("audit: entry: %w: %v", ErrNotCanonical, err)
	}
	t, err := time.Parse(TimeFormat, w.Time)
	if err != nil {
		return Entry{}, fmt.Errorf("audit: entry: %w: time %q", ErrNotCanonical, w.Time)
	}
	e := Entry{Seq: w.Seq, Time: t, Session: w.Session, Parent: w.Parent, Root: w.Root, Kind: w.Kind, Actor: w.Actor, Payload: w.Payload, Trace: w.Trace}
	// Encode checks the rest (kind, seq, payload is an object) and must
	// give the same bytes back, which also proves all members were present.
	again, err := e.Encode()
	if err != nil {
		return Entry{}, err
	}
	if !bytes.Equal(again, b) {
		return Entry{}, fmt.Errorf("audit: entry: %w: not in entry form", ErrNotCanonical)
	}
	return e, nil
}
