// Command template is the layout of a fluffy plugin to start from: copy
// this folder, rename the plugin in main.go and fluffy-plugin.yaml, and
// replace the hello tool with yours. Build with `go build -o plugin .`,
// test with `go test` (plugintest drives the server in memory) and then
// with fluffy's sandbox and gates (docs/plugins.md).
package main

import (
	"context"

	"github.com/fluffy-agent/fluffy/pkg/pluginsdk"
)

// HelloIn is the hello tool's input.
type HelloIn struct {
	Name string `json:"name" jsonschema:"who to greet"`
}

func newServer() *pluginsdk.Server {
	s := pluginsdk.New("template", "0.1.0")
	pluginsdk.Tool(s, "hello", "Greet someone by name.",
		func(_ context.Context, in HelloIn) (string, error) { return "hello, " + in.Name, nil },
		pluginsdk.ReadOnly(), pluginsdk.OpenWorld(false))
	return s
}

func main() { pluginsdk.Main(newServer()) }
