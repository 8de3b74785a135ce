// Package skill owns skills: folders that teach the agent a capability
// (a SKILL.md in the Agent Skills format, an optional skill.yaml manifest
// with the security facts, scripts, an optional Dockerfile). It finds
// them, parses them, and says what each asks for; it runs no skill's
// code (the wiring hands a skill's entrypoints to the router and the
// sandbox). It also installs skills from elsewhere: copies or clones them
// (running git), scans them for supply-chain tricks, pins them by a
// digest, verifies their SSH signatures (running ssh-keygen), and keeps
// what the person granted them; and it says how a manifest change widens
// a skill. docs/skills.md is the user's reference, installing
// included.
package skill

import (
	"github.com/fluffy-agent/fluffy/internal/units"
)

// Scope is where a skill was found. Skills of a narrower scope can only
// tighten what a wider one allows, as with policy.
type Scope string

// The scopes, widest first.
const (
	// ScopeAssistant: <assistant workspace>/skills/.
	ScopeAssistant Scope = "assistant"
	// ScopeUser: ~/.config/fluffy/skills/.
	ScopeUser Scope = "user"
	// ScopeProject: a repository's .fluffy/skills/.
	ScopeProject Scope = "project"
)

// Skill is one skill as discovered: its SKILL.md front matter and body,
// its manifest (zero when the folder has none) and where it lives.
type Skill struct {
	// Name is the front matter's name: lower case, [a-z0-9-], unique
	// among the skills a session sees.
	Name string
	// Description is the one line the system prompt carries.
	Description string
	// Body is SKILL.md after its front matter: what skill.load returns.
	Body string
	// Dir is the skill's folder (absolute, symlinks resolved).
	Dir   string
	Scope Scope
	// Manifest is skill.yaml (or carapace.yaml); zero when absent.
	Manifest Manifest
}

// Manifest is a skill's security facts: what it may reach, hold and run.
// Everything not stated is refused: no credentials, no network.
type Manifest struct {
	Credentials []Credential `yaml:"credentials"`
	// Network are the hosts its runs may reach through the egress proxy
	// (host, host:port, or *.suffix).
	Network []string `yaml:"network"`
	// Classification are hints for policy ("sends-messages",
	// "spends-money", ...): each becomes a tag of the run's operation,
	// so rules can match them. They can only add caution.
	Classification []string `yaml:"classification"`
	Sandbox        Sandbox  `yaml:"sandbox"`
	Image          Image    `yaml:"image"`
	// Entrypoints are the scripts the agent may run, by name.
	Entrypoints []Entrypoint `yaml:"entrypoints"`
}

// Credential is a secret the skill's runs get, declared as the
// credential broker takes declarations (internal/secret.Use).
type Credential struct {
	// Ref is a secret reference: secret://age/NAME, env:NAME, ...
	Ref string `yaml:"ref"`
	// As is how it enters: env, file, stdin or proxy.
	As string `yaml:"as"`
	// Name is the environment variable (env, proxy) or file name (file).
	Name string `yaml:"name"`
	// Bind are the hosts the proxy swaps a placeholder for (proxy).
	Bind []string `yaml:"bind"`
}

// Sandbox is what a skill's runs are contained in.
type Sandbox struct {
	// Template names a sandbox template; "" is the skill default.
	Template string `yaml:"template"`
	// Runtime is "native" or "docker"; "" lets the session decide (a
	// skill with an image always runs in a container).
	Runtime string         `yaml:"runtime"`
	Memory  units.Size     `yaml:"memory"`
	Timeout units.Duration `yaml:"timeout"`
	PIDs    int            `yaml:"pids"`
}

// Image is the environment a skill's runs get.
type Image struct {
	// Dockerfile is a path inside the skill's folder; "" means the
	// default image.
	Dockerfile string `yaml:"dockerfile"`
}

// Entrypoint is a script the agent may run with skill.run.
type Entrypoint struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	// Command is the argv, its first word a path inside the skill's
	// folder (as mounted: /skills/<name>/...) or a program of the image.
	Command []string `yaml:"command"`
	// Args is a JSON Schema (as YAML) for the run's arguments, passed to
	// the script as one JSON document on stdin; nil takes none.
	Args map[string]any `yaml:"args"`
}
