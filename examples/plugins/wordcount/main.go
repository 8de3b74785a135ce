// Command wordcount is an example fluffy plugin written with
// pkg/pluginsdk: an MCP server over stdio with two tools, count (words,
// lines and bytes of a text) and count_file (the same for a file of the
// workspace, which the plugin may read because its manifest asks for
// read-workspace). fluffy runs it in a sandbox; docs/plugins.md.
package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/fluffy-agent/fluffy/pkg/pluginsdk"
)

// Counts is what both tools answer.
type Counts struct {
	Words int `json:"words"`
	Lines int `json:"lines"`
	Bytes int `json:"bytes"`
}

func count(s string) Counts {
	return Counts{Words: len(strings.Fields(s)), Lines: strings.Count(s, "\n"), Bytes: len(s)}
}

// TextIn is count's input.
type TextIn struct {
	Text string `json:"text" jsonschema:"the text to count"`
}

// FileIn is count_file's input.
type FileIn struct {
	Path string `json:"path" jsonschema:"a file of the workspace, relative to it"`
}

// maxFile bounds what count_file reads.
const maxFile = 8 << 20

func newServer(workspace string) *pluginsdk.Server {
	s := pluginsdk.New("wordcount", "1.0.0")
	pluginsdk.Tool(s, "count", "Count the words, lines and bytes of a text.",
		func(_ context.Context, in TextIn) (Counts, error) { return count(in.Text), nil },
		pluginsdk.ReadOnly(), pluginsdk.OpenWorld(false))
	pluginsdk.Tool(s, "count_file", "Count the words, lines and bytes of a file of the workspace.",
		func(_ context.Context, in FileIn) (Counts, error) {
			if workspace == "" {
				return Counts{}, errors.New("no workspace (FLUFFY_WORKSPACE is not set)")
			}
			root, err := os.OpenRoot(workspace)
			if err != nil {
				return Counts{}, err
			}
			defer root.Close()
			f, err := root.Open(filepath.Clean(in.Path))
			if err != nil {
				return Counts{}, err
			}
			defer f.Close()
			b, err := io.ReadAll(io.LimitReader(f, maxFile))
			if err != nil {
				return Counts{}, err
			}
			return count(string(b)), nil
		},
		pluginsdk.ReadOnly(), pluginsdk.OpenWorld(false))
	return s
}

func main() {
	pluginsdk.Main(newServer(os.Getenv("FLUFFY_WORKSPACE")))
}
