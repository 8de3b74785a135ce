package router_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/tdd"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// TestPluginToolTakesTheFullRoad: a plugin tool (an MCP server's, run
// through Run) passes the policy gate and a person's approval, runs, is
// recorded as an execution of class plugin, its output sanitized and the
// session marked untrusted.
func TestPluginToolTakesTheFullRoad(t *testing.T) {
	e := newEnv(t, setup{approver: true, mode: tdd.Explore})
	ran := 0
	pt, err := tool.New(tool.Definition[map[string]any]{Name: "mcp.demo.echo", Description: "echo", Action: operation.Exec,
		Tags: []string{"plugin"}, Execution: tool.Execution{Class: tool.Plugin}, UntrustedOutput: true,
		Schema:    objectSchema(t),
		Normalize: func(context.Context, *tool.Resolver, *map[string]any, *operation.Operation) error { return nil },
		Run: func(context.Context, *map[string]any) (tool.Result, error) {
			ran++
			return tool.Result{Output: []byte("said \x1b[31mhi")}, nil
		}})
	must(t, err)
	must(t, e.reg.Register(pt))
	from := e.last()
	res, err := e.r.Call(t.Context(), tc("mcp.demo.echo", map[string]any{"text": "hi"}))
	must(t, err)
	if ran != 1 || res.IsError || strings.Contains(res.Content, "\x1b") || !strings.Contains(res.Content, "said") {
		t.Fatalf("ran %d times, result %+v", ran, res)
	}
	if e.asked != 1 {
		t.Errorf("a person was asked %d times, want 1 (the default policy approves an exec)", e.asked)
	}
	es := e.entries(from)
	ks := kinds(es)
	for _, k := range []string{"tool.request", "gate.policy", "approval.request", "exec.start", "exec.end"} {
		if !slices.Contains(ks, k) {
			t.Errorf("no %s among %v", k, ks)
		}
	}
	for _, en := range es {
		if b, _ := json.Marshal(en.Payload); en.Kind == audit.KindExecStart && !strings.Contains(string(b), `"class":"plugin"`) {
			t.Errorf("exec.start %s: want class plugin", b)
		}
	}
}

// objectSchema is a given schema, as an MCP server hands one.
func objectSchema(t testing.TB) *jsonschema.Schema {
	t.Helper()
	var s jsonschema.Schema
	must(t, json.Unmarshal([]byte(`{"type":"object","properties":{"text":{"type":"string"}}}`), &s))
	return &s
}
