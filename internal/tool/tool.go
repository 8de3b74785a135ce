package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/fluffy-agent/fluffy/internal/operation"
)

// Class is where a tool's calls execute.
type Class string

// The execution classes.
const (
	// FastPath tools are read-only and run inside the kernel.
	FastPath Class = "fast"
	// Sandbox tools run in an L2 sandbox made from a named template.
	Sandbox Class = "sandbox"
	// Kernel tools write, inside the kernel, into the session's change
	// set only (fs.write, fs.edit): never the real tree, which changes
	// only when a person applies the change set.
	Kernel Class = "kernel"
	// Plugin tools run in a plugin's server, a long-lived process in its
	// own L2 sandbox (docs/plugins.md), reached through Run (an MCP
	// call): any action, never in the kernel's address space.
	Plugin Class = "plugin"
)

// Command is what a sandbox tool asks its sandbox to run.
type Command struct {
	Argv []string
	// Dir is the working directory inside the sandbox; "" means the
	// workspace.
	Dir string
	// Env is added to the router's base environment (KEY=value).
	Env []string
	// Timeout bounds the wall time; 0 means the router's default.
	Timeout time.Duration
	// Collect turns the captured output into the tool's result; nil
	// means stdout then stderr, IsError on a non-zero exit.
	Collect func(out CommandOutput) (Result, error)
	// Confine, when set, is the command's whole sandbox (Confinement).
	Confine *Confinement
}

// CommandOutput is what a sandboxed command produced.
type CommandOutput struct {
	Stdout, Stderr []byte
	ExitCode       int
	// Limits names the limits the command hit ("time", "memory", ...).
	Limits []string
}

// Execution says where a tool runs.
type Execution struct {
	Class Class `json:"class"`
	// Template names the sandbox template; required for Sandbox, empty
	// for FastPath.
	Template string `json:"template,omitempty"`
}

// Capability tags. Tools may add their own (lower case, [a-z0-9._-]).
const (
	TagReads       = "reads"
	TagWrites      = "writes"
	TagExec        = "exec"
	TagNet         = "net"
	TagSecrets     = "secrets"
	TagDestructive = "destructive"
	// TagUntrustedOutput on a call's operation (added by its Normalize)
	// makes that call's result untrusted data, as UntrustedOutput does
	// for every call of a tool: for a tool only some of whose calls read
	// what no principal wrote (a skill's run that reaches the network).
	TagUntrustedOutput = "untrusted-output"
	// TagImage on a call's operation (added by its Normalize) says its
	// command runs in a container image of its own
	// (Confinement.Image): the router runs it on the session's image
	// runtime when the session's own starts no images, and records
	// that runtime with the execution.
	TagImage = "image"
)

// tagsThatWrite may never be carried by a fast-path tool.
var tagsThatWrite = []string{TagWrites, TagExec, TagNet, TagSecrets, TagDestructive}

var (
	nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$`)
	tagRE  = regexp.MustCompile(`^[a-z][a-z0-9._-]*$`)
)

// ErrDefinition: a tool definition breaks a rule (bad name, a fast-path
// tool that writes, a schema that cannot be derived, ...). Programming
// errors, reported at registration.
var ErrDefinition = errors.New("tool: invalid definition")

// Result is what a tool's execution produced, before sanitizing.
type Result struct {
	// Output is the raw output shown to the model after sanitizing.
	Output []byte
	// IsError marks a failed execution the model should see as such
	// (a command's non-zero exit, a missing file).
	IsError bool
	// Data is structured output for the kernel (test results for the TDD
	// machine); never shown to the model as is.
	Data any
}

// Definition declares a tool whose input is In, a struct whose JSON form
// is the tool's arguments. Fields without omitempty/omitzero are
// required; a `jsonschema:"..."` tag is the field's description for the
// model.
type Definition[In any] struct {
	Name        string // dotted lower case: fs.read, shell.exec
	Description string // written for models: what it does, when to use it
	Action      operation.Action
	Tags        []string
	Execution   Execution
	// UntrustedOutput marks a tool whose results carry data no principal
	// wrote (a web page, an MCP server's answer): the router marks a
	// session that reads such a result as untrusted, and policy then
	// holds what it would carry further (docs/provenance.md). False for
	// the built-in workspace tools.
	UntrustedOutput bool
	// Refine, optional, adds constraints the Go type cannot express
	// (enums, bounds, patterns) to the inferred schema.
	Refine func(*jsonschema.Schema) error
	// Schema, optional, replaces the inferred schema: for tools that come
	// with one (MCP servers), whose In is then map[string]any.
	Schema *jsonschema.Schema
	// Normalize fills op's resources (Paths through r, Argv, Hosts, Size)
	// from the decoded input; required. op already carries the tool, the
	// action, the tags and the session.
	Normalize func(ctx context.Context, r *Resolver, in *In, op *operation.Operation) error
	// Run executes a call on the fast path or in the kernel, or hands it
	// to a plugin's server; required for FastPath, Kernel and Plugin
	// tools, nil for Sandbox tools (the router hands those to the
	// sandbox).
	Run func(ctx context.Context, in *In) (Result, error)
	// Command builds a Sandbox tool's command; required for Sandbox
	// tools, nil for the others.
	Command func(ctx context.Context, in *In) (Command, error)
	// Preview, optional, is what a person asked to approve a call sees
	// of it (the diff a write would make); the router shows the
	// operation's action and paths for a tool without one, or when
	// Preview returns "".
	Preview func(ctx context.Context, in *In) string
}

// Tool is a registered tool with its input type erased. Immutable, safe
// for concurrent use.
type Tool struct {
	name, description string
	action            operation.Action
	tags              []string
	exec              Execution
	untrustedOutput   bool
	schema            *jsonschema.Schema
	schemaJSON        json.RawMessage
	resolved          *jsonschema.Resolved
	// closed: valid arguments cannot hold unknown members (closedSchema).
	closed bool
	// simple: the schema's fast validity check (nil: the library only).
	simple    *simpleSchema
	inType    reflect.Type
	normalize func(context.Context, *Resolver, any, *operation.Operation) error
	run       func(context.Context, any) (Result, error)
	command   func(context.Context, any) (Command, error)
	preview   func(context.Context, any) string
}

// New checks a definition and derives its schema.
func New[In any](d Definition[In]) (*Tool, error) {
	bad := func(format string, args ...any) (*Tool, error) {
		return nil, fmt.Errorf("%w %q: %s", ErrDefinition, d.Name, fmt.Sprintf(format, args...))
	}
	if !nameRE.MatchString(d.Name) || len(d.Name) > 64 {
		return bad("name must be dotted lower case, at most 64 characters")
	}
	if d.Description == "" {
		return bad("description is required")
	}
	if !d.Action.Valid() {
		return bad("unknown action %q", d.Action)
	}
	for _, t := range d.Tags {
		if !tagRE.MatchString(t) {
			return bad("bad tag %q", t)
		}
	}
	if d.Normalize == nil {
		return bad("Normalize is required")
	}
	switch d.Execution.Class {
	case FastPath:
		if d.Action != operation.Read {
			return bad("a fast-path tool must be read-only (action read), not %s", d.Action)
		}
		for _, t := range tagsThatWrite {
			if slices.Contains(d.Tags, t) {
				return bad("a fast-path tool cannot carry the %q tag", t)
			}
		}
		if d.Execution.Template != "" {
			return bad("a fast-path tool has no sandbox template")
		}
		if d.Run == nil {
			return bad("a fast-path tool needs Run")
		}
		if d.Command != nil {
			return bad("a fast-path tool has no sandbox command")
		}
	case Sandbox:
		if d.Execution.Template == "" {
			return bad("a sandbox tool needs a template name")
		}
		if d.Run != nil {
			return bad("a sandbox tool runs in its sandbox, not through Run")
		}
		if d.Command == nil {
			return bad("a sandbox tool needs Command")
		}
	case Kernel:
		if d.Action != operation.Write {
			return bad("a kernel tool writes into the change set (action write), not %s", d.Action)
		}
		if d.Execution.Template != "" {
			return bad("a kernel tool has no sandbox template")
		}
		if d.Run == nil {
			return bad("a kernel tool needs Run")
		}
	case Plugin:
		if d.Execution.Template != "" {
			return bad("a plugin tool runs in its server's sandbox, not a template's")
		}
		if d.Run == nil {
			return bad("a plugin tool needs Run")
		}
		if d.Command != nil {
			return bad("a plugin tool has no sandbox command")
		}
	default:
		return bad("unknown execution class %q", d.Execution.Class)
	}
	inType := reflect.TypeFor[In]()
	var schema *jsonschema.Schema
	switch {
	case d.Schema != nil && inType == reflect.TypeFor[map[string]any]():
		schema = d.Schema.CloneSchemas()
		if schema.Type != "object" {
			return bad("a given schema must be of type object")
		}
	case d.Schema != nil:
		return bad("a given schema needs In = map[string]any, not %s", inType)
	case inType.Kind() != reflect.Struct:
		return bad("input type %s must be a struct", inType)
	default:
		var err error
		if schema, err = jsonschema.For[In](nil); err != nil {
			return bad("derive schema: %v", err)
		}
	}
	if d.Refine != nil {
		if err := d.Refine(schema); err != nil {
			return bad("refine schema: %v", err)
		}
	}
	resolved, err := schema.Resolve(nil)
	if err != nil {
		return bad("resolve schema: %v", err)
	}
	sj, err := json.Marshal(schema)
	if err != nil {
		return bad("marshal schema: %v", err)
	}
	t := &Tool{
		name: d.Name, description: d.Description, action: d.Action,
		tags: slices.Clone(d.Tags), exec: d.Execution, untrustedOutput: d.UntrustedOutput,
		schema: schema, schemaJSON: sj, resolved: resolved, inType: inType,
		closed: inType.Kind() == reflect.Struct && closedSchema(inType, schema),
		simple: compileSimple(schema),
		normalize: func(ctx context.Context, r *Resolver, in any, op *operation.Operation) error {
			return d.Normalize(ctx, r, in.(*In), op)
		},
	}
	if d.Run != nil {
		t.run = func(ctx context.Context, in any) (Result, error) { return d.Run(ctx, in.(*In)) }
	}
	if d.Command != nil {
		t.command = func(ctx context.Context, in any) (Command, error) { return d.Command(ctx, in.(*In)) }
	}
	if d.Preview != nil {
		t.preview = func(ctx context.Context, in any) string { return d.Preview(ctx, in.(*In)) }
	}
	return t, nil
}

// Preview is what a person asked to approve a call with args sees of it,
// "" when the tool has no preview of its own.
func (t *Tool) Preview(ctx context.Context, args Args) string {
	if t.preview == nil || args.tool != t {
		return ""
	}
	return t.preview(ctx, args.in)
}

// Name returns the registry name (fs.read).
func (t *Tool) Name() string { return t.name }

// Description returns the model-facing description.
func (t *Tool) Description() string { return t.description }

// Action returns the coarse effect of the tool's calls.
func (t *Tool) Action() operation.Action { return t.action }

// Tags returns the capability tags (a copy).
func (t *Tool) Tags() []string { return slices.Clone(t.tags) }

// Execution returns where the tool's calls run.
func (t *Tool) Execution() Execution { return t.exec }

// UntrustedOutput reports whether the tool's results are untrusted data
// (Definition.UntrustedOutput).
func (t *Tool) UntrustedOutput() bool { return t.untrustedOutput }

// InputSchema returns the input schema as JSON, for model providers and
// MCP.
func (t *Tool) InputSchema() json.RawMessage { return slices.Clone(t.schemaJSON) }

// Args is a call's decoded, validated input.
type Args struct {
	tool *Tool
	in   any // *In
}

// Value returns the decoded input (a pointer to the definition's In).
func (a Args) Value() any { return a.in }

// Normalize builds the call's Operation for the gates.
func (t *Tool) Normalize(ctx context.Context, r *Resolver, args Args, sess operation.Session) (*operation.Operation, error) {
	if args.tool != t {
		return nil, fmt.Errorf("tool: arguments decoded for %s given to %s", args.tool.name, t.name)
	}
	op := &operation.Operation{Tool: t.name, Action: t.action, Tags: slices.Clone(t.tags), Session: sess}
	if err := t.normalize(ctx, r, args.in, op); err != nil {
		return nil, err
	}
	return op, nil
}

// Run executes a fast-path, kernel or plugin call. The router calls it only
// after every gate allowed the call.
func (t *Tool) Run(ctx context.Context, args Args) (Result, error) {
	if t.run == nil {
		return Result{}, fmt.Errorf("tool: %s runs in a sandbox (template %s), not on the fast path", t.name, t.exec.Template)
	}
	if args.tool != t {
		return Result{}, fmt.Errorf("tool: arguments decoded for %s given to %s", args.tool.name, t.name)
	}
	return t.run(ctx, args.in)
}

// Command builds a sandbox call's command. The router calls it only after
// every gate allowed the call.
func (t *Tool) Command(ctx context.Context, args Args) (Command, error) {
	if t.command == nil {
		return Command{}, fmt.Errorf("tool: %s does not run in a sandbox", t.name)
	}
	if args.tool != t {
		return Command{}, fmt.Errorf("tool: arguments decoded for %s given to %s", args.tool.name, t.name)
	}
	return t.command(ctx, args.in)
}
