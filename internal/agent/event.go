package agent

import "github.com/fluffy-agent/fluffy/internal/llm"

// EventType is the kind of an agent event.
type EventType string

// Event types, in the order a turn emits them.
const (
	EventTurnStart  EventType = "turn_start"
	EventText       EventType = "text"        // Text: a delta
	EventToolCall   EventType = "tool_call"   // Call: complete, before it runs
	EventUsage      EventType = "usage"       // Usage and Cost of this turn
	EventTurnEnd    EventType = "turn_end"    // Reason: the model's stop reason
	EventToolResult EventType = "tool_result" // Call, Result (with the gate decision)
	EventContext    EventType = "context"     // Text: what the window dropped or truncated
	EventStop       EventType = "stop"        // Reason: why Run returned; session totals
)

// Event is what the loop reports to the terminal UI and the audit log.
type Event struct {
	Type   EventType     `json:"type"`
	Turn   int           `json:"turn"`
	Text   string        `json:"text,omitempty"`
	Call   *llm.ToolCall `json:"call,omitempty"`
	Result *Result       `json:"result,omitempty"`
	Usage  llm.Usage     `json:"usage,omitzero"`
	Cost   float64       `json:"cost,omitempty"`
	Reason Reason        `json:"reason,omitempty"`
}
