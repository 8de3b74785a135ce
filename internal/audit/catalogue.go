package audit

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
)

// This file is the catalogue of audit events: every kind fluffy writes and
// the payload type of each. Writers pass these types as Entry.Payload; the
// JSON tags are the schema. docs/audit.md (section "Event catalogue") lists
// the same kinds and members, and TestCatalogueMatchesDocs fails when the
// two disagree.
//
// Conventions: durations of what happened are in microseconds
// (duration_us); hashes are lower-case hex SHA-256; members of another
// package's type (an operation, a TDD decision) are typed any here, since
// the log imports none of those packages, and are described in the docs.

// The kinds fluffy writes. Kind.Synchronous says which are durable before
// Append returns.
const (
	// The tool router, for each tool call the model makes.
	KindToolRequest Kind = "tool.request"
	KindGateState   Kind = "gate.state"
	KindGatePolicy  Kind = "gate.policy"
	KindToolRead    Kind = "tool.read"
	KindToolRefused Kind = "tool.refused"

	// The approval broker and the policy's model-backed classifier.
	KindApprovalRequest  Kind = "approval.request"
	KindApprovalDecision Kind = "approval.decision"
	KindPolicyClassify   Kind = "policy.classify"
	KindPolicyChange     Kind = "policy.change"

	// Executions: a tool call through the router, or 'fluffy sandbox run'.
	KindExecStart Kind = "exec.start"
	KindExecEnd   Kind = "exec.end"

	// The egress proxy of a sandbox run.
	KindNetRequest Kind = "net.request"
	KindNetEnd     Kind = "net.end"
	KindNetRefused Kind = "net.refused"

	// The secret broker: a declared use of a secret, decided.
	KindSecretUse Kind = "secret.use"

	// The kernel: its own life, sessions, change sets, IPC peers.
	KindKernelStart        Kind = "kernel.start"
	KindKernelStop         Kind = "kernel.stop"
	KindIPCRefused         Kind = "ipc.refused"
	KindSessionCreate      Kind = "session.create"
	KindSessionClose       Kind = "session.close"
	KindSessionRemove      Kind = "session.rm"
	KindSessionUntrusted   Kind = "session.untrusted"
	KindSessionSpawn       Kind = "session.spawn"
	KindSessionRefused     Kind = "session.refused"
	KindTDDMode            Kind = "tdd.mode"
	KindTDDFinish          Kind = "tdd.finish"
	KindChangesetApply     Kind = "changeset.apply"
	KindChangesetDiscard   Kind = "changeset.discard"
	KindChangesetAutoApply Kind = "changeset.auto_apply"
	KindChangesetMerge     Kind = "changeset.merge"
	// KindStoreRecover: the kernel found fluffy.db damaged at its start
	// and restored a backup (internal/backup.Recover).
	KindStoreRecover Kind = "store.recover"
	// KindBackupRestore: a person put a backup back ('fluffy backup
	// restore'), recorded in the log as it is after the restore.
	KindBackupRestore Kind = "backup.restore"
	// KindSkillTrust: a person installed, granted, revoked or re-pinned
	// a skill installed from elsewhere (docs/skills.md).
	KindSkillTrust Kind = "skill.trust"
	// KindSkillImage: a skill's image was built for a run, its image
	// inputs having changed since its last build (docs/skills.md).
	KindSkillImage Kind = "skill.image"

	// The assistant daemon's channels (fluffy serve): what arrived, what
	// a channel refused, answers to approval requests.
	KindChannelInbound Kind = "channel.inbound"
	KindChannelRefused Kind = "channel.refused"
	KindChannelAnswer  Kind = "channel.answer"
	// KindChannelVerify: a step of a person's verification of a chat
	// channel's own device (Matrix SAS), confirmed by the operator.
	KindChannelVerify Kind = "channel.verify"

	// KindWebLogin is a login to the web console (docs/web.md).
	KindWebLogin Kind = "web.login"
	// KindWebPasskey is a passkey registered or removed on the web
	// console (docs/web.md).
	KindWebPasskey Kind = "web.passkey"

	// Plugins (docs/plugins.md): installed or imported, their state
	// changed by a person, changed tool descriptions approved.
	KindPluginInstall Kind = "plugin.install"
	KindPluginState   Kind = "plugin.state"
	KindPluginApprove Kind = "plugin.approve"
	// KindPluginServer: a plugin's MCP server started, exited, gave the
	// session's change set up to a command, or was given up after
	// repeated crashes (docs/plugins.md).
	KindPluginServer Kind = "plugin.server"
	// KindPluginTools: a plugin's tools pinned at their first start, or
	// one held back because it is new or differs from its pin.
	KindPluginTools Kind = "plugin.tools"

	// KindAuditPrune is written only by the log itself (Prune).
	KindAuditPrune Kind = "audit.prune"
	// KindUserNote is the one kind a person records by hand ('fluffy
	// audit append'), always with actor ActorUser.
	KindUserNote Kind = "user.note"
)

// Synchronous reports whether entries of this kind are written durably
// before Append returns: the security-relevant kinds (gate decisions,
// approvals, change-set applies, kernel start and stop, pruning, notes).
// Other kinds are buffered.
func (k Kind) Synchronous() bool {
	switch k {
	case KindSkillTrust, KindGateState, KindGatePolicy, KindApprovalRequest, KindApprovalDecision, KindPolicyChange,
		KindChangesetApply, KindKernelStart, KindKernelStop, KindAuditPrune, KindUserNote, KindStoreRecover, KindBackupRestore,
		KindChannelInbound, KindChannelRefused, KindChannelAnswer, KindChannelVerify, KindSessionSpawn, KindSessionRefused, KindChangesetMerge,
		KindWebLogin, KindWebPasskey, KindSecretUse, KindPluginInstall, KindPluginState, KindPluginApprove:
		return true
	}
	return false
}

// Payload is implemented by every payload type of the catalogue: Kind is
// the kind its entries have. Append refuses an entry whose payload is of
// another kind's type (ErrPayloadKind).
type Payload interface {
	Kind() Kind
}

// ErrPayloadKind is returned by Append for an entry whose Payload is a
// catalogue type of another kind (an ExecStart under exec.end).
var ErrPayloadKind = errors.New("payload type of another kind")

// Catalogue returns the zero value of every payload type, one per kind
// fluffy writes, in the order of docs/audit.md.
func Catalogue() []Payload {
	return []Payload{
		ToolRequest{}, GateState{}, GatePolicy{}, ToolRead{}, ToolRefused{},
		ApprovalRequest{}, ApprovalDecision{}, PolicyClassify{}, PolicyChange{},
		ExecStart{}, ExecEnd{},
		NetRequest{}, NetEnd{}, NetRefused{},
		SecretUse{},
		KernelStart{}, KernelStop{}, IPCRefused{},
		SessionCreate{}, SessionClose{}, SessionRemove{}, SessionUntrusted{}, SessionSpawn{}, SessionRefused{}, TDDMode{}, TDDFinish{},
		ChangesetApply{}, ChangesetDiscard{}, ChangesetAutoApply{}, ChangesetMerge{}, StoreRecover{}, BackupRestore{}, SkillTrust{},
		SkillImage{},
		ChannelInbound{}, ChannelRefused{}, ChannelAnswer{}, ChannelVerify{}, WebLogin{}, WebPasskey{},
		PluginInstall{}, PluginState{}, PluginApprove{},
		PluginServer{}, PluginTools{},
		AuditPrune{}, UserNote{},
	}
}

// ErrUnknownKind is returned by DecodePayload for a kind the catalogue
// does not hold.
var ErrUnknownKind = errors.New("kind not in the audit catalogue")

// DecodePayload reads the payload of an entry of kind k into its catalogue
// type (a value, not a pointer). Members the type does not know are
// ignored and old member names are accepted (exec.end's duration_ms), so
// entries written by older versions still read.
func DecodePayload(k Kind, raw []byte) (Payload, error) {
	for _, p := range Catalogue() {
		if p.Kind() != k {
			continue
		}
		v := reflect.New(reflect.TypeOf(p))
		if err := json.Unmarshal(raw, v.Interface()); err != nil {
			return nil, fmt.Errorf("audit: %s payload: %w", k, err)
		}
		return v.Elem().Interface().(Payload), nil
	}
	return nil, fmt.Errorf("audit: %w: %q", ErrUnknownKind, k)
}

// checkPayloadKind is Append's check that a catalogue payload goes with
// its own kind.
func checkPayloadKind(e Entry) error {
	if p, ok := e.Payload.(Payload); ok && p.Kind() != e.Kind {
		return fmt.Errorf("audit: %w: a %s payload in a %s entry", ErrPayloadKind, p.Kind(), e.Kind)
	}
	return nil
}

// SHA256 is a SHA-256 digest, written as 64 lower-case hex digits.
type SHA256 [32]byte

// MarshalText implements encoding.TextMarshaler.
func (h SHA256) MarshalText() ([]byte, error) { return hex.AppendEncode(nil, h[:]), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (h *SHA256) UnmarshalText(b []byte) error {
	if hex.DecodedLen(len(b)) != len(h) {
		return fmt.Errorf("audit: a SHA-256 is %d hex digits, not %d", 2*len(h), len(b))
	}
	_, err := hex.Decode(h[:], b)
	return err
}

// ToolRequest (tool.request) is a tool call as the model made it, written
// once a gate has judged it.
type ToolRequest struct {
	Call       string `json:"call"`
	Tool       string `json:"tool"`
	ArgsSHA256 SHA256 `json:"args_sha256"`
	ArgsBytes  int    `json:"args_bytes"`
	// Args are the raw arguments when they are valid JSON of at most
	// 4 KiB.
	Args json.RawMessage `json:"args,omitempty"`
	// Op is the normalized operation (operation.Operation), absent when
	// the call did not normalize.
	Op any `json:"op,omitempty"`
	// Via is the call on whose behalf this one was made: a skill run's
	// pending write names the run ("skill.run call ID"); absent for the
	// model's own calls.
	Via string `json:"via,omitempty"`
}

// GateState (gate.state) is the TDD state gate's decision on a call. A
// sandboxed command's writes are judged again after it ran (AfterExec).
type GateState struct {
	Call string `json:"call"`
	Tool string `json:"tool"`
	// Decision is the gate's tdd.Decision (allow, code, mode, state,
	// reason, ...).
	Decision any `json:"decision"`
	// AfterExec marks the judgement of what a command wrote (Written,
	// relative to the workspace) after it ran.
	AfterExec bool     `json:"after_exec,omitempty"`
	Written   []string `json:"written,omitempty"`
}

// UnmarshalJSON reads both shapes: entries written before the after-exec
// refusal carried its decision kept allow, code and reason at the top.
func (g *GateState) UnmarshalJSON(b []byte) error {
	type plain GateState
	var w struct {
		plain
		Allow  *bool   `json:"allow"`
		Code   *string `json:"code"`
		Reason *string `json:"reason"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*g = GateState(w.plain)
	if g.Decision == nil && (w.Allow != nil || w.Code != nil || w.Reason != nil) {
		d := map[string]any{}
		if w.Allow != nil {
			d["allow"] = *w.Allow
		}
		if w.Code != nil {
			d["code"] = *w.Code
		}
		if w.Reason != nil {
			d["reason"] = *w.Reason
		}
		g.Decision = d
	}
	return nil
}

// GatePolicy (gate.policy) is the policy gate's decision on a call.
type GatePolicy struct {
	Call    string `json:"call"`
	Tool    string `json:"tool"`
	Effect  string `json:"effect"` // allow, approve or block
	Rule    string `json:"rule"`
	Layer   string `json:"layer"`
	Reason  string `json:"reason"`
	Subject string `json:"subject"`
	Token   string `json:"token"`
	// Approval says how a person approved the call, when one did.
	Approval string `json:"approval,omitempty"`
}

// GateSummary is a gate's decision in short.
type GateSummary struct {
	Effect string `json:"effect"`
	Rule   string `json:"rule"`
}

// ToolRead (tool.read) is a fast-path read allowed by both gates: the
// one entry of such a call. Encode writes it without encoding/json.
type ToolRead struct {
	ArgsSHA256  SHA256      `json:"args_sha256"`
	Binary      bool        `json:"binary,omitempty"`
	Call        string      `json:"call"`
	CutBytes    int64       `json:"cut_bytes,omitempty"`
	DurationUS  int64       `json:"duration_us"`
	Error       string      `json:"error,omitempty"`
	GatePolicy  GateSummary `json:"gate_policy"`
	GateState   GateSummary `json:"gate_state"`
	IsError     bool        `json:"is_error,omitempty"`
	OutputBytes int64       `json:"output_bytes"`
	Paths       []string    `json:"paths,omitempty"`
	Redactions  int64       `json:"redactions,omitempty"`
	ShownBytes  int64       `json:"shown_bytes"`
	ShownSHA256 SHA256      `json:"shown_sha256"`
	Stripped    int64       `json:"stripped,omitempty"`
	Tool        string      `json:"tool"`
}

// Encode writes r into o (reset first) in canonical form, as encoding/json
// and Canonicalize would, without either: the router's fast path passes o
// as the payload. TestToolReadEncode keeps the two in step.
func (r *ToolRead) Encode(o *Object) {
	o.Reset()
	o.Hex("args_sha256", r.ArgsSHA256[:])
	if r.Binary {
		o.Bool("binary", true)
	}
	o.String("call", r.Call)
	if r.CutBytes != 0 {
		o.Int("cut_bytes", r.CutBytes)
	}
	o.Int("duration_us", r.DurationUS)
	if r.Error != "" {
		o.String("error", r.Error)
	}
	o.gate("gate_policy", r.GatePolicy)
	o.gate("gate_state", r.GateState)
	if r.IsError {
		o.Bool("is_error", true)
	}
	o.Int("output_bytes", r.OutputBytes)
	if len(r.Paths) > 0 {
		o.Strings("paths", r.Paths)
	}
	if r.Redactions != 0 {
		o.Int("redactions", r.Redactions)
	}
	o.Int("shown_bytes", r.ShownBytes)
	o.Hex("shown_sha256", r.ShownSHA256[:])
	if r.Stripped != 0 {
		o.Int("stripped", r.Stripped)
	}
	o.String("tool", r.Tool)
}

// ToolRefused (tool.refused) is a refusal by the decode, normalize or
// approval gate (the state and policy gates record theirs as gate.*).
type ToolRefused struct {
	Call string `json:"call"`
	Tool string `json:"tool"`
	// Refusal is the router's Refusal: gate, rule, reason, subject,
	// instead.
	Refusal any `json:"refusal"`
}

// ApprovalRequest (approval.request) is a plan put to a person; its
// members repeat the entry's kind and session.
type ApprovalRequest struct {
	EventKind Kind        `json:"kind"`
	RequestID string      `json:"request_id"`
	Session   string      `json:"session"`
	Who       ApprovalWho `json:"who"`
	// Items are the plan's steps (approval.ItemView: n, tool, signature,
	// effect, rule, decision).
	Items any `json:"items"`
}

// ApprovalDecision (approval.decision) is an answer to a plan, or its
// timeout or cancellation: the same members as ApprovalRequest.
type ApprovalDecision ApprovalRequest

// ApprovalWho is who answered, and through which channel.
type ApprovalWho struct {
	Name    string `json:"name"`
	Channel string `json:"channel"`
}

// PolicyClassify (policy.classify) is one call of the policy's
// model-backed classifier and its verdict.
type PolicyClassify struct {
	Model       string `json:"model"`
	Instruction string `json:"instruction"`
	// Op is what the model was shown of the operation.
	Op      any    `json:"op"`
	Verdict string `json:"verdict,omitempty"` // yes or no
	// Answer is the model's text when it was not a verdict.
	Answer string `json:"answer,omitempty"`
	Error  string `json:"error,omitempty"`
}

// PolicyChange (policy.change) is a workspace's policy files changing
// in a running kernel: written, durably, before the new rules decide
// anything.
type PolicyChange struct {
	// Workspace is the workspace whose policy changed ("" for the
	// kernel's working directory).
	Workspace string `json:"workspace"`
	// Files are the files whose content changed (a policy file or an
	// extension beside one); "absent" is a file that does not exist.
	Files []PolicyFile `json:"files"`
	// OldPolicy and NewPolicy are the digests of the policy before and
	// after (policy Engine.Digest), as gate.policy decisions name them.
	OldPolicy string `json:"old_policy"`
	NewPolicy string `json:"new_policy"`
	// Added and Removed are the ids of rules the change adds or removes.
	Added   []string `json:"added,omitempty"`
	Removed []string `json:"removed,omitempty"`
}

// PolicyFile is one changed file of a policy.change.
type PolicyFile struct {
	File      string `json:"file"`
	OldSHA256 string `json:"old_sha256"`
	NewSHA256 string `json:"new_sha256"`
}

// ExecStart (exec.start) is an execution about to start: a tool call
// through the router (Call, Tool, Class, ...) or a command of 'fluffy
// sandbox run' (Argv, Dir, ...). A sandboxed one starts only once this
// entry is durable.
type ExecStart struct {
	// Tool router.
	Call     string `json:"call,omitempty"`
	Tool     string `json:"tool,omitempty"`
	Class    string `json:"class,omitempty"` // kernel or sandbox
	Approval string `json:"approval,omitempty"`
	Runtime  string `json:"runtime,omitempty"`
	// Both: the sandbox template.
	Template string `json:"template,omitempty"`
	// fluffy sandbox run.
	Argv      []string    `json:"argv,omitempty"`
	Dir       string      `json:"dir,omitempty"`
	Workspace string      `json:"workspace,omitempty"`
	ChangeSet string      `json:"changeset,omitempty"`
	Network   string      `json:"network,omitempty"`
	Seccomp   string      `json:"seccomp,omitempty"`
	Limits    *ExecLimits `json:"limits,omitempty"`
	// Egress is the proxy's allow-list when the run has one: {mode,
	// allow, allow_addrs}.
	Egress any `json:"egress,omitempty"`
}

// ExecLimits are a sandbox run's resource limits.
type ExecLimits struct {
	WallMS    int64 `json:"wall_ms"`
	Memory    int64 `json:"memory"`
	Pids      int   `json:"pids"`
	CPUMS     int64 `json:"cpu_ms"`
	FileSize  int64 `json:"file_size"`
	OpenFiles int   `json:"open_files"`
	Output    int64 `json:"output"`
	Tmp       int64 `json:"tmp"`
}

// ExecEnd (exec.end) is the outcome of an execution, durable before the
// result is used. The router writes ToolOutput, 'fluffy sandbox run'
// Process; a command that never ran (its exec.start could not be made
// durable) has only its names and an Error made by NotRun.
type ExecEnd struct {
	// Tool router.
	Call    string `json:"call,omitempty"`
	Tool    string `json:"tool,omitempty"`
	IsError bool   `json:"is_error,omitempty"`
	// fluffy sandbox run.
	Template string   `json:"template,omitempty"`
	Argv     []string `json:"argv,omitempty"`

	DurationUS int64  `json:"duration_us"`
	Error      string `json:"error,omitempty"`
	*ToolOutput
	*Process
}

// UnmarshalJSON accepts duration_ms, which 'fluffy sandbox run' wrote
// before exec.end had one shape.
func (e *ExecEnd) UnmarshalJSON(b []byte) error {
	type plain ExecEnd
	return unmarshalOldDuration(b, (*plain)(e), &e.DurationUS)
}

// unmarshalOldDuration decodes b into v (a payload's type without its
// UnmarshalJSON) and, when b has no duration_us, sets *us from
// duration_ms, the name of the same duration in older entries.
func unmarshalOldDuration(b []byte, v any, us *int64) error {
	if err := json.Unmarshal(b, v); err != nil {
		return err
	}
	var old struct {
		DurationMS *int64 `json:"duration_ms"`
	}
	if err := json.Unmarshal(b, &old); err != nil {
		return err
	}
	if old.DurationMS != nil && *us == 0 {
		*us = *old.DurationMS * 1000
	}
	return nil
}

// ToolOutput is what the router made of a tool's output before the model
// saw it (tool.Sanitized).
type ToolOutput struct {
	OutputBytes int64  `json:"output_bytes"`
	ShownBytes  int64  `json:"shown_bytes"`
	ShownSHA256 SHA256 `json:"shown_sha256"`
	CutBytes    int64  `json:"cut_bytes"`
	Redactions  int64  `json:"redactions"`
	Stripped    int64  `json:"stripped"`
	Binary      bool   `json:"binary"`
	// TDD is the TDD machine's answer to the result, when it moved.
	TDD string `json:"tdd,omitempty"`
}

// Process is how a sandboxed process ended (sandbox.Result).
type Process struct {
	ExitCode  int      `json:"exit_code"`
	Signal    int      `json:"signal"`
	Killed    string   `json:"killed"`
	LimitsHit []string `json:"limits_hit"`
	Warnings  []string `json:"warnings"`
}

// NetRequest (net.request) is the egress proxy's decision on a request,
// durable before anything is relayed. Reason and Status are set for a
// denial, whose only entry this is.
type NetRequest struct {
	ID       string `json:"id"`
	Sandbox  string `json:"sandbox"`
	Method   string `json:"method"`
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Decision string `json:"decision"`
	Rule     string `json:"rule"`
	Reason   string `json:"reason,omitempty"`
	Status   int    `json:"status,omitempty"`
	// Exec is the sequence number of the run's exec.start.
	Exec uint64 `json:"exec,omitempty"`
	// Call is the id of the session's tool call whose command sent the
	// request (a session's proxy serves one call).
	Call string `json:"call,omitempty"`
	// Secrets names the secrets the proxy swapped into the request
	// (never their values).
	Secrets []string `json:"secrets,omitempty"`
	// TLS says the proxy terminated the request's TLS to swap secrets
	// in: a CONNECT it did not tunnel, or a request read inside one.
	TLS bool `json:"tls,omitempty"`
}

// SecretUse (secret.use) is one declared use of a secret for one
// sandboxed command, durable before the command starts: the reference and
// the keyed fingerprint (HMAC-SHA256 under the data directory's key), so
// that two uses of one value correlate; never the value.
type SecretUse struct {
	// Call is the tool call whose command the use is for.
	Call string `json:"call"`
	// Ref is the reference (secret://BACKEND/PATH).
	Ref string `json:"ref"`
	// As is how it enters: env, file, stdin, proxy; Name is the variable
	// or file name.
	As   string `json:"as"`
	Name string `json:"name,omitempty"`
	// Bind are a proxy use's hosts.
	Bind []string `json:"bind,omitempty"`
	// Decision is allowed or refused; Rule the policy rule (or the
	// approval) that decided; Reason why a use was refused.
	Decision string `json:"decision"`
	Rule     string `json:"rule"`
	Reason   string `json:"reason,omitempty"`
	// Fingerprint is the value's keyed fingerprint, for an allowed use.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Cached is set when the value came from the session's cache.
	Cached bool `json:"cached,omitempty"`
}

// NetEnd (net.end) is the outcome of an allowed egress request.
type NetEnd struct {
	ID         string `json:"id"`
	Sandbox    string `json:"sandbox"`
	Method     string `json:"method"`
	Host       string `json:"host"`
	Port       int    `json:"port"`
	Addr       string `json:"addr"`
	Decision   string `json:"decision"`
	Rule       string `json:"rule"`
	Reason     string `json:"reason"`
	Status     int    `json:"status"`
	BytesUp    int64  `json:"bytes_up"`
	BytesDown  int64  `json:"bytes_down"`
	DurationUS int64  `json:"duration_us"`
	Error      string `json:"error"`
	Exec       uint64 `json:"exec,omitempty"`
	// Request is the sequence number of the request's net.request.
	Request uint64 `json:"request,omitempty"`
	// Call is as in NetRequest.
	Call string `json:"call,omitempty"`
}

// UnmarshalJSON accepts duration_ms, which net.end carried before every
// duration was in microseconds.
func (e *NetEnd) UnmarshalJSON(b []byte) error {
	type plain NetEnd
	return unmarshalOldDuration(b, (*plain)(e), &e.DurationUS)
}

// NetRefused (net.refused) is a connection to a run's proxy from a peer
// that may not use it.
type NetRefused struct {
	Sandbox string `json:"sandbox"`
	PeerUID int    `json:"peer_uid"`
	PeerGID int    `json:"peer_gid"`
	PeerPID int    `json:"peer_pid"`
	Reason  string `json:"reason"`
	Exec    uint64 `json:"exec,omitempty"`
}

// KernelStart (kernel.start) is a kernel that verified the log and
// recovered from the previous one.
type KernelStart struct {
	PID                 int      `json:"pid"`
	InterruptedSessions []string `json:"interrupted_sessions"`
	OrphansRemoved      int      `json:"orphans_removed"`
	Verified            Verified `json:"verified"`
}

// Verified is the range of entries a verification checked.
type Verified struct {
	From        uint64 `json:"from"`
	To          uint64 `json:"to"`
	Checkpoints int    `json:"checkpoints"`
}

// KernelStop (kernel.stop) is a kernel stopping.
type KernelStop struct {
	PID      int    `json:"pid"`
	Cause    string `json:"cause"`
	UptimeMS int64  `json:"uptime_ms"`
	// Abandoned are sessions whose runs did not end when cancelled.
	Abandoned []string `json:"abandoned,omitempty"`
}

// StoreRecover (store.recover) records that fluffy.db failed its check at
// the kernel's start and what replaced it: the backup, where the damaged
// files were kept, and the sessions the backup lacks (lost) or holds in an
// older state (rolled_back).
type StoreRecover struct {
	Damage     string   `json:"damage"`
	Backup     string   `json:"backup"`
	Aside      []string `json:"aside"`
	Lost       []string `json:"lost,omitempty"`
	RolledBack []string `json:"rolled_back,omitempty"`
}

// BackupRestore (backup.restore) records a restore a person ran: the
// backup, what it put back (fluffy.db, audit.db), where the files it
// replaced were kept, the sessions lost or rolled back, and how many
// audit entries the log held past the backup (they are in the kept
// files, not in this log).
type BackupRestore struct {
	Backup     string   `json:"backup"`
	Restored   []string `json:"restored"`
	Aside      []string `json:"aside"`
	Lost       []string `json:"lost,omitempty"`
	RolledBack []string `json:"rolled_back,omitempty"`
	AuditLost  uint64   `json:"audit_lost,omitempty"`
}

// ChannelInbound (channel.inbound) is a message a channel of the assistant
// daemon delivered, before any session sees it. Text is not kept (it may
// be large or private); its size and digest are.
type ChannelInbound struct {
	Channel   string            `json:"channel"`
	Room      string            `json:"room,omitempty"`
	Principal string            `json:"principal"`
	Bytes     int               `json:"bytes"`
	SHA256    string            `json:"sha256"`
	Untrusted bool              `json:"untrusted,omitempty"`
	Source    string            `json:"source,omitempty"`
	Meta      map[string]string `json:"meta,omitempty"`
}

// ChannelRefused (channel.refused) is something a channel refused before
// any session saw it: a bad signature, a replay, a sender not allowed.
type ChannelRefused struct {
	Channel   string `json:"channel"`
	Principal string `json:"principal,omitempty"`
	Reason    string `json:"reason"`
	Detail    string `json:"detail,omitempty"`
	Remote    string `json:"remote,omitempty"`
}

// WebLogin (web.login) is a login to the web console: a one-time link
// exchanged (method "link", or absent) or a passkey's assertion verified
// (method "passkey", with the credential's id); who logged in and where
// the browser was.
type WebLogin struct {
	Principal  string `json:"principal"`
	Remote     string `json:"remote,omitempty"`
	Method     string `json:"method,omitempty"`
	Credential string `json:"credential,omitempty"`
}

// WebPasskey (web.passkey) is a passkey registered or removed on the web
// console (action "register" or "remove"): the principal, the
// credential's id (base64url) and where the browser was. A refused
// passkey login is a channel.refused.
type WebPasskey struct {
	Principal  string `json:"principal"`
	Action     string `json:"action"`
	Credential string `json:"credential"`
	Remote     string `json:"remote,omitempty"`
}

// PluginInstall (plugin.install) is a plugin recorded: installed from a
// folder (state "installed") or imported from a client's configuration
// (state "disabled", source the file). Checks are the capability
// pre-check's decisions, "CAPABILITY OBJECT: EFFECT by RULE".
type PluginInstall struct {
	Plugin       string   `json:"plugin"`
	Version      string   `json:"version"`
	Dir          string   `json:"dir"`
	Digest       string   `json:"digest"`
	State        string   `json:"state"`
	Signer       string   `json:"signer,omitempty"`
	Source       string   `json:"source,omitempty"`
	Capabilities []string `json:"capabilities,omitempty"`
	Checks       []string `json:"checks,omitempty"`
}

// PluginState (plugin.state) is a plugin's state changed by a person
// (enable, disable, rm: To "removed"), with the reason. On an enable that
// approved changed files, OldDigest is the digest approved before.
type PluginState struct {
	Plugin    string `json:"plugin"`
	From      string `json:"from"`
	To        string `json:"to"`
	Reason    string `json:"reason"`
	Digest    string `json:"digest,omitempty"`
	OldDigest string `json:"old_digest,omitempty"`
}

// PluginApprove (plugin.approve) is a person's approval of a plugin's
// tool descriptions that changed since they were pinned ('fluffy plugin
// approve-tools'): Tools the tool names, SHA256 the hash of each new pin
// (plugin.PinSHA256), in the same order.
type PluginApprove struct {
	Plugin string   `json:"plugin"`
	Tools  []string `json:"tools"`
	SHA256 []string `json:"sha256"`
}

// PluginServer (plugin.server) is an event of a plugin's MCP server in
// its sandbox: Event "start" (Tools are the tools it offered), "exit"
// (the process ended while the session ran: its status, the limit that
// killed it, Restarts so far), "yield" (ended to give the session's
// change set up to a command's sandbox; started again by its next call)
// or "failed" (it crashed too often and was given up; Error is the
// reason stored with the plugin's state).
type PluginServer struct {
	Plugin   string   `json:"plugin"`
	Event    string   `json:"event"`
	Runtime  string   `json:"runtime,omitempty"`
	Restarts int      `json:"restarts,omitempty"`
	ExitCode int      `json:"exit_code,omitempty"`
	Signal   int      `json:"signal,omitempty"`
	Killed   string   `json:"killed,omitempty"`
	Error    string   `json:"error,omitempty"`
	Tools    []string `json:"tools,omitempty"`
}

// PluginTools (plugin.tools) is Event "pinned" (the tools a plugin's
// server offered at its first start, now pinned) or "held" (one tool not
// registered until a person re-approves it: Change "new" or "changed",
// Fields naming what differs from its pin: description, schema,
// annotations).
type PluginTools struct {
	Plugin string   `json:"plugin"`
	Event  string   `json:"event"`
	Tools  []string `json:"tools"`
	Change string   `json:"change,omitempty"`
	Fields []string `json:"fields,omitempty"`
}

// ChannelAnswer (channel.answer) is an answer to an approval request that
// arrived on a channel, with its outcome: "accepted" (handed to the
// broker, which records the decision as approval.decision),
// "not_approver", "headless", "already_answered" or "invalid".
type ChannelAnswer struct {
	Channel   string `json:"channel"`
	Room      string `json:"room,omitempty"`
	Principal string `json:"principal"`
	RequestID string `json:"request_id"`
	// Event is the channel's id of what carried the answer (a Matrix
	// event id), when it has one.
	Event   string `json:"event,omitempty"`
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
}

// ChannelVerify (channel.verify) is a step of a person's interactive
// verification of a chat channel's own device: "started", "confirmed"
// (by the operator, after comparing the SAS), "cancelled" or "done".
type ChannelVerify struct {
	Channel      string `json:"channel"`
	Principal    string `json:"principal"`
	Device       string `json:"device"`
	ID           string `json:"id"`
	Step         string `json:"step"`
	Room         string `json:"room,omitempty"`
	SAS          string `json:"sas,omitempty"`
	MasterKey    string `json:"master_key,omitempty"`
	Repinned     bool   `json:"repinned,omitempty"`
	PinnedBefore string `json:"pinned_before,omitempty"`
	Reason       string `json:"reason,omitempty"`
}

// IPCRefused (ipc.refused) is a connection to the kernel's socket from a
// peer of another user.
type IPCRefused struct {
	PID     int32  `json:"pid"`
	UID     uint32 `json:"uid"`
	GID     uint32 `json:"gid"`
	WantUID uint32 `json:"want_uid"`
	Reason  string `json:"reason"`
}

// SessionCreate (session.create) is a new session.
type SessionCreate struct {
	Workspace string `json:"workspace"`
	Model     string `json:"model"`
	Task      string `json:"task"`
	ChangeSet string `json:"changeset"`
}

// SessionClose (session.close) is a session closed, its change set
// applied (Applied paths) or discarded.
type SessionClose struct {
	Applied   int  `json:"applied"`
	Discarded bool `json:"discarded"`
}

// SessionRemove (session.rm) is a session removed, written before the
// removal.
type SessionRemove struct {
	Status    string `json:"status"`
	Workspace string `json:"workspace"`
	Discarded bool   `json:"discarded"`
}

// SessionUntrusted (session.untrusted) is a session marked as having read
// untrusted data, once, by what first made it so: Cause is "inbound" (a
// message no principal wrote was delivered to it) or "tool" (the result
// of a tool whose output is untrusted, Tool and Call); Source says what
// the data was ("webhook github push").
type SessionUntrusted struct {
	Cause  string `json:"cause"`
	Source string `json:"source"`
	Tool   string `json:"tool,omitempty"`
	Call   string `json:"call,omitempty"`
}

// ChangesetMerge (changeset.merge) is what became of a sub-agent's
// changes at the end of its run, on the parent's session: Merged into
// the parent's change set after a person approved request Request, or
// not, and why (Reason).
type ChangesetMerge struct {
	Child   string   `json:"child"`
	Paths   []string `json:"paths"`
	Merged  bool     `json:"merged"`
	Request string   `json:"request,omitempty"`
	Reason  string   `json:"reason,omitempty"`
}

// SessionSpawn (session.spawn) is a sub-agent created: the entry's
// session is the child (its Parent and Root place it in the tree). Tools
// are the child's whole tool set, Policy the SHA-256 of its own narrowing
// rules ("" without), Budget what was carved out of the parent's.
type SessionSpawn struct {
	Parent string      `json:"parent"`
	Task   string      `json:"task"`
	Depth  int         `json:"depth"`
	Tools  []string    `json:"tools"`
	Policy string      `json:"policy,omitempty"`
	Budget SpawnBudget `json:"budget"`
}

// SpawnBudget is a sub-agent's budget; a zero member is no limit of its
// own (the kernel's still applies).
type SpawnBudget struct {
	Turns  int     `json:"turns"`
	Tokens int     `json:"tokens"`
	Cost   float64 `json:"cost"`
	TimeMS int64   `json:"time_ms"`
}

// SessionRefused (session.refused) is a sessions.* request the kernel
// refused: Op is spawn, history or send; Code says which rule (tool,
// policy, budget, depth, fanout, scope); Target is the session asked
// about, Tool the tool asked for.
type SessionRefused struct {
	Op     string `json:"op"`
	Code   string `json:"code"`
	Reason string `json:"reason"`
	Target string `json:"target,omitempty"`
	Tool   string `json:"tool,omitempty"`
}

// TDDMode (tdd.mode) is a person switching a session's TDD mode.
type TDDMode struct {
	From     string   `json:"from"`
	To       string   `json:"to"`
	State    string   `json:"state"`
	By       string   `json:"by"`
	Reason   string   `json:"reason"`
	Reverted []string `json:"reverted"`
}

// TDDFinish (tdd.finish) is the TDD machine deciding whether a session
// whose model stopped with explore mode's tech debt open may finish:
// Accepted, or refused with Code and Reason; Files are the indebted
// files it judged.
type TDDFinish struct {
	Accepted bool     `json:"accepted"`
	Code     string   `json:"code,omitempty"`
	Reason   string   `json:"reason,omitempty"`
	Files    []string `json:"files"`
}

// ChangesetApply (changeset.apply) is a change set (or part of it)
// applied to the workspace.
type ChangesetApply struct {
	Paths []string `json:"paths"`
	// Selected are the paths asked for; absent: all of them.
	Selected  []string `json:"selected,omitempty"`
	Workspace string   `json:"workspace,omitempty"`
	// Auto marks an apply by the kernel itself (changeset.auto_apply),
	// with the criteria that held.
	Auto     bool `json:"auto,omitempty"`
	Criteria any  `json:"criteria,omitempty"`
}

// ChangesetDiscard (changeset.discard) is a change set (or part of it)
// discarded.
type ChangesetDiscard struct {
	Paths    []string `json:"paths"`
	Selected []string `json:"selected,omitempty"`
}

// ChangesetAutoApply (changeset.auto_apply) is the kernel's decision to
// apply a change set by itself ("apply" or "keep", with every criterion),
// durable before it acts, or a failed apply ("failed", Error).
type ChangesetAutoApply struct {
	Decision string `json:"decision"`
	// Criteria are the kernel's Criterion list: name, ok, detail.
	Criteria any      `json:"criteria,omitempty"`
	Paths    []string `json:"paths,omitempty"`
	Error    string   `json:"error,omitempty"`
}

// SkillTrust (skill.trust) is a person's decision about a skill installed
// from elsewhere: Action is install, grant, revoke or pin.
type SkillTrust struct {
	Action string `json:"action"`
	Name   string `json:"name"`
	// Digest is the skill's pin after the action; Previous the pin a
	// re-pin replaced.
	Digest   string `json:"digest"`
	Previous string `json:"previous,omitempty"`
	Source   string `json:"source,omitempty"`
	Commit   string `json:"commit,omitempty"`
	Signer   string `json:"signer,omitempty"`
	// Findings are the scanner's findings the person insisted past
	// (file:line: rule: why).
	Findings []string `json:"findings,omitempty"`
	// Network and Credentials (references) are what a grant gave.
	Network     []string `json:"network,omitempty"`
	Credentials []string `json:"credentials,omitempty"`
	// Changed and Widening are what a re-pin took in: the paths, and how
	// the manifest widened.
	Changed  []string `json:"changed,omitempty"`
	Widening []string `json:"widening,omitempty"`
}

// SkillImage (skill.image) is a skill's image built before a run (its
// Dockerfile or build context changed since the last build, or it had
// none): the image the run starts from.
type SkillImage struct {
	Skill      string `json:"skill"`
	Dir        string `json:"dir"`
	Dockerfile string `json:"dockerfile"`
	Image      string `json:"image"`
}

// AuditPrune (audit.prune) records a pruning; verifiers accept a log
// whose start is missing only behind one (docs/audit.md, Retention).
type AuditPrune struct {
	Anchor  uint64 `json:"anchor"`
	Root    string `json:"root"`  // base64
	Chain   string `json:"chain"` // base64
	Before  string `json:"before"`
	Deleted uint64 `json:"deleted"`
}

// UserNote (user.note) is a person's note: any JSON object.
type UserNote map[string]any

// Kind implementations: each payload type names its kind.

func (ToolRequest) Kind() Kind        { return KindToolRequest }
func (GateState) Kind() Kind          { return KindGateState }
func (GatePolicy) Kind() Kind         { return KindGatePolicy }
func (ToolRead) Kind() Kind           { return KindToolRead }
func (ToolRefused) Kind() Kind        { return KindToolRefused }
func (ApprovalRequest) Kind() Kind    { return KindApprovalRequest }
func (ApprovalDecision) Kind() Kind   { return KindApprovalDecision }
func (PolicyClassify) Kind() Kind     { return KindPolicyClassify }
func (PolicyChange) Kind() Kind       { return KindPolicyChange }
func (ExecStart) Kind() Kind          { return KindExecStart }
func (ExecEnd) Kind() Kind            { return KindExecEnd }
func (NetRequest) Kind() Kind         { return KindNetRequest }
func (NetEnd) Kind() Kind             { return KindNetEnd }
func (NetRefused) Kind() Kind         { return KindNetRefused }
func (SecretUse) Kind() Kind          { return KindSecretUse }
func (KernelStart) Kind() Kind        { return KindKernelStart }
func (KernelStop) Kind() Kind         { return KindKernelStop }
func (IPCRefused) Kind() Kind         { return KindIPCRefused }
func (SessionCreate) Kind() Kind      { return KindSessionCreate }
func (SessionClose) Kind() Kind       { return KindSessionClose }
func (SessionUntrusted) Kind() Kind   { return KindSessionUntrusted }
func (SessionRemove) Kind() Kind      { return KindSessionRemove }
func (SessionSpawn) Kind() Kind       { return KindSessionSpawn }
func (SessionRefused) Kind() Kind     { return KindSessionRefused }
func (TDDMode) Kind() Kind            { return KindTDDMode }
func (TDDFinish) Kind() Kind          { return KindTDDFinish }
func (ChangesetApply) Kind() Kind     { return KindChangesetApply }
func (ChangesetDiscard) Kind() Kind   { return KindChangesetDiscard }
func (ChangesetAutoApply) Kind() Kind { return KindChangesetAutoApply }
func (StoreRecover) Kind() Kind       { return KindStoreRecover }
func (BackupRestore) Kind() Kind      { return KindBackupRestore }
func (SkillTrust) Kind() Kind         { return KindSkillTrust }
func (SkillImage) Kind() Kind         { return KindSkillImage }
func (ChangesetMerge) Kind() Kind     { return KindChangesetMerge }
func (ChannelInbound) Kind() Kind     { return KindChannelInbound }
func (ChannelRefused) Kind() Kind     { return KindChannelRefused }
func (ChannelAnswer) Kind() Kind      { return KindChannelAnswer }
func (ChannelVerify) Kind() Kind      { return KindChannelVerify }
func (WebLogin) Kind() Kind           { return KindWebLogin }
func (WebPasskey) Kind() Kind         { return KindWebPasskey }
func (PluginInstall) Kind() Kind      { return KindPluginInstall }
func (PluginState) Kind() Kind        { return KindPluginState }
func (PluginApprove) Kind() Kind      { return KindPluginApprove }
func (PluginServer) Kind() Kind       { return KindPluginServer }
func (PluginTools) Kind() Kind        { return KindPluginTools }
func (AuditPrune) Kind() Kind         { return KindAuditPrune }
func (UserNote) Kind() Kind           { return KindUserNote }
