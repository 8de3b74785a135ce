// Package llm owns fluffy's provider-neutral view of a language model:
// messages made of content blocks (text, tool call, tool result, image),
// tool definitions, requests, and the stream of events a model call yields.
//
// Backends live in sub-packages (anthropic, openai, gemini, replay), each
// built on its vendor's official SDK and each implementing [Provider]; the
// catalog sub-package turns a "provider/name" model string into one. This
// package also holds what every backend shares: the tool-call [Assembler]
// that joins streamed argument fragments and normalizes ids, [Collect] to
// build the assistant message from a stream, the [Retry] wrapper (backoff
// with jitter, Retry-After, bounded, never once output has started), error
// classification ([Error]) and cost accounting ([Price]).
package llm

import (
	"context"
	"encoding/json"
	"iter"
)

// Role says who wrote a message.
type Role string

// Roles. Tool results travel in user messages, as every API expects.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
)

// BlockType is the kind of a content block.
type BlockType string

// Block types.
const (
	BlockText       BlockType = "text"
	BlockToolCall   BlockType = "tool_call"
	BlockToolResult BlockType = "tool_result"
	BlockImage      BlockType = "image"
)

// Block is one piece of a message. Which fields are meaningful depends on
// Type:
//
//	text         Text
//	tool_call    ID, Name, Args (a JSON object), Signature (opaque
//	             provider data to send back, e.g. Gemini's thought signature)
//	tool_result  ID (of the call it answers), Name, Text, IsError
//	image        MediaType, Data
type Block struct {
	Type      BlockType       `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Args      json.RawMessage `json:"args,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	MediaType string          `json:"media_type,omitempty"`
	Data      []byte          `json:"data,omitempty"`
	Signature []byte          `json:"signature,omitempty"`
}

// Text returns a text block.
func Text(s string) Block { return Block{Type: BlockText, Text: s} }

// ToolResult returns a tool result block answering the call with id.
func ToolResult(id, name, content string, isError bool) Block {
	return Block{Type: BlockToolResult, ID: id, Name: name, Text: content, IsError: isError}
}

// Message is one turn of the conversation.
type Message struct {
	Role    Role    `json:"role"`
	Content []Block `json:"content"`
}

// Text returns the concatenated text blocks of m.
func (m Message) Text() string {
	var s string
	for _, b := range m.Content {
		if b.Type == BlockText {
			s += b.Text
		}
	}
	return s
}

// ToolCalls returns the tool calls of m, in order.
func (m Message) ToolCalls() []ToolCall {
	var calls []ToolCall
	for _, b := range m.Content {
		if b.Type == BlockToolCall {
			calls = append(calls, ToolCall{ID: b.ID, Name: b.Name, Args: b.Args, Signature: b.Signature})
		}
	}
	return calls
}

// ToolCall is a complete tool call: its arguments are one JSON object.
type ToolCall struct {
	ID   string          `json:"id"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
	// Signature is opaque provider data that must accompany the call when
	// it is sent back (Gemini's thought signature).
	Signature []byte `json:"signature,omitempty"`
}

// Block returns c as a content block.
func (c ToolCall) Block() Block {
	return Block{Type: BlockToolCall, ID: c.ID, Name: c.Name, Args: c.Args, Signature: c.Signature}
}

// Tool describes a tool the model may call. Schema is a JSON Schema for
// the arguments object.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
}

// Request is one model call.
type Request struct {
	// Model is the model's name within its provider ("claude-sonnet-4-5").
	Model string
	// System is the system prompt. Providers that support it cache it
	// (with the tools) across calls.
	System   string
	Messages []Message
	Tools    []Tool
	// MaxTokens bounds the response; 0 lets the provider choose (4096
	// where the API requires a value).
	MaxTokens int
}

// StopReason says why the model stopped.
type StopReason string

// Stop reasons, normalized across providers.
const (
	StopEnd       StopReason = "end"        // the model finished its turn
	StopToolUse   StopReason = "tool_use"   // the model wants tool results
	StopMaxTokens StopReason = "max_tokens" // the response hit MaxTokens
	StopRefusal   StopReason = "refusal"    // the provider refused (safety)
	StopOther     StopReason = "other"      // anything else, see the event
)

// EventType is the kind of a stream event.
type EventType string

// Event types.
const (
	EventText          EventType = "text"            // Text holds a delta
	EventToolCallStart EventType = "tool_call_start" // Index, ID, Name
	EventToolCallDelta EventType = "tool_call_delta" // Index, Text holds an argument fragment
	EventToolCallEnd   EventType = "tool_call_end"   // Index, Call holds the complete call
	EventUsage         EventType = "usage"           // Usage holds cumulative counts for this call
	EventStop          EventType = "stop"            // Stop, and Text the provider's own reason
)

// Event is one step of a streamed response. A well-formed stream has, per
// tool call, one start, any number of deltas and one end, in that order;
// calls may interleave when a provider streams several in parallel; usage
// may come several times (each cumulative); stop comes last.
type Event struct {
	Type  EventType  `json:"type"`
	Index int        `json:"index,omitempty"`
	ID    string     `json:"id,omitempty"`
	Name  string     `json:"name,omitempty"`
	Text  string     `json:"text,omitempty"`
	Call  *ToolCall  `json:"call,omitempty"`
	Usage *Usage     `json:"usage,omitempty"`
	Stop  StopReason `json:"stop,omitempty"`
}

// Provider is a language model backend.
//
// Stream starts one model call and yields its events. The sequence ends
// after the stop event, or with a non-nil error (and a zero Event) as its
// last element; a consumer that stops ranging early releases the call.
// Cancelling ctx ends the stream promptly with an error wrapping
// ctx.Err(). Errors are *Error where the provider answered or the
// connection failed, so that callers can tell what may be retried.
type Provider interface {
	Stream(ctx context.Context, req Request) iter.Seq2[Event, error]
}
