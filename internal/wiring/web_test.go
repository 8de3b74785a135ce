package wiring

import (
	"encoding/json"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
)

// TestCheckWebListen: the console listens on loopback, unless
// serve.web.hosts names the reverse proxy in front of it.
func TestCheckWebListen(t *testing.T) {
	for _, c := range []struct {
		web config.Web
		ok  bool
	}{
		{config.Web{Listen: "127.0.0.1:8484"}, true},
		{config.Web{Listen: "[::1]:0"}, true},
		{config.Web{Listen: "localhost:8484"}, true},
		{config.Web{Listen: "0.0.0.0:8484"}, false},
		{config.Web{Listen: "192.0.2.1:8484"}, false},
		{config.Web{Listen: "0.0.0.0:8484", Hosts: []string{"fluffy.example.org"}}, true},
		{config.Web{Listen: "0.0.0.0:8484", TLSCert: "c.pem", TLSKey: "k.pem"}, false},
		{config.Web{Listen: ":8484", TLSCert: "c.pem", TLSKey: "k.pem", Hosts: []string{"fluffy.example.org:8484"}}, true},
		{config.Web{Listen: "192.0.2.1:8484", TLSCert: "c.pem", TLSKey: "k.pem"}, true},
		{config.Web{Listen: "127.0.0.1:8484", TLSCert: "c.pem"}, false},
		{config.Web{Listen: "8484"}, false},
	} {
		if err := checkWebListen(c.web); (err == nil) != c.ok {
			t.Errorf("%+v: %v, want ok %v", c.web, err, c.ok)
		}
	}
}

// TestWebEvent: a kernel event as the console shows it.
func TestWebEvent(t *testing.T) {
	ev, ok := webEvent(kernel.Event{Session: "s1", Type: kernel.Type(agent.EventToolCall),
		Agent: &agent.Event{Type: agent.EventToolCall, Turn: 2, Call: &llm.ToolCall{Name: "shell.exec", Args: json.RawMessage(`{ "command" : "ls" }`)}}})
	if !ok || ev.Session != "s1" || ev.Type != "tool_call" || ev.Turn != 2 || ev.Tool != "shell.exec" || ev.Args != `{"command":"ls"}` {
		t.Errorf("tool call: %+v", ev)
	}
	ev, _ = webEvent(kernel.Event{Session: "s1", Type: kernel.TypeApproval, Approval: &approval.Request{ID: "r1"}, Text: "asks"})
	if ev.Approval != "r1" || ev.Text != "asks" {
		t.Errorf("approval: %+v", ev)
	}
	ev, _ = webEvent(kernel.Event{Session: "s1", Type: kernel.TypeStats, Stats: &kernel.Stats{Model: "m", Turns: 3, TDD: "red", Mode: "strict"}})
	if ev.Status == nil || ev.Status.Turns != 3 || ev.Status.TDD != "red" {
		t.Errorf("stats: %+v", ev)
	}
	if _, ok := webEvent("not an event"); ok {
		t.Error("a value that is not a kernel event was converted")
	}
}
