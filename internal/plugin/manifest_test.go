package plugin

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"
)

const goodManifest = `name: github
version: 1.2.0
requires:
  fluffy: "1"
  mcp: ["2025-06-18", "2099-01-01"]
run:
  command: [./server, --stdio]
  env: [LOG_LEVEL=info]
sandbox:
  memory: 256MiB
  pids: 64
network: [api.github.com, "*.githubusercontent.com:443"]
credentials:
  - ref: secret://age/github/token
    as: env
    name: GITHUB_TOKEN
capabilities: [read-workspace, network, secrets]
`

func TestParseManifest(t *testing.T) {
	m, err := ParseManifest([]byte(goodManifest), "fluffy-plugin.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "github" || m.Sandbox.Memory != 256<<20 || len(m.Credentials) != 1 || m.Run.Command[0] != "./server" {
		t.Fatalf("parsed %+v", m)
	}
}

// Each case changes the good manifest by replacing one line (old → new)
// and expects the error at a line with a message containing want.
func TestParseManifestErrors(t *testing.T) {
	cases := []struct {
		name, old, new string
		line           int
		want           string
	}{
		{"unknown field", "version: 1.2.0", "version: 1.2.0\nvesion: 2", 3, "field vesion not found"},
		{"bad name", "name: github", "name: Git-Hub", 1, "name \"Git-Hub\""},
		{"api version", `  fluffy: "1"`, `  fluffy: "2"`, 4, "plugin API"},
		{"no known mcp", `  mcp: ["2025-06-18", "2099-01-01"]`, `  mcp: ["2099-01-01"]`, 5, "none of 2099-01-01"},
		{"mcp format", `  mcp: ["2025-06-18", "2099-01-01"]`, `  mcp: ["2025-06-18", "latest"]`, 5, "YYYY-MM-DD"},
		{"command escapes", "  command: [./server, --stdio]", "  command: [../x/server]", 7, "leaves the plugin's folder"},
		{"image tag", "  command: [./server, --stdio]", "  image: ghcr.io/x/y:latest", 7, "pin it by digest"},
		{"bad env", "  env: [LOG_LEVEL=info]", "  env: [LOG_LEVEL=info, 1X=2]", 8, "want NAME=value"},
		{"bad host", "network: [api.github.com, \"*.githubusercontent.com:443\"]", "network: [api.github.com, \"http://x\"]", 12, "network \"http://x\""},
		{"bad size", "  memory: 256MiB", "  memory: lots", 10, "lots"},
		{"bad type", "  pids: 64", "  pids: many", 11, "cannot unmarshal"},
		{"bad ref", "  - ref: secret://age/github/token", "  - ref: ghp_123", 14, "secret://BACKEND/PATH"},
		{"unknown capability", "capabilities: [read-workspace, network, secrets]", "capabilities: [read-workspace, network, secrets, root]", 17, "unknown \"root\""},
		{"network without capability", "capabilities: [read-workspace, network, secrets]", "capabilities: [read-workspace, secrets]", 12, "add the capability network"},
		{"secrets without capability", "capabilities: [read-workspace, network, secrets]", "capabilities: [read-workspace, network]", 13, "add the capability secrets"},
		{"stdin credential", "    as: env", "    as: stdin", 15, "MCP stream"},
		{"bind without proxy", "    name: GITHUB_TOKEN", "    name: GITHUB_TOKEN\n    bind: [api.github.com]", 14, "for as proxy only"},
		{"proxy without network", "network: [api.github.com, \"*.githubusercontent.com:443\"]\ncredentials:\n  - ref: secret://age/github/token\n    as: env\n    name: GITHUB_TOKEN\ncapabilities: [read-workspace, network, secrets]",
			"credentials:\n  - ref: secret://age/github/token\n    as: proxy\n    name: GITHUB_TOKEN\n    bind: [api.github.com]\ncapabilities: [read-workspace, secrets]", 13, "as proxy needs the capability network"},
		{"two documents", "capabilities: [read-workspace, network, secrets]", "capabilities: [read-workspace, network, secrets]\n---\nname: x", 18, "second YAML document"},
		{"syntax", "version: 1.2.0", "version: [1.2.0", 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := strings.Replace(goodManifest, c.old, c.new, 1)
			if src == goodManifest {
				t.Fatal("case changes nothing")
			}
			_, err := ParseManifest([]byte(src), "p.yaml")
			var me *ManifestError
			if !errors.As(err, &me) || !errors.Is(err, ErrManifest) {
				t.Fatalf("err = %v, want a ManifestError", err)
			}
			if c.want == "" {
				return
			}
			if me.Line != c.line || !strings.Contains(me.Msg, c.want) {
				t.Fatalf("err = %v, want line %d with %q", err, c.line, c.want)
			}
		})
	}
}

// FuzzParseManifest: no input panics, and a manifest that parses parses
// again to the same value after being written out.
func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(goodManifest))
	f.Add([]byte("name: x\nversion: 1\nrequires: {fluffy: \"1\", mcp: [2025-06-18]}\nrun: {command: [a]}\n"))
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data, "f.yaml")
		if err != nil {
			return
		}
		out, err := yaml.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := ParseManifest(out, "f.yaml")
		if err != nil {
			t.Fatalf("written out, it no longer parses: %v\n%s", err, out)
		}
		if d := cmp.Diff(m, m2, cmpopts.EquateEmpty()); d != "" {
			t.Fatalf("round trip changed it (-first +second):\n%s", d)
		}
	})
}
