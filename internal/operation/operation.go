// Package operation owns the normalized Operation: the one description of
// "what the agent is trying to do" that every gate sees (the TDD state gate,
// the policy engine, approvals, the audit log). The tool router builds it
// from a tool call; no gate ever looks at raw tool arguments.
//
// The package is data only and imports nothing of fluffy's, so that policy,
// tdd, approval and tool can all depend on it without depending on each
// other.
package operation

import "strings"

// Action is the coarse kind of effect an operation has.
type Action string

// The actions. Every operation has exactly one.
const (
	Read    Action = "read"
	Write   Action = "write"
	Exec    Action = "exec"
	Net     Action = "net"
	Secret  Action = "secret"
	Message Action = "message"
)

// Actions lists every valid action, in a stable order.
func Actions() []Action { return []Action{Read, Write, Exec, Net, Secret, Message} }

// Valid reports whether a is one of the known actions.
func (a Action) Valid() bool {
	for _, x := range Actions() {
		if a == x {
			return true
		}
	}
	return false
}

// GuessAction is the action a tool's operations most likely have, from
// the tool's name alone ("fs.read" reads, "fs.*" writes, "shell.*"
// executes...), or "" when the name says nothing. It serves where a
// person types an operation to explain or check (`fluffy policy check`,
// the web console's policy page) without its arguments; the router never
// uses it: a real call's action is what its tool declares.
func GuessAction(tool string) Action {
	prefix, _, _ := strings.Cut(tool, ".")
	switch {
	case tool == "fs.read" || tool == "fs.list" || tool == "fs.grep":
		return Read
	case prefix == "fs":
		return Write
	case prefix == "shell" || prefix == "exec":
		return Exec
	case prefix == "net" || prefix == "http" || prefix == "web":
		return Net
	case prefix == "secret":
		return Secret
	case prefix == "message" || prefix == "chat":
		return Message
	}
	return ""
}

// Path is a canonical resource path: absolute, cleaned, symlinks resolved
// (as far as they exist), with the inside-workspace flag computed from the
// resolved form.
type Path struct {
	// Abs is the canonical absolute path.
	Abs string `json:"abs"`
	// Raw is the path as the model wrote it, for messages only; gates
	// must never decide on it.
	Raw string `json:"raw,omitempty"`
	// InWorkspace is true when Abs is the workspace root or below it.
	InWorkspace bool `json:"in_workspace"`
}

// Host is a network destination.
type Host struct {
	Name string `json:"name"`
	Port int    `json:"port,omitempty"`
}

// Command is one simple command that a command line would run, after
// parsing and unwrapping (sh -c, env, xargs, ...). Argv[0] is the program
// as written.
type Command struct {
	Argv []string `json:"argv"`
	// Dynamic is set when part of the command cannot be known statically
	// (a variable or substitution in command position, eval, source):
	// such a command is never allowed without a person.
	Dynamic bool `json:"dynamic,omitempty"`
	// Unresolved says why Dynamic is set, for messages.
	Unresolved string `json:"unresolved,omitempty"`
	// Env holds the NAME=value assignments that apply to this command
	// only (a shell prefix such as X=1 cmd, or the env wrapper).
	Env []string `json:"env,omitempty"`
	// Writes are the targets of the command's output redirections
	// (>, >>, &>, ...): files the command line writes. The shell parser
	// fills them as written; normalization makes them canonical absolute
	// paths.
	Writes []string `json:"writes,omitempty"`
	// Dir is the directory the command runs in when an earlier cd of the
	// same command line changed it: relative to the line's starting
	// directory, or absolute; "" when unchanged. Writes already include
	// it; relative arguments are relative to it.
	Dir string `json:"dir,omitempty"`
	// Wrapper is set when this entry is a wrapper's own part (env X=1,
	// timeout 10, sh -c, sudo -u u, ...): the wrapped command is another
	// entry of the same list.
	Wrapper bool `json:"wrapper,omitempty"`
}

// Session is what the gates know of the session making the call.
type Session struct {
	ID string `json:"id"`
	// Mode is the TDD mode: strict, explore or debug.
	Mode string `json:"mode,omitempty"`
	// State is the TDD machine's current state.
	State string `json:"state,omitempty"`
	// Workspace is the canonical absolute workspace root, "" for none.
	Workspace string `json:"workspace,omitempty"`
	// Untrusted is set once the session has read untrusted data: an
	// inbound message no principal wrote, or the result of a tool whose
	// output is untrusted (docs/provenance.md). It is never cleared.
	Untrusted bool `json:"untrusted,omitempty"`
	// UntrustedSource says what first made the session untrusted
	// ("webhook github push", "tool web.fetch"), for the person asked.
	UntrustedSource string `json:"untrusted_source,omitempty"`
}

// Operation is a normalized tool call.
type Operation struct {
	// Tool is the registry name of the tool (fs.write, shell.exec, ...).
	Tool   string `json:"tool"`
	Action Action `json:"action"`
	// Paths are the resources read or written, canonical.
	Paths []Path `json:"paths,omitempty"`
	// Argv is the command as given, already split; never a joined string.
	Argv []string `json:"argv,omitempty"`
	// CommandLine is the shell text as the model wrote it, when the tool
	// takes one; Commands is what parsing it yields.
	CommandLine string    `json:"command_line,omitempty"`
	Commands    []Command `json:"commands,omitempty"`
	Hosts       []Host    `json:"hosts,omitempty"`
	// Size is the number of bytes written or sent, when known.
	Size    int64   `json:"size,omitempty"`
	Session Session `json:"session"`
	// Tags are the tool's capability tags: writes, net, secrets,
	// destructive, ...
	Tags []string `json:"tags,omitempty"`
	// Tokens are capability tokens presented with the call.
	Tokens []string `json:"tokens,omitempty"`
	// ArgsSHA256 is the hex SHA-256 of the tool's decoded arguments,
	// canonically encoded, for tools that write or run (the router fills
	// it): a plan step is approved with exactly its arguments, so the same
	// path written with other content is another operation.
	ArgsSHA256 string `json:"args_sha256,omitempty"`
	// Inputs are the files whose content a command runs or builds from
	// (scripts, executables and build files in the workspace, as the
	// sandbox would see them), sorted by path; the router fills them. An
	// approval given for one content does not cover another.
	Inputs []Input `json:"inputs,omitempty"`
	// Unbound says why the inputs could not all be read (too many, too
	// large, unreadable): such an operation can still be approved each
	// time it runs, but no approval carries over to a later call.
	Unbound string `json:"unbound,omitempty"`
	// AgentWritten lists canonical absolute paths the agent has written
	// in this session (its change set); policy tells apart commands that
	// run one of them (a script, a Makefile, a package.json).
	AgentWritten []string `json:"agent_written,omitempty"`
}

// Input is one file an operation runs or builds from, and its content.
type Input struct {
	// Path is the canonical absolute path.
	Path string `json:"path"`
	// SHA256 is the hex digest of the file's content.
	SHA256 string `json:"sha256"`
}

// HasTag reports whether the operation's tool carries tag.
func (op *Operation) HasTag(tag string) bool {
	for _, t := range op.Tags {
		if t == tag {
			return true
		}
	}
	return false
}
