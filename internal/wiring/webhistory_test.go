package wiring

import (
	"encoding/json"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/web"
)

// TestStoredEvents: a stored message as the console's events: the
// assistant's text and calls, a person's text as a message, tool
// results with their tool; images left out.
func TestStoredEvents(t *testing.T) {
	asst := llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{llm.Text("on it"),
		{Type: llm.BlockToolCall, ID: "c1", Name: "fs.read", Args: json.RawMessage(`{ "path": "a" }`)}}}
	user := llm.Message{Role: llm.RoleUser, Content: []llm.Block{llm.ToolResult("c1", "fs.read", "contents", true),
		{Type: llm.BlockImage, MediaType: "image/png", Data: []byte{1}}, llm.Text("and now b")}}
	got := append(storedEvents("s1", asst), storedEvents("s1", user)...)
	want := []web.Event{{Session: "s1", Type: "text", Text: "on it"}, {Session: "s1", Type: "tool_call", Tool: "fs.read", Args: `{"path":"a"}`},
		{Session: "s1", Type: "tool_result", Tool: "fs.read", Result: "contents", IsError: true}, {Session: "s1", Type: web.TypeMessage, Text: "and now b"}}
	if len(got) != len(want) {
		t.Fatalf("events %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
