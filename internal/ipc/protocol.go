package ipc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// Protocol versions this package speaks. A client offers the range
// [MinProtocol, Protocol]; the server picks the highest version both
// speak, or refuses the connection with CodeVersionMismatch.
const (
	Protocol    = 1
	MinProtocol = 1
)

// Message types: the "type" field of every frame.
const (
	TypeHello    = "hello"    // first frame each way
	TypeRequest  = "request"  // client → server, carries id, method, params
	TypeResponse = "response" // server → client, carries id and result or error
	TypeEvent    = "event"    // server → client, unsolicited: topic, data
	TypeCancel   = "cancel"   // client → server: abandon request id
	TypeError    = "error"    // server → client, fatal: the server closes after it
)

// Built-in methods every server answers.
const (
	MethodPing        = "ping"
	MethodSubscribe   = "subscribe"
	MethodUnsubscribe = "unsubscribe"
)

// Message is one frame's JSON value. Which fields are set depends on Type;
// see docs/ipc.md. Decoding is strict: unknown fields and duplicate keys
// are errors.
type Message struct {
	Type   string          `json:"type"`
	ID     uint64          `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
	Topic  string          `json:"topic,omitempty"`
	Data   json.RawMessage `json:"data,omitempty"`
	Hello  *Hello          `json:"hello,omitempty"`
}

// Hello opens a connection. The client sends Min and Max (the range of
// versions it speaks); the server answers with the chosen Version.
type Hello struct {
	Min     int    `json:"min,omitempty"`
	Max     int    `json:"max,omitempty"`
	Version int    `json:"version,omitempty"`
	Name    string `json:"name,omitempty"` // "fluffy/1.2.3", for logs
	PID     int    `json:"pid,omitempty"`  // the sender's process id, informative
}

// Pong is the result of MethodPing.
type Pong struct {
	Pong bool `json:"pong"`
}

// SubscribeParams are the params of MethodSubscribe and MethodUnsubscribe.
// A topic is a dotted name ("session.output"); a pattern ending in ".*"
// matches every topic under it, and "*" matches everything.
type SubscribeParams struct {
	Topics []string `json:"topics"`
}

// Error codes. Codes are stable strings; messages are for people.
const (
	CodeInvalidMessage   = "invalid_message"   // malformed frame or message (fatal)
	CodeFrameTooLarge    = "frame_too_large"   // fatal
	CodeVersionMismatch  = "version_mismatch"  // fatal, at hello
	CodePermissionDenied = "permission_denied" // fatal: peer is another user
	CodeUnknownMethod    = "unknown_method"
	CodeInvalidParams    = "invalid_params"
	CodeCanceled         = "canceled"
	CodeShuttingDown     = "shutting_down"
	CodeSlowConsumer     = "slow_consumer" // fatal: the peer did not read
	CodeInternal         = "internal"
	CodeUnavailable      = "unavailable" // the kernel cannot do it now
)

// Error is the error shape on the wire, and a Go error. Handlers return an
// *Error to choose the code the client sees; any other error becomes
// CodeInternal with its message.
type Error struct {
	Code    string          `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "ipc: " + e.Code
	}
	return fmt.Sprintf("ipc: %s: %s", e.Code, e.Message)
}

// Is matches another *Error by code, so errors.Is(err, ipc.ErrUnknownMethod)
// works for errors from the wire.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Sentinels for errors.Is, one per code a caller may branch on.
var (
	ErrVersionMismatch  = &Error{Code: CodeVersionMismatch}
	ErrPermissionDenied = &Error{Code: CodePermissionDenied}
	ErrUnknownMethod    = &Error{Code: CodeUnknownMethod}
	ErrInvalidParams    = &Error{Code: CodeInvalidParams}
	ErrCanceled         = &Error{Code: CodeCanceled}
	ErrShuttingDown     = &Error{Code: CodeShuttingDown}
	ErrSlowConsumer     = &Error{Code: CodeSlowConsumer}
)

var methodRE = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$`)

// ValidMethod reports whether name is a well-formed method or topic name:
// dotted lower-case words ("session.create").
func ValidMethod(name string) bool { return len(name) <= 128 && methodRE.MatchString(name) }

// DecodeMessage parses one frame's payload strictly: a single JSON object,
// no unknown fields, no trailing data, no object naming a member twice
// (at any depth, params and results included), a known type with the
// fields that type requires.
func DecodeMessage(payload []byte) (*Message, error) {
	var m Message
	if err := DecodeStrict(payload, &m); err != nil {
		return nil, fmt.Errorf("ipc: decode message: %w", err)
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// DecodeStrict decodes one JSON value from data into v: unknown fields,
// trailing data and an object naming a member twice, at any depth
// (exactly or but for case: *DuplicateKeyError), are errors.
func DecodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON value")
	}
	// data is one valid JSON value now, as checkKeys requires.
	return checkKeys(data)
}

func (m *Message) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("ipc: invalid %q message: %s", m.Type, fmt.Sprintf(format, args...))
	}
	switch m.Type {
	case TypeHello:
		if m.Hello == nil {
			return bad("no hello field")
		}
	case TypeRequest:
		if m.ID == 0 {
			return bad("id must be a positive integer")
		}
		if !ValidMethod(m.Method) {
			return bad("method %q is not a dotted lower-case name", m.Method)
		}
	case TypeResponse:
		if m.ID == 0 {
			return bad("id must be a positive integer")
		}
		if (m.Error == nil) == (m.Result == nil) {
			return bad("exactly one of result and error must be set")
		}
	case TypeEvent:
		if !ValidMethod(m.Topic) {
			return bad("topic %q is not a dotted lower-case name", m.Topic)
		}
	case TypeCancel:
		if m.ID == 0 {
			return bad("id must be a positive integer")
		}
	case TypeError:
		if m.Error == nil || m.Error.Code == "" {
			return bad("no error code")
		}
	default:
		return fmt.Errorf("ipc: unknown message type %q", m.Type)
	}
	return nil
}

// encode marshals m; it never fails for messages built by this package
// (RawMessage fields hold valid JSON).
func encode(m *Message) ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("ipc: encode %s: %w", m.Type, err)
	}
	return b, nil
}

// negotiate picks the protocol version for a client offering [min, max].
func negotiate(h *Hello) (int, *Error) {
	lo, hi := h.Min, h.Max
	if hi == 0 {
		hi = lo
	}
	if lo <= 0 || hi < lo {
		return 0, Errorf(CodeVersionMismatch, "hello offers no protocol version (min %d, max %d)", h.Min, h.Max)
	}
	v := min(hi, Protocol)
	if v < max(lo, MinProtocol) {
		return 0, Errorf(CodeVersionMismatch,
			"client speaks protocol %d..%d, this kernel speaks %d..%d: the fluffy binary and the running kernel differ; stop the old kernel and run the command again",
			lo, hi, MinProtocol, Protocol)
	}
	return v, nil
}

// topicMatch reports whether pattern (a topic, "prefix.*" or "*") covers
// topic.
func topicMatch(pattern, topic string) bool {
	if pattern == "*" || pattern == topic {
		return true
	}
	if p, ok := strings.CutSuffix(pattern, ".*"); ok {
		return len(topic) > len(p) && topic[:len(p)] == p && topic[len(p)] == '.'
	}
	return false
}

func validPattern(p string) bool {
	if p == "*" {
		return true
	}
	if q, ok := strings.CutSuffix(p, ".*"); ok {
		return ValidMethod(q)
	}
	return ValidMethod(p)
}
