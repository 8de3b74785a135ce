// Package policy owns the policy engine: for every normalized operation it
// answers allow, approve (ask a person) or block, names the deciding rule and
// lists every rule that matched.
//
// Rules come from four places, evaluated in layers:
//
//   - built-in rules (compiled in, at most ten, not configurable): protected
//     files, writes outside the workspace, malformed or oversized input,
//     commands that cannot be resolved statically;
//   - the user's and the project's YAML files (match / except / when in CEL /
//     classify), plus Starlark extensions those files name;
//   - the default rule set, an embedded YAML file (default.yaml), consulted
//     for the parts of an operation no user or project rule matched;
//   - the configured default effect when nothing matched at all.
//
// An operation is split into atoms — one per path, host, simple command and
// redirection target — and each atom is decided on its own; the strictest
// atom decides the operation (block > approve > allow). Built-in rules take
// part in every atom and cannot be overridden. A capability token (see
// Tokens) can turn approve into allow for what it covers, never block.
//
// The engine is a pure function of its rules and the operation, except for
// three documented pieces of state: capability-token uses, the per-session
// classifier cache, and the clock. It does no I/O when deciding: Files
// reads the policy files, and the kernel (internal/wiring) watches them
// and compiles a new engine when they change.
//
// docs/policy.md is the reference, with the numbered normative cases that
// testdata/cases/*.txtar check.
package policy

import (
	"encoding/json"
	"fmt"
)

// Effect is what a decision lets happen. Effects are ordered by strictness:
// Allow < Approve < Block.
type Effect int

// The effects, from least to most strict.
const (
	Allow Effect = iota + 1
	Approve
	Block
)

// ParseEffect parses "allow", "approve" or "block".
func ParseEffect(s string) (Effect, error) {
	switch s {
	case "allow":
		return Allow, nil
	case "approve":
		return Approve, nil
	case "block":
		return Block, nil
	}
	return 0, fmt.Errorf("effect %q: use allow, approve or block", s)
}

func (e Effect) String() string {
	switch e {
	case Allow:
		return "allow"
	case Approve:
		return "approve"
	case Block:
		return "block"
	}
	return "invalid"
}

// MarshalText renders the effect name.
func (e Effect) MarshalText() ([]byte, error) { return []byte(e.String()), nil }

// Layer says where a rule comes from.
type Layer string

// The layers, in the order explain lists them.
const (
	LayerBuiltin   Layer = "builtin"
	LayerUser      Layer = "user"
	LayerProject   Layer = "project"
	LayerDefault   Layer = "default"
	LayerToken     Layer = "token"
	LayerFallback  Layer = "fallback"
	layerExtension Layer = "extension"
)

// Match is one rule that matched one atom of the operation.
type Match struct {
	Rule    string `json:"rule"`
	Effect  Effect `json:"effect"`
	Layer   Layer  `json:"layer"`
	Source  string `json:"source,omitempty"`
	Subject string `json:"subject"`
	Message string `json:"message,omitempty"`
	// Shadowed is set for a default-layer rule that matched an atom a
	// user or project rule had already decided: it did not count.
	Shadowed bool `json:"shadowed,omitempty"`
	// Error is set when evaluating the rule failed; the engine then
	// failed closed (see docs/policy.md).
	Error string `json:"error,omitempty"`
}

// Decision is the engine's answer for one operation.
type Decision struct {
	Effect Effect `json:"effect"`
	// Rule is the id of the deciding rule ("fallback" when no rule
	// matched, "token:<id>" when a capability token turned approve into
	// allow).
	Rule   string `json:"rule"`
	Layer  Layer  `json:"layer"`
	Source string `json:"source,omitempty"`
	// Reason is the deciding rule's message, safe to show to the model
	// and the user.
	Reason string `json:"reason"`
	// Subject names the part of the operation that decided (a path, a
	// command, a host).
	Subject string `json:"subject,omitempty"`
	// Matched lists every rule that matched, for explain.
	Matched []Match `json:"matched,omitempty"`
	// Token is the id of the capability token used, if any.
	Token string `json:"token,omitempty"`
	// Policy is the Digest of the engine that decided.
	Policy string `json:"policy,omitempty"`
}

func (d Decision) String() string {
	b, _ := json.Marshal(d)
	return string(b)
}
