package pluginsdk_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/units"
	"github.com/fluffy-agent/fluffy/pkg/pluginsdk"
	"github.com/fluffy-agent/fluffy/pkg/pluginsdk/plugintest"
)

func TestManifestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	m := pluginsdk.Manifest{Name: "demo", Version: "1.2.3", Network: []string{"api.example.org:443"},
		Capabilities: []pluginsdk.Capability{pluginsdk.ReadWorkspace, pluginsdk.Network}}
	m.Run.Command = []string{"./demo"}
	m.Sandbox.Memory = units.Size(64 << 20)
	if err := pluginsdk.WriteManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	got, err := pluginsdk.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "demo" || got.Requires.Fluffy != pluginsdk.APIVersion || got.Sandbox.Memory != m.Sandbox.Memory || len(got.Capabilities) != 2 {
		t.Fatalf("read back %+v", got)
	}
	// A misspelt key is an error, not ignored.
	if err := os.WriteFile(filepath.Join(dir, pluginsdk.ManifestName), []byte("name: demo\ncomand: [x]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := pluginsdk.ReadManifest(dir); err == nil || !strings.Contains(err.Error(), "comand") {
		t.Fatalf("unknown key: %v", err)
	}
}

func TestToolAnswers(t *testing.T) {
	type in struct {
		N int `json:"n"`
	}
	type out struct {
		Double int `json:"double"`
	}
	s := pluginsdk.New("demo", "1")
	pluginsdk.Tool(s, "double", "Double n.", func(_ context.Context, v in) (out, error) { return out{2 * v.N}, nil }, pluginsdk.ReadOnly())
	pluginsdk.Tool(s, "say", "Say it.", func(_ context.Context, v in) (string, error) { return "said", nil })
	pluginsdk.Tool(s, "fail", "Fail.", func(_ context.Context, v in) (string, error) { return "", errors.New("no") })
	c := plugintest.Connect(t, s)
	tools := c.Tools()
	if len(tools) != 3 {
		t.Fatalf("%d tools", len(tools))
	}
	for _, tl := range tools {
		if tl.Name == "double" && (tl.Annotations == nil || !tl.Annotations.ReadOnlyHint) {
			t.Errorf("double's annotations %+v", tl.Annotations)
		}
	}
	if got, failed := c.Call("double", map[string]any{"n": 21}); failed || got != `{"double":42}` {
		t.Errorf("double: %q %v", got, failed)
	}
	if got, failed := c.Call("say", map[string]any{"n": 1}); failed || got != "said" {
		t.Errorf("say: %q %v", got, failed)
	}
	if got, failed := c.Call("fail", map[string]any{"n": 1}); !failed || !strings.Contains(got, "no") {
		t.Errorf("fail: %q %v", got, failed)
	}
}
