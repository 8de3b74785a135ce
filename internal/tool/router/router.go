// Package router owns the gate pipeline every tool call takes ("The life
// of a tool call" in docs/DESIGN.md), in this order, every time: decode →
// normalize → state gate (the session's TDD machine) → policy gate →
// approval → execute (fast path in the kernel, kernel writes into the
// change set, or a sandbox from a named template) → sanitize → record →
// feed back (test results move the TDD machine).
//
// A Router implements agent.Tools, so the kernel plugs it into the agent
// loop. A refused call is not a runtime error: the model gets a tool result
// naming the gate, the rule, the reason and what it may do instead. Only a
// failure of the runtime itself (the audit log cannot be written, the TDD
// journal cannot be stored) is an error, and then the call is refused too:
// the router fails closed.
//
// Every decision and the execution are appended to the audit log before
// the result is returned. Calls that write, execute or are refused or
// approved are recorded as one entry per step (tool.request, gate.state,
// gate.policy, approval, exec.start, exec.end) and flushed to disk before
// the result is returned; a fast-path read allowed by both gates is
// recorded as one buffered tool.read entry carrying the same decisions,
// enqueued in the log's order before the result is returned (the budget
// of the fast path is 100 µs; an fsync is not).
//
// Read-only calls may run concurrently (CallAll runs the read-only calls
// of one model turn in parallel); a call that writes or executes waits for
// every call before it and runs alone.
package router

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/tdd"
	"github.com/fluffy-agent/fluffy/internal/tdd/testrun"
	"github.com/fluffy-agent/fluffy/internal/telemetry"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// StateGate is the session's TDD machine as the router uses it
// (*tdd.Session implements it). Errors from Wrote and TestRun are runtime
// failures: the journal could not store the transition.
type StateGate interface {
	Status() tdd.Status
	Allowed(op operation.Operation) tdd.Decision
	Wrote(ctx context.Context, op operation.Operation) (tdd.Transition, error)
	TestRun(ctx context.Context, res *testrun.Result) (tdd.Transition, error)
}

// PolicyGate decides operations (*policy.Engine implements it). It never
// fails: an error inside a rule is a block.
type PolicyGate interface {
	Decide(ctx context.Context, op operation.Operation) policy.Decision
}

// Approver asks a person about a plan of steps (*approval.Broker
// implements it). It returns once every step is decided; an error means
// the question could not be asked or recorded, and the steps count as
// denied.
type Approver interface {
	Ask(ctx context.Context, session, summary string, steps []approval.Step) (approval.Request, error)
}

// Grants turns a person's approvals into capability tokens and presents
// them with later operations (*approval.Grants implements it). The policy
// engine must validate the same tokens (policy.Options.Tokens): it alone
// decides whether a token covers an operation.
type Grants interface {
	Mint(req approval.Request, policyDigest string) (tokens map[int][]string, skipped map[int]error, err error)
	Present(op *operation.Operation)
}

// Provenance is the session's record of having read untrusted data
// (*kernel.Provenance implements it; docs/provenance.md). Untrusted is
// consulted at every call; MarkUntrusted records, durably, that the
// session read a result of call, a call of tool, whose output is
// untrusted, and an error from it fails the call closed.
type Provenance interface {
	Untrusted() (source string, ok bool)
	MarkUntrusted(ctx context.Context, tool, call string) error
}

// Recorder is the audit log (*audit.Log implements it). Append enqueues
// or writes one entry; Flush makes every entry appended so far durable.
// Any error makes the router refuse the call.
type Recorder interface {
	Append(ctx context.Context, e audit.Entry) (uint64, error)
	Flush(ctx context.Context) error
}

// Options configure a Router. Registry, Resolver, State, Policy and Audit
// are required; ChangeSet is required for kernel and sandbox tools (the
// tool is refused without it), Runtime for sandbox tools, Approver for
// calls the policy sends to a person (without one they are refused).
type Options struct {
	Registry *tool.Registry
	Resolver *tool.Resolver
	State    StateGate
	Policy   PolicyGate
	Approver Approver
	// Grants, optional, makes the approved steps of a request_approval
	// plan capability tokens scoped to each step's exact operation: they
	// expire (approval.token_ttl) and run as often as approval.token_uses
	// says. Without it an approved step is honoured once by its exact
	// operation signature.
	Grants Grants
	Audit  Recorder
	// Runtime runs sandbox tools; RuntimeName ("native", "docker",
	// "podman") is recorded with each sandboxed execution, so the log says
	// what isolated it.
	Runtime     sandbox.Runtime
	RuntimeName string
	// ImageRuntime, when set, runs the commands whose operation carries
	// tool.TagImage (a skill's run in its own image) in a session whose
	// Runtime starts no container images (native): it returns the
	// container engine's runtime, connected at the first such command.
	// ImageRuntimeName ("docker", "podman") is recorded with their
	// executions. Nil: they run on Runtime, as every command does.
	ImageRuntime     func(ctx context.Context) (sandbox.Runtime, error)
	ImageRuntimeName string
	// ChangeSet is the session's change set: its upper directory and
	// workspace are handed to sandboxes.
	ChangeSet ChangeSet
	// Session identifies the session (ID and Workspace); Mode and State
	// are filled from State at every call.
	Session operation.Session
	// Actor is the audit actor of the calls ("agent" when empty).
	Actor string
	// Provenance, optional, says whether the session has read untrusted
	// data (every operation carries it in Session.Untrusted) and records
	// a result of a tool with untrusted output. Without it the router
	// keeps the taint for its own lifetime only.
	Provenance Provenance
	// Sanitizer cleans every result; nil means tool.NewSanitizer with
	// defaults.
	Sanitizer *tool.Sanitizer
	// Env is the base environment of sandboxed commands; nil means a
	// minimal PATH (with /usr/local/go/bin), HOME=/tmp, LANG=C.UTF-8.
	Env []string
	// Timeout bounds a sandboxed command when the tool gives none;
	// default 2 minutes.
	Timeout time.Duration
	// Limits are the sandbox limits (Wall is set from the timeout;
	// Output defaults to 4 MiB).
	Limits sandbox.Limits
	// CacheDir, when set, holds the templates' persistent build caches
	// (sandbox.Template.ApplyCaches), one directory per workspace.
	CacheDir string
	// UserCaches are the person's own toolchain caches, mounted
	// read-only beside the templates' caches (ApplyCaches); nil: none.
	UserCaches sandbox.UserCaches
	// Masks are read-only mounts added to every sandbox: they hide
	// fluffy's own files that lie inside the workspace.
	Masks []sandbox.Mount
	// Toolchains are read-only mounts added to every sandbox: the
	// toolchains on the person's PATH outside the system directories.
	Toolchains []sandbox.Mount
	// Egress, when set, is asked before each sandboxed command for the
	// network of that call (its id): a nil Egress keeps the command
	// without network, as when Egress is unset.
	Egress func(ctx context.Context, call string) (Egress, error)
	// Secrets, when set, is asked before each sandboxed command (before
	// Egress, which may need a proxy use's swaps) for what the declared
	// uses of secrets in effect for it put into its sandbox
	// (docs/secrets.md): it decides each use (policy, approval), records
	// it, and hands out the values; an error refuses the command. Nil
	// hands out none.
	Secrets func(ctx context.Context, call, template string, programs []string) (SandboxSecrets, error)
	// ConfinedSecrets hands a confined command (tool.Command.Confine) the
	// credentials it lists, each decided, recorded and handed out as a
	// declared use is; the session's own declared uses never reach it.
	// Nil refuses a confined command that lists credentials.
	ConfinedSecrets func(ctx context.Context, call string, creds []tool.Credential) (SandboxSecrets, error)
	// ConfinedEgress is a confined command's network: an egress proxy
	// that lets through only hosts, each still decided by the policy.
	// Nil refuses a confined command that lists hosts.
	ConfinedEgress func(ctx context.Context, call string, hosts []string) (Egress, error)
	// NetEnv are variables a command gets when Egress gave it network,
	// set last so that each replaces the variable's offline value (the
	// template caches' GOPROXY, say): a session's package registries.
	NetEnv []string
	// Tracer traces each call and its gates (nil: none;
	// docs/observability.md).
	Tracer *telemetry.Tracer
	// Metrics counts calls by outcome, approvals waiting, sandbox start
	// and audit append latency (nil: none).
	Metrics *telemetry.Metrics
	Logger  *slog.Logger
}

// Egress is one sandboxed command's way out: an egress proxy on a unix
// socket that the sandbox gets mounted, the variables that point the
// command at it, and Close, called when the command has ended.
type Egress interface {
	Socket() string
	Env() []string
	Close()
}

// EgressMounts is an Egress that gives the command files besides its
// socket: the certificates to trust when the proxy terminates TLS to
// swap secrets in.
type EgressMounts interface {
	Mounts() []sandbox.Mount
}

// SandboxSecrets are the secrets one sandboxed command gets: variables,
// read-only mounts (files in a tmpfs) and its standard input. Close,
// when set, is called once the command has ended (it zeroes and removes
// what it handed out).
type SandboxSecrets struct {
	Env    []string
	Mounts []sandbox.Mount
	Stdin  []byte
	Close  func()
	// Scratch, when set, becomes the command's sandbox.Spec.Scratch:
	// memory outside the heap for the environment's C strings and the
	// raw output, which Close zeroes.
	Scratch sandbox.Scratch
	// Redact, when set, turns the command's raw output into what may be
	// kept: a copy without the values. It runs before anything else reads
	// the output.
	Redact func([]byte) []byte
}

// ChangeSet is what the router needs of the session's change set
// (*changeset.ChangeSet implements it).
type ChangeSet interface {
	Workspace() string
	UpperDir() string
}

// ErrAudit wraps a failure to record a call in the audit log: the call
// was refused.
var ErrAudit = errors.New("router: the audit log could not record the call")

// ErrState wraps a failure to store a TDD transition.
var ErrState = errors.New("router: the TDD journal could not store the transition")

// ErrImageUndeclared refuses a command that names a container image
// when its operation does not carry tool.TagImage, in a session with
// an image runtime (Options.ImageRuntime).
var ErrImageUndeclared = errors.New("router: a command's image was not declared")

// Router runs tool calls through the gates. Safe for concurrent use.
type Router struct {
	o     Options
	order sync.RWMutex // read-only calls hold it shared, the others exclusive

	// records holds *recordBuf builders of tool.read payloads: the audit
	// log copies a payload before Append returns, so one is reused at once.
	records sync.Pool

	mu      sync.Mutex         // guards the fields below
	planned map[plannedKey]int // approvals left from request_approval plans
	written []string           // workspace-relative files the last sandboxed command wrote
	taint   string             // what made the session untrusted, without Options.Provenance
}

var _ agent.Tools = (*Router)(nil)

// New checks o and returns a Router. It registers request_approval in
// o.Registry when an Approver is given.
func New(o Options) (*Router, error) {
	if o.Registry == nil || o.Resolver == nil || o.State == nil || o.Policy == nil || o.Audit == nil {
		return nil, errors.New("router: Registry, Resolver, State, Policy and Audit are required")
	}
	if o.Session.ID == "" {
		return nil, errors.New("router: Session.ID is required")
	}
	if o.Session.Workspace == "" {
		o.Session.Workspace = o.Resolver.Workspace()
	}
	if o.Actor == "" {
		o.Actor = "agent"
	}
	if o.Sanitizer == nil {
		o.Sanitizer = tool.NewSanitizer(tool.SanitizerOptions{})
	}
	if o.Env == nil {
		o.Env = sandbox.BaseEnv("")
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.Limits.Output <= 0 {
		o.Limits.Output = 4 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Router{o: o, planned: map[plannedKey]int{}}
	if o.Approver != nil {
		if _, err := o.Registry.Lookup(RequestApprovalName); err != nil {
			t, err := r.requestApprovalTool()
			if err != nil {
				return nil, err
			}
			if err := o.Registry.Register(t); err != nil {
				return nil, err
			}
		}
	}
	return r, nil
}

// Definitions lists the registered tools for the model (wire names).
func (r *Router) Definitions() []llm.Tool {
	var out []llm.Tool
	for _, t := range r.o.Registry.List() {
		out = append(out, llm.Tool{Name: tool.WireName(t.Name()), Description: t.Description(), Schema: t.InputSchema()})
	}
	return out
}

// readOnly reports whether a call may run concurrently with other
// read-only calls: a known fast-path tool.
func (r *Router) readOnly(name string) bool {
	t, err := r.o.Registry.Lookup(name)
	return err == nil && t.Execution().Class == tool.FastPath
}

// CallAll runs the calls of one model turn: consecutive read-only calls
// concurrently, every other call alone and in order. Results are in the
// calls' order; errs[i] is Call's error for calls[i].
func (r *Router) CallAll(ctx context.Context, calls []llm.ToolCall) ([]agent.Result, []error) {
	res := make([]agent.Result, len(calls))
	errs := make([]error, len(calls))
	for i := 0; i < len(calls); {
		if !r.readOnly(calls[i].Name) {
			res[i], errs[i] = r.Call(ctx, calls[i])
			i++
			continue
		}
		j := i
		var wg sync.WaitGroup
		for ; j < len(calls) && r.readOnly(calls[j].Name); j++ {
			wg.Add(1)
			go func(k int) {
				defer wg.Done()
				res[k], errs[k] = r.Call(ctx, calls[k])
			}(j)
		}
		wg.Wait()
		i = j
	}
	return res, errs
}

// call is one call's progress through the gates.
type call struct {
	id, name string
	t        *tool.Tool
	op       *operation.Operation
	fast     bool // recorded as one buffered tool.read entry
	stateDec *tdd.Decision
	polDec   *policy.Decision
	approval string // how approval was given, when needed
	recorded bool   // the request and the gates' decisions are in the log
	// sd and pd hold the decisions stateDec and polDec point to (one
	// allocation for the call instead of three).
	sd tdd.Decision
	pd policy.Decision
	// The state and policy gates' spans stay open until their
	// decisions are recorded, so each carries its own entry.
	gates [2]gateSpan
	// via is the call on whose behalf this one is made (a confined
	// command's pending write), "" for the model's own.
	via string
	// pending is the host folder of the files a confined command
	// proposes as writes (tool.Confinement.Pending), once its command
	// is built.
	pending string
}

// gateSpan is a gate's span and the context its record is written with.
type gateSpan struct {
	ctx  context.Context
	span telemetry.Span
}

// gate starts the span of gate i (0 state, 1 policy) under ctx.
func (r *Router) gate(ctx context.Context, cl *call, i int, name string) {
	if r.o.Tracer == nil {
		return
	}
	cl.gates[i].ctx, cl.gates[i].span = r.o.Tracer.Start(ctx, "fluffy.gate."+name, trace.SpanKindInternal, telemetry.KeyGate.String(name))
}

// gateCtx is the context gate i's record is written with.
func (cl *call) gateCtx(ctx context.Context, i int) context.Context {
	if g := cl.gates[i].ctx; g != nil {
		return g
	}
	return ctx
}

// endGates ends the gates' spans (again: harmless).
func (cl *call) endGates() {
	cl.gates[0].span.End()
	cl.gates[1].span.End()
}

// Call runs one call through every gate. See the package doc.
func (r *Router) Call(ctx context.Context, c llm.ToolCall) (agent.Result, error) {
	if r.readOnly(c.Name) {
		r.order.RLock()
		defer r.order.RUnlock()
	} else {
		r.order.Lock()
		defer r.order.Unlock()
	}
	ctx, span := r.toolSpan(ctx, c)
	defer span.End()
	res, err := r.call(ctx, c)
	if r.o.Metrics != nil {
		r.o.Metrics.Add(telemetry.MetricToolCalls, 1, "outcome", outcome(res.Decision, err))
	}
	if span.Recording() { // building attributes allocates: not when off
		span.Set(telemetry.KeyDecision.String(res.Decision))
		span.Fail(err)
	}
	if err != nil {
		r.o.Logger.ErrorContext(ctx, "tool call failed the runtime", "call", c.ID, "tool", c.Name, "err", err)
		return agent.Result{Content: "refused: the runtime could not process this call (" + runtimeCause(err) + "); it did not complete", IsError: true, Decision: "refused: runtime"}, err
	}
	return res, nil
}

func runtimeCause(err error) string {
	switch {
	case errors.Is(err, ErrAudit):
		return "the audit log could not record it"
	case errors.Is(err, ErrState):
		return "the TDD journal could not record it"
	}
	return "internal error"
}

func (r *Router) call(ctx context.Context, c llm.ToolCall) (agent.Result, error) {
	return r.callVia(ctx, c, "")
}

// callVia is call made on behalf of the call via ("" the model's own).
func (r *Router) callVia(ctx context.Context, c llm.ToolCall, via string) (agent.Result, error) {
	cl := &call{id: c.ID, name: c.Name, via: via}
	defer cl.endGates()
	// 1. Decode.
	t, err := r.o.Registry.Lookup(c.Name)
	if err != nil {
		return r.refuse(ctx, cl, Refusal{Gate: GateDecode, Rule: "unknown-tool", Reason: err.Error(), Instead: "call one of the listed tools"}, c.Args)
	}
	cl.t, cl.name = t, t.Name()
	args, err := t.Decode(c.Args)
	if err != nil {
		return r.refuse(ctx, cl, Refusal{Gate: GateDecode, Rule: "invalid-arguments", Reason: err.Error(), Instead: "call " + t.Name() + " again with arguments that match its input schema"}, c.Args)
	}
	// 2. Normalize.
	op, err := t.Normalize(ctx, r.o.Resolver, args, r.session())
	if err == nil && (op.CommandLine != "" || len(op.Argv) > 0) {
		paths := op.Paths
		op.Paths = nil
		err = policy.Normalize(op, r.o.Resolver.Workspace())
		op.Paths = paths
	}
	if err == nil {
		err = r.bind(t, op, args)
	}
	if err == nil && op.Action == operation.Exec && r.o.ChangeSet != nil {
		// Policy tells apart a command that runs a file the agent wrote
		// (a script, a Makefile): the change set says which those are.
		op.AgentWritten, err = policy.AgentWritten(r.o.ChangeSet.UpperDir(), op.Session.Workspace)
	}
	if err != nil {
		ref := Refusal{Gate: GateNormalize, Rule: "unresolvable", Reason: err.Error(), Instead: "name paths inside the workspace, without NUL bytes or symlink loops"}
		var ne *tool.NormalizeError
		switch {
		case errors.Is(err, tool.ErrOutsideWorkspace):
			ref.Rule, ref.Instead = "outside-workspace", "read files of the workspace "+r.o.Resolver.Workspace()
		case errors.As(err, &ne):
			ref.Rule, ref.Instead = ne.Rule, ne.Instead
		}
		return r.refuse(ctx, cl, ref, c.Args)
	}
	cl.op = op
	cl.fast = t.Execution().Class == tool.FastPath && t.Name() != RequestApprovalName
	// 3. State gate.
	// The machine judges on its own status; the decision names the mode
	// and state it judged in, which the policy gate then sees.
	r.gate(ctx, cl, 0, "state")
	cl.sd = r.o.State.Allowed(*op)
	cl.stateDec = &cl.sd
	sd := &cl.sd
	if g := cl.gates[0].span; g.Recording() {
		g.Set(telemetry.KeyDecision.String(allowString(sd.Allow)), telemetry.KeyRule.String(string(sd.Code)))
	}
	op.Session.Mode, op.Session.State = string(sd.Mode), string(sd.State)
	if !sd.Allow {
		return r.refuse(ctx, cl, Refusal{Gate: GateState, Rule: string(sd.Code), Reason: sd.Reason, Instead: stateInstead(r.o.State.Status())}, c.Args)
	}
	// 4. Policy gate.
	if t.Name() != RequestApprovalName {
		if r.o.Grants != nil {
			r.o.Grants.Present(op)
		}
		r.gate(ctx, cl, 1, "policy")
		// Under the gate's span: a classifier the policy asks is its child.
		cl.pd = r.o.Policy.Decide(cl.gateCtx(ctx, 1), *op)
		cl.polDec = &cl.pd
		pd := cl.pd
		if g := cl.gates[1].span; g.Recording() {
			g.Set(telemetry.KeyDecision.String(pd.Effect.String()), telemetry.KeyRule.String(pd.Rule))
		}
		switch pd.Effect {
		case policy.Allow:
		case policy.Approve:
			// 5. Approval: the request and both decisions are recorded
			// before anyone is asked, so the log reads in order.
			cl.fast = false
			r.takePlanned(cl)
			if err := r.recordGates(ctx, cl, c.Args); err != nil {
				return agent.Result{}, err
			}
			if cl.approval == "" {
				if ref, ok, err := r.askTraced(ctx, cl, t.Preview(ctx, args)); err != nil || !ok {
					if err != nil {
						return agent.Result{}, err
					}
					return r.refuse(ctx, cl, ref, c.Args)
				}
			}
		default:
			return r.refuse(ctx, cl, Refusal{Gate: GatePolicy, Rule: pd.Rule, Reason: pd.Reason, Subject: pd.Subject, Instead: policyInstead(pd, op)}, c.Args)
		}
	} else {
		cl.polDec = &policy.Decision{Effect: policy.Allow, Rule: "request-approval", Reason: "asking a person is always allowed; each step is judged by the policy inside the request"}
	}
	if !cl.fast {
		if err := r.recordGates(ctx, cl, c.Args); err != nil {
			return agent.Result{}, err
		}
	}
	cl.endGates()
	// 6. Execute.
	readCtx := ctx // the tool.read entry records the whole call
	ctx, exec := r.executionSpan(ctx, t)
	defer exec.End()
	if !cl.fast {
		start := audit.ExecStart{Call: cl.id, Tool: cl.name, Class: string(t.Execution().Class), Template: t.Execution().Template, Approval: cl.approval}
		if t.Execution().Class == tool.Sandbox {
			start.Runtime = r.runtimeName(cl.op)
		}
		if err := r.append(ctx, start); err != nil {
			return agent.Result{}, err
		}
	}
	// Write-ahead, as `fluffy sandbox run` does: a sandboxed command
	// starts only once the record of it (and of the gates that let it)
	// is on disk, so that even a host crash it causes leaves that
	// record. The commit runs while the sandbox is built (gate). Kernel
	// tools only write into the change set.
	var gate *writeAhead
	if !cl.fast && t.Execution().Class == tool.Sandbox {
		gate = r.startWriteAhead(ctx)
	}
	started := time.Now()
	out, execErr := r.execute(ctx, cl, args, gate)
	if gate != nil {
		if err := gate.wait(); err != nil {
			// Queued behind exec.start, written with it once the log
			// can write: the command did not run.
			_ = r.append(context.WithoutCancel(ctx), audit.ExecEnd{Call: cl.id, Tool: cl.name, IsError: true, Error: audit.NotRun(err)})
			return agent.Result{}, fmt.Errorf("%w: %w", ErrAudit, err)
		}
	}
	dur := time.Since(started)
	if err := r.withPending(ctx, cl, &out, &execErr); err != nil {
		return agent.Result{}, err
	}
	// 7. Sanitize.
	var s tool.Sanitized
	if execErr != nil {
		s = r.o.Sanitizer.Sanitize([]byte(execErr.Error()))
		out.IsError = true
	} else {
		s = r.o.Sanitizer.Sanitize(out.Output)
	}
	// 9 (before 8, so the record holds the transition). Feed back.
	var fed string
	if execErr == nil {
		var err error
		if fed, err = r.feedBack(ctx, cl, out); err != nil {
			return agent.Result{}, err
		}
	}
	// 8. Record.
	sum := sha256.Sum256([]byte(s.Text))
	if cl.fast {
		rb, _ := r.records.Get().(*recordBuf)
		if rb == nil {
			rb = new(recordBuf)
		}
		r.readRecord(&rb.rec, cl, c.Args, out.IsError, execErr != nil, dur, &s, sum)
		rb.rec.Encode(&rb.o)
		_, err := r.o.Audit.Append(readCtx, audit.Entry{Session: r.o.Session.ID, Kind: audit.KindToolRead, Actor: r.o.Actor, Payload: &rb.o})
		if len(s.Text) <= maxPooledRecord {
			r.records.Put(rb)
		}
		if err != nil {
			return agent.Result{}, fmt.Errorf("%w: %w", ErrAudit, err)
		}
	} else {
		end := audit.ExecEnd{
			Call: cl.id, Tool: cl.name, IsError: out.IsError, DurationUS: dur.Microseconds(),
			ToolOutput: &audit.ToolOutput{
				OutputBytes: s.InputBytes, ShownBytes: int64(len(s.Text)), ShownSHA256: sum,
				CutBytes: s.CutBytes, Redactions: int64(s.Redactions), Stripped: int64(s.Stripped), Binary: s.Binary, TDD: fed,
			},
		}
		if execErr != nil {
			end.Error = s.Text
		}
		if err := r.append(ctx, end); err != nil {
			return agent.Result{}, err
		}
		if err := r.o.Audit.Flush(ctx); err != nil {
			return agent.Result{}, fmt.Errorf("%w: %w", ErrAudit, err)
		}
	}
	// The result reaches the model only once the session's taint is
	// recorded.
	if t.UntrustedOutput() || cl.op != nil && slices.Contains(cl.op.Tags, tool.TagUntrustedOutput) {
		if err := r.markUntrusted(ctx, cl); err != nil {
			return agent.Result{}, err
		}
	}
	text := s.Text
	if fed != "" {
		text += "\n[tdd: " + fed + "]"
	}
	return agent.Result{Content: text, IsError: out.IsError, Decision: decisionString(cl)}, nil
}

// maxPooledRecord: builders that held a longer error text are dropped
// rather than kept in Router.records.
const maxPooledRecord = 4 << 10

// recordBuf is a tool.read payload and the builder of its canonical
// form (audit.ToolRead.Encode: no JSON marshal and re-parse on the fast
// path).
type recordBuf struct {
	rec audit.ToolRead
	o   audit.Object
}

// readRecord fills the payload of a tool.read entry, reusing rec's paths.
func (r *Router) readRecord(rec *audit.ToolRead, cl *call, raw []byte, isError, failed bool, dur time.Duration, s *tool.Sanitized, shownSum [32]byte) {
	paths := rec.Paths[:0]
	for _, p := range cl.op.Paths {
		paths = append(paths, p.Abs)
	}
	*rec = audit.ToolRead{
		ArgsSHA256: sha256.Sum256(raw), Binary: s.Binary, Call: cl.id, CutBytes: s.CutBytes, DurationUS: dur.Microseconds(),
		GatePolicy:  audit.GateSummary{Effect: cl.polDec.Effect.String(), Rule: cl.polDec.Rule},
		GateState:   audit.GateSummary{Effect: "allow", Rule: string(cl.stateDec.Code)},
		IsError:     isError,
		OutputBytes: s.InputBytes, Paths: paths, Redactions: int64(s.Redactions),
		ShownBytes: int64(len(s.Text)), ShownSHA256: shownSum, Stripped: int64(s.Stripped), Tool: cl.name,
	}
	if failed {
		rec.Error = s.Text
	}
}

// append records payload in the session's name, as the router's actor.
func (r *Router) append(ctx context.Context, payload audit.Payload) error {
	var t0 time.Time
	if r.o.Metrics != nil {
		t0 = time.Now()
		defer func() { r.o.Metrics.Observe(telemetry.MetricAuditAppend, time.Since(t0)) }()
	}
	if _, err := r.o.Audit.Append(ctx, audit.Entry{Session: r.o.Session.ID, Kind: payload.Kind(), Actor: r.o.Actor, Payload: payload}); err != nil {
		return fmt.Errorf("%w: %w", ErrAudit, err)
	}
	return nil
}

const maxRecordedArgs = 4 << 10

// recordGates writes the request and every decision made so far.
func (r *Router) recordGates(ctx context.Context, cl *call, raw []byte) error {
	if cl.recorded {
		return nil
	}
	cl.recorded = true
	// The raw arguments are identified by their hash (they may be
	// large); the entry keeps them when small.
	req := audit.ToolRequest{Call: cl.id, Tool: cl.name, ArgsSHA256: sha256.Sum256(raw), ArgsBytes: len(raw), Via: cl.via}
	if len(raw) <= maxRecordedArgs && json.Valid(raw) {
		req.Args = json.RawMessage(raw)
	}
	if cl.op != nil {
		req.Op = cl.op
	}
	if err := r.append(ctx, req); err != nil {
		return err
	}
	if cl.stateDec != nil {
		if err := r.append(cl.gateCtx(ctx, 0), audit.GateState{Call: cl.id, Tool: cl.name, Decision: cl.stateDec}); err != nil {
			return err
		}
	}
	if d := cl.polDec; d != nil {
		p := audit.GatePolicy{Call: cl.id, Tool: cl.name, Effect: d.Effect.String(), Rule: d.Rule, Layer: string(d.Layer),
			Reason: d.Reason, Subject: d.Subject, Token: d.Token, Approval: cl.approval}
		if err := r.append(cl.gateCtx(ctx, 1), p); err != nil {
			return err
		}
	}
	cl.endGates()
	return nil
}

func decisionString(cl *call) string {
	if cl.polDec == nil {
		return "allow"
	}
	s := cl.polDec.Effect.String() + ": rule " + cl.polDec.Rule
	if cl.approval != "" {
		s += " (" + cl.approval + ")"
	}
	return s
}

// refuse records the refusal (every decision made, then the refusal
// itself, flushed) and returns it as the model's tool result.
func (r *Router) refuse(ctx context.Context, cl *call, ref Refusal, raw []byte) (agent.Result, error) {
	if err := r.recordGates(ctx, cl, raw); err != nil {
		return agent.Result{}, err
	}
	if ref.Gate == GateDecode || ref.Gate == GateNormalize || ref.Gate == GateApproval {
		// The state and policy gates recorded their own refusals above;
		// these gates have no entry of their own kind.
		if err := r.append(ctx, audit.ToolRefused{Call: cl.id, Tool: cl.name, Refusal: ref}); err != nil {
			return agent.Result{}, err
		}
	}
	if err := r.o.Audit.Flush(ctx); err != nil {
		return agent.Result{}, fmt.Errorf("%w: %w", ErrAudit, err)
	}
	text := ref.Text()
	s := r.o.Sanitizer.Sanitize([]byte(text))
	return agent.Result{Content: s.Text, IsError: true, Decision: "refused by the " + string(ref.Gate) + " gate: rule " + ref.Rule}, nil
}

// takePlanned uses one approval left by a request_approval plan for an
// operation with this signature, if any.
func (r *Router) takePlanned(cl *call) {
	if policy.AskedEachTime(cl.pd.Rule) {
		return // asked at the call itself, a plan's approval notwithstanding
	}
	k := plannedKey{sig: cl.op.Signature(), policy: cl.pd.Policy}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := r.planned[k]; n > 0 {
		r.planned[k] = n - 1
		cl.approval = "approved in an earlier plan"
	}
}

// plannedKey is a step approved in a plan without a token: its operation
// signature and the digest of the policy its approval request showed it
// under. It counts only while the gate decides under that same policy:
// after a policy change the step is asked again.
type plannedKey struct {
	sig, policy string
}

// ask puts a policy "approve" to the person now, showing them the tool's
// own preview of the call (the diff of a memory write) when it has one.
func (r *Router) ask(ctx context.Context, cl *call, shown string) (Refusal, bool, error) {
	pd := cl.polDec
	if r.o.Approver == nil {
		return Refusal{Gate: GateApproval, Rule: pd.Rule, Reason: "this needs a person's approval (" + pd.Reason + ") and no one can be asked in this session",
			Instead: "do without it, or stop and tell the user what you need"}, false, nil
	}
	summary, note := fmt.Sprintf("%s wants to run %s", r.o.Actor, cl.name), pd.Reason
	if cl.via != "" {
		summary += " proposed by " + cl.via
	}
	if sess := cl.op.Session; sess.Untrusted {
		// The person is told why this is asked when the reason is the
		// taint, and what they would be trusting in any case.
		summary += untrustedSuffix(sess.UntrustedSource)
		if sess.UntrustedSource != "" {
			note += "; the session's untrusted data came from " + sess.UntrustedSource
		}
	}
	if shown == "" {
		shown = preview(cl.op)
	}
	req, err := r.o.Approver.Ask(ctx, r.o.Session.ID, summary, []approval.Step{{Op: *cl.op, Note: note, Preview: shown}})
	if err != nil {
		if ctx.Err() != nil {
			return Refusal{}, false, ctx.Err()
		}
		return Refusal{Gate: GateApproval, Rule: pd.Rule, Reason: "the approval could not be asked: " + err.Error(), Instead: "try again later"}, false, nil
	}
	if len(req.Items) != 1 || req.Items[0].Decision.Verdict != approval.Approved {
		reason := "a person denied it"
		if len(req.Items) == 1 && req.Items[0].Decision.Reason != "" {
			reason += ": " + req.Items[0].Decision.Reason
		}
		return Refusal{Gate: GateApproval, Rule: pd.Rule, Reason: reason, Instead: "choose another approach, or explain why you need it with request_approval"}, false, nil
	}
	cl.approval = "approved by a person, request " + req.ID
	return Refusal{}, true, nil
}

func preview(op *operation.Operation) string {
	switch {
	case op.CommandLine != "":
		return op.CommandLine
	case len(op.Argv) > 0:
		return strings.Join(op.Argv, " ")
	case len(op.Paths) > 0:
		var ps []string
		for _, p := range op.Paths {
			ps = append(ps, p.Abs)
		}
		return string(op.Action) + " " + strings.Join(ps, ", ")
	}
	return string(op.Action)
}

// writeAhead is the commit that makes a sandboxed call's records durable
// before its command starts.
type writeAhead struct {
	once sync.Once
	done chan error
	err  error
}

// startWriteAhead starts the commit.
func (r *Router) startWriteAhead(ctx context.Context) *writeAhead {
	w := &writeAhead{done: make(chan error, 1)}
	go func() { w.done <- r.o.Audit.Flush(ctx) }()
	return w
}

// wait returns the commit's outcome once it is known.
func (w *writeAhead) wait() error {
	w.once.Do(func() { w.err = <-w.done })
	return w.err
}

// execute runs an allowed call in its class (a sandboxed one once gate
// has passed).
func (r *Router) execute(ctx context.Context, cl *call, args tool.Args, gate *writeAhead) (tool.Result, error) {
	t := cl.t
	if t.Name() == RequestApprovalName {
		return r.runPlan(ctx, args)
	}
	switch t.Execution().Class {
	case tool.FastPath, tool.Kernel, tool.Plugin:
		return t.Run(ctx, args)
	case tool.Sandbox:
		return r.sandboxed(ctx, cl, args, gate)
	}
	return tool.Result{}, fmt.Errorf("unknown execution class %q", t.Execution().Class)
}

// sandboxed runs a sandbox tool's command once gate (if any) has made its
// records durable: a runtime that builds sandboxes ahead of the command
// (sandbox.GatedRunner) builds it meanwhile.
func (r *Router) sandboxed(ctx context.Context, cl *call, args tool.Args, gate *writeAhead) (tool.Result, error) {
	callID, t := cl.id, cl.t
	if r.o.Runtime == nil || r.o.ChangeSet == nil {
		return tool.Result{}, errors.New("no sandbox is configured in this session: " + t.Name() + " cannot run")
	}
	cmd, err := t.Command(ctx, args)
	if err != nil {
		return tool.Result{}, err
	}
	spec, err := r.sandboxSpec(t.Execution().Template, cmd.Env)
	if err != nil {
		return tool.Result{}, err
	}
	if cmd.Timeout > 0 {
		spec.Limits.Wall = cmd.Timeout
	}
	spec.Argv, spec.Dir = cmd.Argv, cmd.Dir
	var redact func([]byte) []byte
	if cmd.Confine != nil {
		closeConfined, rd, err := r.confine(ctx, callID, &spec, cmd.Confine)
		if err != nil {
			return tool.Result{}, err
		}
		defer closeConfined()
		redact = rd
		cl.pending = cmd.Confine.Pending
	} else if r.o.Secrets != nil {
		// Secrets first: a proxy use's swaps are what the command's
		// egress proxy, started next, puts the values back in with.
		ss, err := r.o.Secrets(ctx, callID, t.Execution().Template, programs(cl.op))
		if err != nil {
			return tool.Result{}, fmt.Errorf("the command's secrets: %w", err)
		}
		if ss.Close != nil {
			defer ss.Close()
		}
		spec.Env = sandbox.SetEnv(spec.Env, ss.Env...)
		spec.Mounts = append(spec.Mounts, ss.Mounts...)
		spec.Scratch, redact = ss.Scratch, ss.Redact
		if ss.Stdin != nil {
			spec.Stdin = bytes.NewReader(ss.Stdin)
		}
	}
	if r.o.Egress != nil && cmd.Confine == nil {
		eg, err := r.o.Egress(ctx, callID)
		if err != nil {
			return tool.Result{}, fmt.Errorf("the command's network could not be set up: %w", err)
		}
		if eg != nil {
			defer eg.Close()
			withEgress(&spec, eg)
			spec.Env = sandbox.SetEnv(spec.Env, r.o.NetEnv...)
		}
	}
	rt, err := r.runtimeFor(ctx, cl.op, cmd)
	if err != nil {
		return tool.Result{}, err
	}
	before := snapshotUpper(r.o.ChangeSet.UpperDir())
	ctx, span := r.sandboxSpan(ctx, t)
	defer span.End()
	var res sandbox.Result
	switch gr, ok := rt.(sandbox.GatedRunner); {
	case gate == nil:
		res, err = rt.Run(ctx, spec)
	case ok:
		res, err = gr.RunGated(ctx, spec, gate.wait)
	default:
		if err = gate.wait(); err == nil {
			res, err = rt.Run(ctx, spec)
		}
	}
	if redact != nil {
		// The raw output may be in spec.Scratch, zeroed when the
		// secrets close: from here on only its redacted copy is read.
		res.Stdout, res.Stderr = redact(res.Stdout), redact(res.Stderr)
	}
	written := changedSince(r.o.ChangeSet.UpperDir(), before)
	if err == nil && len(written) > 0 {
		r.mu.Lock()
		r.written = written
		r.mu.Unlock()
	}
	if err != nil {
		span.Fail(err)
		return tool.Result{}, fmt.Errorf("the sandbox could not run the command: %w", err)
	}
	sandboxSpanEnd(span, &res)
	if r.o.Metrics != nil {
		r.o.Metrics.Observe(telemetry.MetricSandboxStart, res.Setup, "start_mode", res.StartMode, "runtime", r.runtimeName(cl.op))
	}
	out := tool.CommandOutput{Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: res.ExitCode}
	for _, h := range res.Hit {
		out.Limits = append(out.Limits, string(h))
	}
	if cmd.Collect != nil {
		return cmd.Collect(out)
	}
	return DefaultCollect(out), nil
}

// onImageRuntime reports whether op's command runs on the image runtime
// rather than the session's own.
func (r *Router) onImageRuntime(op *operation.Operation) bool {
	return r.o.ImageRuntime != nil && op != nil && op.HasTag(tool.TagImage)
}

// runtimeName is the runtime op's command runs on, as exec.start
// records it.
func (r *Router) runtimeName(op *operation.Operation) string {
	if r.onImageRuntime(op) {
		return r.o.ImageRuntimeName
	}
	return r.o.RuntimeName
}

// runtimeFor is the runtime cmd (of op) runs on: the image runtime for a
// command in an image of its own when the session has one, else the
// session's. A command naming an image its operation did not declare
// (tool.TagImage) is refused there: exec.start, already recorded, names
// the session's runtime, which starts no image.
func (r *Router) runtimeFor(ctx context.Context, op *operation.Operation, cmd tool.Command) (sandbox.Runtime, error) {
	if r.o.ImageRuntime == nil {
		return r.o.Runtime, nil
	}
	if !r.onImageRuntime(op) {
		if cmd.Confine != nil && cmd.Confine.Image != "" {
			return nil, fmt.Errorf("%w: the command names image %s, which its operation does not declare (tag %s)", ErrImageUndeclared, cmd.Confine.Image, tool.TagImage)
		}
		return r.o.Runtime, nil
	}
	rt, err := r.o.ImageRuntime(ctx)
	if err != nil {
		return nil, fmt.Errorf("the command runs in a container image, on %s: %w", r.o.ImageRuntimeName, err)
	}
	return rt, nil
}

// confine makes spec the confined command's whole sandbox: the
// workspace only read-only, its own mounts (then the masks of fluffy's files),
// its credentials and its hosts only. The returned func releases the
// secrets and the proxy once the command has ended.
func (r *Router) confine(ctx context.Context, callID string, spec *sandbox.Spec, c *tool.Confinement) (func(), func([]byte) []byte, error) {
	spec.Workspace, spec.ChangeSet = "", ""
	if c.Workspace {
		spec.Workspace, spec.ChangeSet = r.o.ChangeSet.Workspace(), r.o.ChangeSet.UpperDir()
		spec.WorkspaceReadOnly = true
	}
	spec.Network, spec.ProxySocket = sandbox.NetworkNone, ""
	spec.Image = c.Image
	spec.Mounts = append(append(slices.Clone(c.Mounts), r.o.Masks...), r.o.Toolchains...)
	if c.Stdin != nil {
		spec.Stdin = bytes.NewReader(c.Stdin)
	}
	if c.Memory > 0 && (spec.Limits.Memory == 0 || c.Memory < spec.Limits.Memory) {
		spec.Limits.Memory = c.Memory
	}
	if c.Pids > 0 && (spec.Limits.Pids == 0 || c.Pids < spec.Limits.Pids) {
		spec.Limits.Pids = c.Pids
	}
	var closers []func()
	var redact func([]byte) []byte
	release := func() {
		for _, f := range slices.Backward(closers) {
			f()
		}
	}
	if len(c.Credentials) > 0 {
		if r.o.ConfinedSecrets == nil {
			return nil, nil, errors.New("this session hands out no credentials: the command's cannot be given")
		}
		ss, err := r.o.ConfinedSecrets(ctx, callID, c.Credentials)
		if err != nil {
			return nil, nil, fmt.Errorf("the command's secrets: %w", err)
		}
		if ss.Close != nil {
			closers = append(closers, ss.Close)
		}
		spec.Env = sandbox.SetEnv(spec.Env, ss.Env...)
		spec.Mounts = append(spec.Mounts, ss.Mounts...)
		spec.Scratch, redact = ss.Scratch, ss.Redact
	}
	if len(c.Hosts) > 0 {
		if r.o.ConfinedEgress == nil {
			release()
			return nil, nil, errors.New("this session has no egress proxy: the command's network cannot be given")
		}
		eg, err := r.o.ConfinedEgress(ctx, callID, c.Hosts)
		if err == nil && eg == nil {
			err = errors.New("the session's sandbox runtime takes no egress proxy")
		}
		if err != nil {
			release()
			return nil, nil, fmt.Errorf("the command's network could not be set up: %w", err)
		}
		closers = append(closers, eg.Close)
		withEgress(spec, eg)
	}
	return release, redact, nil
}

// programs are the programs a command line runs (each simple command's
// first word, wrappers included), for the declared uses of secrets.
func programs(op *operation.Operation) []string {
	if op == nil {
		return nil
	}
	var out []string
	for _, c := range op.Commands {
		if len(c.Argv) > 0 {
			out = append(out, c.Argv[0])
		}
	}
	if len(out) == 0 && len(op.Argv) > 0 {
		out = append(out, op.Argv[0])
	}
	return out
}

// withEgress gives spec the network of eg: the proxy's socket, the
// standard-net seccomp profile in place of standard (the forwarder is
// reached over TCP on loopback), and the proxy variables before the
// others, so that a command's own setting of one wins (it can only point
// elsewhere inside a sandbox that has no other way out), and the files
// of an EgressMounts.
func withEgress(spec *sandbox.Spec, eg Egress) {
	spec.Network = sandbox.NetworkProxy
	spec.ProxySocket = eg.Socket()
	if spec.Seccomp == "standard" {
		spec.Seccomp = "standard-net"
	}
	spec.Env = append(append([]string(nil), eg.Env()...), spec.Env...)
	if m, ok := eg.(EgressMounts); ok {
		spec.Mounts = append(spec.Mounts, m.Mounts()...)
	}
}

// SandboxSpec is the sandbox the router gives a command of template:
// the session's workspace and change set, the template's settings, the
// masks and caches, the base environment, the limits with the default
// timeout as Wall; the command adds its argv, directory, environment
// and, when it has one, its own timeout. Runtimes that start sandboxes
// ahead of the command (a session's container pool) start them from it.
func (r *Router) SandboxSpec(template string) (sandbox.Spec, error) {
	return r.sandboxSpec(template, nil)
}

// sandboxSpec is SandboxSpec with the command's environment after the
// base one (the template's caches still set their own variables).
func (r *Router) sandboxSpec(template string, env []string) (sandbox.Spec, error) {
	if r.o.ChangeSet == nil {
		return sandbox.Spec{}, errors.New("router: no change set in this session")
	}
	tpl, err := sandbox.TemplateByName(template)
	if err != nil {
		return sandbox.Spec{}, err
	}
	limits := r.o.Limits
	limits.Wall = r.o.Timeout
	spec := sandbox.Spec{
		Env:       append(append([]string(nil), r.o.Env...), env...),
		Workspace: r.o.ChangeSet.Workspace(), ChangeSet: r.o.ChangeSet.UpperDir(), Limits: limits,
	}
	tpl.Apply(&spec)
	if spec.Workspace != "" {
		spec.Mounts = append(spec.Mounts, r.o.Masks...)
	}
	spec.Mounts = append(spec.Mounts, r.o.Toolchains...)
	if r.o.CacheDir != "" && spec.Workspace != "" {
		if err := tpl.ApplyCaches(&spec, sandbox.CacheRoot(r.o.CacheDir, spec.Workspace), r.o.UserCaches); err != nil {
			return sandbox.Spec{}, err
		}
	}
	return spec, nil
}

// DefaultCollect shows stdout, then stderr, then the exit status and any
// limit hit; a non-zero exit is an error result.
func DefaultCollect(out tool.CommandOutput) tool.Result {
	var b strings.Builder
	b.Write(out.Stdout)
	if len(out.Stderr) > 0 {
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteByte('\n')
		}
		b.WriteString("[stderr]\n")
		b.Write(out.Stderr)
	}
	if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "[exit status %d", out.ExitCode)
	if len(out.Limits) > 0 {
		fmt.Fprintf(&b, "; limit reached: %s", strings.Join(out.Limits, ", "))
	}
	b.WriteString("]")
	return tool.Result{Output: []byte(b.String()), IsError: out.ExitCode != 0 || len(out.Limits) > 0}
}

// feedBack moves the TDD machine: a kernel write is recorded as written,
// a parsed test run as run. It returns a one-line summary for the model.
func (r *Router) feedBack(ctx context.Context, cl *call, out tool.Result) (string, error) {
	var line string
	if cl.t.Execution().Class == tool.Sandbox {
		r.mu.Lock()
		written := r.written
		r.written = nil
		r.mu.Unlock()
		if len(written) > 0 {
			l, err := r.commandWrote(ctx, cl, written)
			if err != nil {
				return "", err
			}
			line = l
		}
	}
	more, err := r.feedResult(ctx, cl, out)
	if line != "" && more != "" {
		return line + "; " + more, err
	}
	return line + more, err
}

// commandWrote reports the files a sandboxed command wrote to the TDD
// machine as a write. A write the machine refuses is not stored: the
// model is told, and the files stay in the change set for the person to
// see (they never reach the real tree without review).
func (r *Router) commandWrote(ctx context.Context, cl *call, written []string) (string, error) {
	op := operation.Operation{Tool: cl.name, Action: operation.Write, Session: cl.op.Session, Tags: cl.op.Tags}
	for _, rel := range written {
		op.Paths = append(op.Paths, operation.Path{Abs: filepath.Join(r.o.ChangeSet.Workspace(), rel), Raw: rel, InWorkspace: true})
	}
	tr, err := r.o.State.Wrote(ctx, op)
	var te *tdd.Error
	if errors.As(err, &te) {
		d := tdd.Decision{Allow: false, Code: te.Code, Mode: te.Mode, State: te.State, Reason: te.Reason}
		if aerr := r.append(ctx, audit.GateState{Call: cl.id, Tool: cl.name, Decision: d, AfterExec: true, Written: written}); aerr != nil {
			return "", aerr
		}
		return fmt.Sprintf("the command wrote %s, which the TDD machine refuses (%s): %s; these changes stay unapplied in the change set, do not rely on them", strings.Join(written, ", "), te.Code, te.Reason), nil
	}
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrState, err)
	}
	return "the command wrote " + strings.Join(written, ", ") + ": " + transitionLine(tr), nil
}

func (r *Router) feedResult(ctx context.Context, cl *call, out tool.Result) (string, error) {
	switch {
	case cl.t.Execution().Class == tool.Kernel && !out.IsError:
		tr, err := r.o.State.Wrote(ctx, *cl.op)
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrState, err)
		}
		return transitionLine(tr), nil
	case out.Data != nil:
		res, ok := out.Data.(*testrun.Result)
		if !ok || res == nil {
			return "", nil
		}
		tr, err := r.o.State.TestRun(ctx, res)
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrState, err)
		}
		if d := debtLine(tr.DebtCoverage); d != "" {
			return transitionLine(tr) + "; " + d, nil
		}
		return transitionLine(tr), nil
	}
	return "", nil
}

// debtLine shows each indebted file's measured coverage against what
// finishing needs, so the model knows which files still lack tests.
func debtLine(ds []tdd.DebtCoverage) string {
	if len(ds) == 0 {
		return ""
	}
	parts := make([]string, len(ds))
	for i, d := range ds {
		state := "paid"
		if !d.Paid() {
			state = "unpaid, needs " + bpPercent(d.NeedBP)
		}
		parts[i] = fmt.Sprintf("%s %s (%s)", d.Path, bpPercent(d.GotBP), state)
	}
	return "tech debt coverage: " + strings.Join(parts, ", ")
}

func bpPercent(bp int64) string { return fmt.Sprintf("%d.%02d%%", bp/100, bp%100) }

func transitionLine(tr tdd.Transition) string {
	s := fmt.Sprintf("%s → %s", tr.From, tr.To)
	if next := tr.Status.Next(); next != "" {
		s += "; next: " + next
	}
	return s
}

type fileStamp struct {
	size  int64
	mtime int64
	mode  fs.FileMode
}

// snapshotUpper records the stamp of every non-directory entry of the
// change set's upper directory (only what the session changed, so small).
func snapshotUpper(upper string) map[string]fileStamp {
	m := map[string]fileStamp{}
	_ = filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(upper, p)
		m[filepath.ToSlash(rel)] = fileStamp{fi.Size(), fi.ModTime().UnixNano(), fi.Mode()}
		return nil
	})
	return m
}

// changedSince lists the entries of upper that are new or different
// since before, or gone (sorted).
func changedSince(upper string, before map[string]fileStamp) []string {
	after := snapshotUpper(upper)
	var out []string
	for p, st := range after {
		if b, ok := before[p]; !ok || b != st {
			out = append(out, p)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// Exclusive runs fn while no call runs (waiting for the running ones):
// the kernel applies or discards the change set through it, since a
// sandbox may have the upper directory mounted during a call.
func (r *Router) Exclusive(fn func() error) error {
	r.order.Lock()
	defer r.order.Unlock()
	return fn()
}
