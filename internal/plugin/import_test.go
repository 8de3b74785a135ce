package plugin

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/import")

// TestImportGolden turns each client configuration of testdata/import
// into manifests and compares them with its .golden file; -update
// rewrites them. No value of a secret may appear in a manifest.
func TestImportGolden(t *testing.T) {
	files, _ := filepath.Glob("testdata/import/*")
	secrets := []string{"ghp_aaaa", "hunter2", "sk-live-", "sk_test_51Habc", "BSAabcdef", "Zm9vYmFy"}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".golden") {
			continue
		}
		n++
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			ims, err := ParseClientConfig(data, f)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			for _, im := range ims {
				fmt.Fprintf(&b, "=== %s\n", im.Server)
				if im.Skipped != "" {
					fmt.Fprintf(&b, "skipped: %s\n", im.Skipped)
					continue
				}
				for _, n := range im.Notes {
					fmt.Fprintf(&b, "note: %s\n", n)
				}
				b.Write(im.YAML)
			}
			got := b.String()
			for _, s := range secrets {
				if strings.Contains(got, s) {
					t.Errorf("a secret's value (%s...) is in a generated manifest", s)
				}
			}
			golden := f + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs (run with -update to accept):\n%s", golden, got)
			}
		})
	}
	if n != 5 {
		t.Fatalf("%d configurations in testdata/import, want 5", n)
	}
}

func TestPluginName(t *testing.T) {
	for in, want := range map[string]string{
		"GitHub": "github", "brave-search": "brave_search", "2fa-server": "mcp_2fa_server",
		"--": "mcp_", "a.b/c": "a_b_c", strings.Repeat("x", 50): strings.Repeat("x", 40),
	} {
		if got := PluginName(in); got != want {
			t.Errorf("PluginName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestIsSecret(t *testing.T) {
	for _, c := range []struct {
		name, value string
		want        bool
	}{
		{"LOG_LEVEL", "debug", false},
		{"HOME_DIR", "/home/me", false},
		{"GITHUB_TOOLSETS", "repos,issues", false},
		{"PGHOST", "localhost", false},
		{"OPENAI_API_KEY", "x", true},
		{"GH", "ghp_0123456789", true},
		{"DATABASE_URL", "postgres://u:pw@h/db", true},
		{"X", "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA==", true},
		{"X", "abcdefghijklmnopqrstuvwxyz", false},
		{"EMPTY_TOKEN", "", false},
	} {
		if got := isSecret(c.name, c.value); got != c.want {
			t.Errorf("isSecret(%s=%s) = %v", c.name, c.value, got)
		}
	}
}

// FuzzParseClientConfig: no configuration panics; every manifest
// generated parses as the one returned; no value taken for a secret
// reaches a manifest.
func FuzzParseClientConfig(f *testing.F) {
	for _, name := range []string{"claude_desktop_config.json", "mcp.json", "claude.json", "cursor_mcp.json"} {
		data, err := os.ReadFile(filepath.Join("testdata/import", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"mcpServers":{"x":{"command":"a","env":{"API_TOKEN":"verysecretvalue"}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ims, err := ParseClientConfig(data, "c.json")
		if err != nil {
			return
		}
		var c struct {
			MCPServers map[string]server `json:"mcpServers"`
		}
		_ = json.Unmarshal(data, &c)
		for _, im := range ims {
			if im.Skipped != "" {
				continue
			}
			m, err := ParseManifest(im.YAML, "f.yaml")
			if err != nil {
				t.Fatalf("generated manifest does not parse: %v\n%s", err, im.YAML)
			}
			if d := cmp.Diff(im.Manifest, m, cmpopts.EquateEmpty()); d != "" {
				t.Fatalf("the YAML is not the manifest:\n%s", d)
			}
			for _, s := range c.MCPServers {
				for k, v := range s.Env {
					if len(v) >= 8 && isSecret(k, v) && strings.Contains(string(im.YAML), v) {
						t.Fatalf("secret %s=%q is in the manifest:\n%s", k, v, im.YAML)
					}
				}
			}
		}
	})
}
