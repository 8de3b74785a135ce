package agent_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/llm/replay"
)

// BenchmarkLoopTurn measures the loop's own overhead per turn: request
// building (window estimate), streaming a replayed turn with text and a
// tool call through Collect, one in-memory tool call, events. Each
// iteration runs a 20-turn session; the metric is per turn.
func BenchmarkLoopTurn(b *testing.B) {
	const turns = 20
	var sb strings.Builder
	for i := 1; i <= turns; i++ {
		line, _ := json.Marshal(map[string]any{"turn": map[string]any{
			"text":       fmt.Sprintf("Step %d: reading the file to check the parser's handling of edge cases.", i),
			"tool_calls": []map[string]any{{"id": fmt.Sprintf("c%d", i), "name": "read_file", "args": map[string]string{"path": "README.md"}}},
		}})
		sb.Write(append(line, '\n'))
	}
	sb.WriteString(`{"turn": {"text": "Done."}}` + "\n")
	script, err := replay.Parse("bench", strings.NewReader(sb.String()))
	if err != nil {
		b.Fatal(err)
	}
	ws := newWorkspace(map[string]string{"README.md": strings.Repeat("fluffy is a runtime. ", 100)})
	events := 0
	b.ReportAllocs()
	for b.Loop() {
		a := newAgent(b, agent.Options{Provider: replay.New(script), Tools: ws, System: strings.Repeat("Be careful. ", 200),
			OnEvent: func(agent.Event) { events++ }})
		out, err := a.Run(b.Context(), agent.NewSession("check the parser"))
		if err != nil || out.Reason != agent.ReasonDone {
			b.Fatal(out, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*(turns+1)), "ns/turn")
}
