package main

import (
	"testing"

	"github.com/fluffy-agent/fluffy/pkg/pluginsdk"
	"github.com/fluffy-agent/fluffy/pkg/pluginsdk/plugintest"
)

func TestHello(t *testing.T) {
	c := plugintest.Connect(t, newServer())
	if out, failed := c.Call("hello", map[string]any{"name": "ana"}); failed || out != "hello, ana" {
		t.Fatalf("hello: %q (failed %v)", out, failed)
	}
}

// TestManifest: the manifest reads, names this plugin and asks for
// nothing beyond what the tools need.
func TestManifest(t *testing.T) {
	m, err := pluginsdk.ReadManifest(".")
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "template" || len(m.Capabilities) != 0 || len(m.Network) != 0 {
		t.Fatalf("manifest %+v", m)
	}
}
