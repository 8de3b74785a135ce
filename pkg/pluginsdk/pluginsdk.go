// Package pluginsdk is the small kit for writing a fluffy plugin in Go:
// an MCP server, on the official MCP Go SDK, that serves typed tools over
// its standard input and output (or streamable HTTP on a unix socket),
// and the manifest (fluffy-plugin.yaml)
// that tells fluffy how to run it. fluffy runs the server in a sandbox
// and offers its tools to the model as mcp.<plugin>.<tool>;
// docs/plugins.md is the guide, examples/plugins/template a layout to
// start from. Package plugintest drives a Server in a test.
package pluginsdk

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.yaml.in/yaml/v3"

	"github.com/fluffy-agent/fluffy/internal/plugin"
)

// Manifest is fluffy-plugin.yaml (docs/plugins.md has its reference).
type Manifest = plugin.Manifest

// Capability is one thing a plugin asks to be allowed.
type Capability = plugin.Capability

// The capabilities a manifest may ask for.
const (
	ReadWorkspace  = plugin.CapReadWorkspace
	WriteChangeSet = plugin.CapWriteChangeSet
	Network        = plugin.CapNetwork
	Secrets        = plugin.CapSecrets
	Messages       = plugin.CapMessages
)

// APIVersion is the fluffy plugin API this SDK writes against.
const APIVersion = plugin.APIVersion

// ManifestName is the manifest's file name in a plugin's folder.
const ManifestName = plugin.ManifestName

// Server is a plugin's MCP server.
type Server struct {
	s *mcp.Server
}

// New returns a server named name (the plugin's name) at version.
func New(name, version string) *Server {
	return &Server{s: mcp.NewServer(&mcp.Implementation{Name: name, Version: version}, nil)}
}

// MCP returns the underlying MCP server, for what this package does not
// wrap (resources, prompts).
func (s *Server) MCP() *mcp.Server { return s.s }

// ToolOption sets a tool's MCP annotations. fluffy treats them as hints
// that can only add caution: ReadOnly does not let a call skip a gate.
type ToolOption func(*mcp.ToolAnnotations)

// ReadOnly says the tool changes nothing.
func ReadOnly() ToolOption { return func(a *mcp.ToolAnnotations) { a.ReadOnlyHint = true } }

// Destructive says whether the tool may destroy data (the protocol's
// default for a tool that is not read-only is true).
func Destructive(v bool) ToolOption { return func(a *mcp.ToolAnnotations) { a.DestructiveHint = &v } }

// OpenWorld says whether the tool reaches things outside its own domain
// (the network; default true).
func OpenWorld(v bool) ToolOption { return func(a *mcp.ToolAnnotations) { a.OpenWorldHint = &v } }

// Tool adds a tool whose input is In (a struct: its JSON form is the
// arguments, a `jsonschema:"..."` tag describes a field) and whose
// handler returns Out, sent as JSON text (a string is sent as is). An
// error from the handler is a failed call the model sees.
func Tool[In, Out any](s *Server, name, description string, handler func(ctx context.Context, in In) (Out, error), opts ...ToolOption) {
	t := &mcp.Tool{Name: name, Description: description}
	if len(opts) > 0 {
		t.Annotations = &mcp.ToolAnnotations{}
		for _, o := range opts {
			o(t.Annotations)
		}
	}
	mcp.AddTool(s.s, t, func(ctx context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
		out, err := handler(ctx, in)
		if err != nil {
			return nil, nil, err
		}
		if str, ok := any(out).(string); ok {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: str}}}, nil, nil
		}
		return nil, out, nil
	})
}

// Serve serves the tools over standard input and output until the client
// (fluffy) ends the session or ctx ends.
func (s *Server) Serve(ctx context.Context) error {
	return s.s.Run(ctx, &mcp.StdioTransport{})
}

// SocketEnv names the variable fluffy sets for a plugin whose manifest
// says run.transport: http: the path of the unix socket it is to listen
// on, in a directory its sandbox shares with fluffy.
const SocketEnv = "FLUFFY_MCP_SOCKET"

// ServeUnix serves the tools as streamable HTTP on a unix socket at path
// until ctx ends. Each connection that initializes gets a session of
// its own.
func (s *Server) ServeUnix(ctx context.Context, path string) error {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "unix", path)
	if err != nil {
		return fmt.Errorf("pluginsdk: listen: %w", err)
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.s }, nil)
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = hs.Close()
	}()
	if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("pluginsdk: serve: %w", err)
	}
	return nil
}

// Main serves s and exits: a plugin's main is pluginsdk.Main(server).
// It serves over stdio, or over streamable HTTP on the unix socket
// SocketEnv names when fluffy sets it (run.transport: http).
// Diagnostics go to standard error, which fluffy keeps in the plugin's
// log.
func Main(s *Server) {
	serve := s.Serve
	if p := os.Getenv(SocketEnv); p != "" {
		serve = func(ctx context.Context) error { return s.ServeUnix(ctx, p) }
	}
	if err := serve(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "plugin:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// WriteManifest writes m as dir/fluffy-plugin.yaml, filling
// requires.fluffy with APIVersion when empty.
func WriteManifest(dir string, m Manifest) error {
	if m.Requires.Fluffy == "" {
		m.Requires.Fluffy = APIVersion
	}
	b, err := yaml.Marshal(m)
	if err != nil {
		return fmt.Errorf("pluginsdk: manifest: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestName), b, 0o644); err != nil {
		return fmt.Errorf("pluginsdk: manifest: %w", err)
	}
	return nil
}

// ReadManifest reads dir/fluffy-plugin.yaml, refusing members it does
// not know (a misspelt key would otherwise be silently ignored).
func ReadManifest(dir string) (Manifest, error) {
	var m Manifest
	f, err := os.Open(filepath.Join(dir, ManifestName))
	if err != nil {
		return m, fmt.Errorf("pluginsdk: manifest: %w", err)
	}
	defer f.Close()
	d := yaml.NewDecoder(f)
	d.KnownFields(true)
	if err := d.Decode(&m); err != nil {
		return m, fmt.Errorf("pluginsdk: manifest %s: %w", filepath.Join(dir, ManifestName), err)
	}
	return m, nil
}
