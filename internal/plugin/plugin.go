// Package plugin owns plugins: MCP servers described by a
// fluffy-plugin.yaml manifest, their identity (a digest of their files,
// an optional signature), their lifecycle and the tool descriptions
// pinned at install. It starts nothing itself (the wiring runs a plugin
// in a sandbox and registers its tools). docs/plugins.md is the plugin
// development guide.
package plugin

import (
	"github.com/fluffy-agent/fluffy/internal/units"
)

// APIVersion is the plugin API this fluffy offers; a manifest's
// requires.fluffy must name it.
const APIVersion = "1"

// ManifestName is the manifest's file name in a plugin's folder.
const ManifestName = "fluffy-plugin.yaml"

// Manifest is fluffy-plugin.yaml.
type Manifest struct {
	// Name is lower case [a-z0-9_]: its tools are mcp.<name>.<tool>.
	Name     string   `yaml:"name"`
	Version  string   `yaml:"version"`
	Requires Requires `yaml:"requires"`
	Run      Run      `yaml:"run"`
	Sandbox  Sandbox  `yaml:"sandbox"`
	// Network are the hosts the server may reach through the egress
	// proxy (host, host:port, or *.suffix); none when empty.
	Network []string `yaml:"network"`
	// Credentials are secret references the server's process gets.
	Credentials []Credential `yaml:"credentials"`
	// Capabilities are what it asks for: read-workspace,
	// write-changeset, network, secrets, messages.
	Capabilities []Capability `yaml:"capabilities"`
}

// Requires pins what the plugin was written against.
type Requires struct {
	Fluffy string   `yaml:"fluffy"`
	MCP    []string `yaml:"mcp"`
}

// Run says how the server starts: a command in the plugin's folder over
// stdio, or an image; Transport "stdio" (default) or "http" (streamable
// HTTP on a unix socket the sandbox exposes).
type Run struct {
	Command   []string `yaml:"command"`
	Env       []string `yaml:"env"`
	Image     string   `yaml:"image"`
	Transport string   `yaml:"transport"`
}

// Sandbox is what the server process is contained in.
type Sandbox struct {
	Template string     `yaml:"template"`
	Runtime  string     `yaml:"runtime"`
	Memory   units.Size `yaml:"memory"`
	PIDs     int        `yaml:"pids"`
	// Output caps a tool result's size before sanitizing.
	Output units.Size `yaml:"output"`
}

// Credential is a secret the server's process gets (internal/secret).
type Credential struct {
	Ref  string   `yaml:"ref"`
	As   string   `yaml:"as"`
	Name string   `yaml:"name"`
	Bind []string `yaml:"bind"`
	// TLS lets the egress proxy terminate HTTPS to Bind to swap a proxy
	// credential in (secret.Use's TLS); only with as proxy.
	TLS bool `yaml:"tls,omitempty"`
}

// Capability is one thing a plugin asks to be allowed.
type Capability string

// The capabilities.
const (
	CapReadWorkspace  Capability = "read-workspace"
	CapWriteChangeSet Capability = "write-changeset"
	CapNetwork        Capability = "network"
	CapSecrets        Capability = "secrets"
	CapMessages       Capability = "messages"
)

// State is where a plugin is in its lifecycle.
type State string

// The lifecycle: discovered → verified → installed → enabled → running
// → stopped / failed; disabled when the person (or repeated crashes, or a
// changed digest) turns it off.
const (
	Discovered State = "discovered"
	Verified   State = "verified"
	Installed  State = "installed"
	Enabled    State = "enabled"
	Running    State = "running"
	Stopped    State = "stopped"
	Failed     State = "failed"
	Disabled   State = "disabled"
)

// ToolPin is a tool's identity as approved: a change of any of these
// after install disables the tool until the person re-approves.
type ToolPin struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Schema is the input schema's canonical JSON.
	Schema string `json:"schema"`
	// Annotations are the MCP hints as the server gave them.
	Annotations map[string]bool `json:"annotations,omitempty"`
}
