// Package plugintest drives a plugin's server in a Go test, in memory:
// connect a client to it, list its tools, call one and read the text it
// answered, as fluffy would (without fluffy's sandbox and gates; run the
// built plugin under `fluffy plugin test` for those).
package plugintest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fluffy-agent/fluffy/pkg/pluginsdk"
)

// Client is a connected MCP client of a plugin's server.
type Client struct {
	t  testing.TB
	cs *mcp.ClientSession
}

// Connect serves s in memory and returns a client of it, closed when the
// test ends.
func Connect(t testing.TB, s *pluginsdk.Server) *Client {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := s.MCP().Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatalf("plugintest: serve: %v", err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "plugintest", Version: "1"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatalf("plugintest: connect: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Close()
	})
	return &Client{t: t, cs: cs}
}

// Session is the MCP client session, for what Client does not wrap.
func (c *Client) Session() *mcp.ClientSession { return c.cs }

// Tools lists the server's tools.
func (c *Client) Tools() []*mcp.Tool {
	c.t.Helper()
	res, err := c.cs.ListTools(c.t.Context(), nil)
	if err != nil {
		c.t.Fatalf("plugintest: list tools: %v", err)
	}
	return res.Tools
}

// Call calls tool with args (any value that marshals to a JSON object)
// and returns its text (text contents joined by newlines, else the
// structured content as JSON) and whether the call failed.
func (c *Client) Call(tool string, args any) (string, bool) {
	c.t.Helper()
	res, err := c.cs.CallTool(c.t.Context(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		c.t.Fatalf("plugintest: call %s: %v", tool, err)
	}
	var parts []string
	for _, ct := range res.Content {
		if tc, ok := ct.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		parts = append(parts, string(b))
	}
	return strings.Join(parts, "\n"), res.IsError
}
