package wiring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/netproxy"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/secret"
	"github.com/fluffy-agent/fluffy/internal/tool"
	"github.com/fluffy-agent/fluffy/internal/tool/router"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// SecretUseTool is the tool name of the operation a declared use of a
// secret puts to the policy (action secret): its argv is [reference,
// mode, name], its hosts a proxy use's bind hosts. No model tool has this
// name: the model cannot name a secret.
const SecretUseTool = "secret.use"

// SecretsMount is where a sandbox finds the files of its file uses.
const SecretsMount = "/run/secrets"

// ErrSecretRefused wraps every refusal of a declared use.
var ErrSecretRefused = errors.New("secret use refused")

// kernelSecrets are the daemon's secret broker and the person's declared
// uses, shared by the sessions. It implements kernel.Revoker: a session's
// values are zeroed when it ends.
type kernelSecrets struct {
	broker *secret.Broker
	uses   []secret.Use
	log    *slog.Logger
	// tmp is the tmpfs the file uses' directories are made in.
	tmp string
}

// newKernelSecrets builds the broker when the person declared uses (nil
// otherwise: no secret enters any sandbox). Declarations that do not
// check are an error: the kernel does not start on them.
func newKernelSecrets(u *userenv.Env, log *slog.Logger) (*kernelSecrets, error) {
	uses, err := u.SecretUses()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", userenv.ErrUsage, err)
	}
	if len(uses) == 0 && !skillsWantSecrets(u) {
		return nil, nil
	}
	// The daemon has no terminal: the password files of the
	// configuration, or the backend stays locked.
	b, err := u.SecretBroker(nil)
	if err != nil {
		return nil, err
	}
	return &kernelSecrets{broker: b, uses: uses, log: log, tmp: secretsTmpfs()}, nil
}

// secretsTmpfs is a tmpfs for file uses: /dev/shm, or the runtime
// directory; "" when neither is one (file uses are then refused rather
// than written to a disk).
func secretsTmpfs() string {
	for _, d := range []string{"/dev/shm", os.Getenv("XDG_RUNTIME_DIR")} {
		var st unix.Statfs_t
		if d != "" && unix.Statfs(d, &st) == nil && st.Type == unix.TMPFS_MAGIC {
			return d
		}
	}
	return ""
}

// EndSession zeroes the session's values.
func (k *kernelSecrets) EndSession(session string) {
	k.broker.EndSession(context.Background(), session)
}

// Close zeroes every value and locks the backends.
func (k *kernelSecrets) Close() { k.broker.Close(context.Background()) }

// sessionSecrets decides and hands out one session's declared uses.
type sessionSecrets struct {
	k        *kernelSecrets
	live     *livePolicy
	ws       string
	session  string
	rec      router.Recorder
	approver router.Approver
	// cs is the session's change set: files a command wrote a value into
	// are marked there (nil: none are).
	cs secretMarker

	// mu guards pending: each running command's proxy swaps, by call,
	// until its egress proxy takes them (proxySwaps).
	mu      sync.Mutex
	pending map[string][]secret.Swap
}

// secretMarker is what sessionSecrets needs of a change set
// (*changeset.ChangeSet implements it).
type secretMarker interface {
	UpperDir() string
	MarkSecrets(rels []string) error
}

// forSession returns one session's side of the broker.
func (k *kernelSecrets) forSession(live *livePolicy, ws, session string, rec router.Recorder, approver router.Approver, cs secretMarker) *sessionSecrets {
	return &sessionSecrets{k: k, live: live, ws: ws, session: session, rec: rec, approver: approver, cs: cs, pending: map[string][]secret.Swap{}}
}

// proxySwaps is the session's egress proxies' source of swaps: the proxy
// uses the router's Secrets hook (command) handed out for call, taken
// once. The values stay the command's: its Close zeroes them after the
// proxy has closed (the proxy keeps copies of its own until then).
func (s *sessionSecrets) proxySwaps(_ context.Context, call string) ([]netproxy.Swap, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []netproxy.Swap
	for _, sw := range s.pending[call] {
		out = append(out, netproxy.Swap{Placeholder: sw.Placeholder, Value: sw.Value, Hosts: sw.Hosts, TLS: sw.TLS, Name: sw.Ref.String()})
	}
	delete(s.pending, call)
	return out, nil
}

// secretOp is the operation a use puts to the policy.
func secretOp(u secret.Use, session, ws string) operation.Operation {
	op := operation.Operation{Tool: SecretUseTool, Action: operation.Secret, Argv: []string{u.Ref.String(), string(u.As), u.Name},
		Session: operation.Session{ID: session, Workspace: ws}, Tags: []string{"secrets"}}
	for _, h := range u.Bind {
		op.Hosts = append(op.Hosts, operation.Host{Name: h})
	}
	return op
}

// command hands a sandboxed command the uses in effect for it: each is
// decided (the policy's secret operation; approve asks the person, whose
// "for session" the broker remembers) and recorded before any value is
// fetched. One refused use refuses the command.
func (s *sessionSecrets) command(ctx context.Context, call, template string, progs []string) (router.SandboxSecrets, error) {
	var in []secret.Use
	for _, u := range s.k.uses {
		if u.Applies(template, progs) {
			in = append(in, u)
		}
	}
	start := time.Now()
	if len(in) == 0 {
		// A command without secrets can still copy a value an earlier
		// one wrote into the change set.
		if s.k.broker.Holds(s.session) {
			// Its output can hold a value too (a file an earlier
			// command wrote): read and redacted outside the heap.
			arena := &secret.Arena{}
			return router.SandboxSecrets{Scratch: arena, Redact: s.redact, Close: func() {
				_ = arena.Wipe()
				s.markWritten(start)
			}}, nil
		}
		return router.SandboxSecrets{}, nil
	}
	rules := make([]string, len(in))
	for i, u := range in {
		rule, err := s.decide(ctx, call, u)
		if err != nil {
			return router.SandboxSecrets{}, err
		}
		rules[i] = rule
	}
	return s.handOut(ctx, call, in, rules, start)
}

// handOut fetches the decided uses (rules[i] allowed in[i]), records
// them, and turns them into what the sandbox gets; its Close marks the
// files the command (started at start) wrote a value into.
func (s *sessionSecrets) handOut(ctx context.Context, call string, in []secret.Use, rules []string, start time.Time) (router.SandboxSecrets, error) {
	inj, err := s.k.broker.Inject(ctx, s.session, in)
	if err != nil {
		_ = s.record(ctx, call, in[0], "refused", "broker", err.Error(), secret.Handout{})
		return router.SandboxSecrets{}, fmt.Errorf("%w: %w", ErrSecretRefused, err)
	}
	for i, h := range inj.Handouts {
		if err := s.record(ctx, call, in[i], "allowed", rules[i], "", h); err != nil {
			inj.Wipe()
			return router.SandboxSecrets{}, err
		}
	}
	out := router.SandboxSecrets{Env: inj.Env, Stdin: inj.Stdin, Scratch: inj.Arena, Redact: s.redact}
	if len(inj.Swaps) > 0 {
		// The command's egress proxy, started next, takes them
		// (proxySwaps); without network they are never used.
		s.mu.Lock()
		s.pending[call] = inj.Swaps
		s.mu.Unlock()
	}
	var dir string
	if len(inj.Files) > 0 {
		if dir, err = s.writeFiles(inj.Files); err != nil {
			inj.Wipe()
			return router.SandboxSecrets{}, fmt.Errorf("%w: %w", ErrSecretRefused, err)
		}
		out.Mounts = []sandbox.Mount{{Source: dir, Target: SecretsMount}}
	}
	out.Close = func() {
		if dir != "" {
			removeSecretDir(dir)
		}
		s.mu.Lock()
		delete(s.pending, call)
		s.mu.Unlock()
		inj.Wipe()
		s.markWritten(start)
	}
	return out, nil
}

// redact is a command's raw output without the session's values
// (router.SandboxSecrets.Redact); the sanitizer redacts the result again
// with every value any session holds.
func (s *sessionSecrets) redact(b []byte) []byte {
	if len(b) == 0 {
		return b
	}
	return s.k.broker.Redact(s.session, b, tool.DefaultRedaction)
}

// Bounds of the scan of a command's writes for values.
const (
	maxScanFile  = 4 << 20
	maxScanTotal = 64 << 20
)

// markWritten marks in the change set the files the command changed
// (status change at or after start: a command cannot set that time back)
// that hold a form of a value the session holds; their content is then
// not shown in a diff and they are applied only when named. Files over
// maxScanFile, and what lies beyond maxScanTotal, are not read (and
// logged).
func (s *sessionSecrets) markWritten(start time.Time) {
	if s.cs == nil || !s.k.broker.Holds(s.session) {
		return
	}
	upper := s.cs.UpperDir()
	var marked []string
	total := int64(0)
	_ = filepath.WalkDir(upper, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil || time.Unix(st.Ctim.Unix()).Before(start.Add(-time.Second)) {
			return nil
		}
		if st.Size > maxScanFile || total+st.Size > maxScanTotal {
			s.k.log.Warn("a file the command wrote is too large to check for secret values", "session", s.session, "path", p, "size", st.Size)
			return nil
		}
		total += st.Size
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		if s.k.broker.Contains(s.session, b) {
			if rel, err := filepath.Rel(upper, p); err == nil {
				marked = append(marked, rel)
			}
		}
		clear(b)
		return nil
	})
	if len(marked) == 0 {
		return
	}
	if err := s.cs.MarkSecrets(marked); err != nil {
		s.k.log.Error("files holding a secret value could not be marked in the change set", "session", s.session, "paths", marked, "err", err)
	}
}

// decide puts the use to the live policy and, on approve, to the person.
// It returns the rule that allowed it.
func (s *sessionSecrets) decide(ctx context.Context, call string, u secret.Use) (string, error) {
	e, err := s.live.engine(ctx, s.ws)
	if err != nil {
		return "", fmt.Errorf("%w: the policy does not load: %w", ErrSecretRefused, err)
	}
	op := secretOp(u, s.session, s.ws)
	d := e.Decide(ctx, op)
	switch d.Effect {
	case policy.Allow:
		return d.Rule, nil
	case policy.Approve:
		rule, why := s.ask(ctx, call, op, u, d)
		if why == "" {
			return rule, nil
		}
		_ = s.record(ctx, call, u, "refused", rule, why, secret.Handout{})
		return "", &RefusedUse{Rule: rule, Reason: why}
	}
	why := d.Reason
	if why == "" {
		why = u.Ref.String() + " is not allowed by the policy"
	}
	_ = s.record(ctx, call, u, "refused", d.Rule, why, secret.Handout{})
	return "", &RefusedUse{Rule: d.Rule, Reason: why}
}

// RefusedUse is a declared use the policy (or the person it asked)
// refused, with the deciding rule; it matches ErrSecretRefused.
type RefusedUse struct {
	Rule, Reason string
}

func (e *RefusedUse) Error() string { return ErrSecretRefused.Error() + ": " + e.Reason }

// Is makes every RefusedUse match ErrSecretRefused.
func (e *RefusedUse) Is(target error) bool { return target == ErrSecretRefused }

// ask asks the person; it returns the deciding rule and, when the use is
// not approved, why.
func (s *sessionSecrets) ask(ctx context.Context, call string, op operation.Operation, u secret.Use, d policy.Decision) (string, string) {
	if s.approver == nil {
		return d.Rule, fmt.Sprintf("%s needs a person's approval and this session has no one to ask", u.Ref)
	}
	summary := fmt.Sprintf("call %s of session %s: its command would get the secret %s (as %s %s) (rule %s)", call, s.session, u.Ref, u.As, u.Name, d.Rule)
	req, err := s.approver.Ask(ctx, s.session, summary, []approval.Step{{Op: op}})
	if err != nil || len(req.Items) != 1 {
		return d.Rule, fmt.Sprintf("%s needs a person's approval, which could not be asked: %v", u.Ref, err)
	}
	it := req.Items[0]
	rule := it.Eval.Rule
	if rule == "" {
		rule = d.Rule
	}
	if it.Decision.Verdict == approval.Approved && it.Eval.Effect != approval.EffectBlock {
		return rule, ""
	}
	why := it.Decision.Reason
	if why == "" {
		why = "denied"
	}
	return rule, fmt.Sprintf("the person did not approve %s (request %s): %s", u.Ref, req.ID, why)
}

// record writes the use's secret.use entry (durable before the command
// starts).
func (s *sessionSecrets) record(ctx context.Context, call string, u secret.Use, decision, rule, reason string, h secret.Handout) error {
	p := audit.SecretUse{Call: call, Ref: u.Ref.String(), As: string(u.As), Name: u.Name, Bind: u.Bind,
		Decision: decision, Rule: rule, Reason: reason, Fingerprint: h.Fingerprint, Cached: h.Cached}
	if s.rec == nil {
		return nil
	}
	if _, err := s.rec.Append(ctx, audit.Entry{Session: s.session, Kind: audit.KindSecretUse, Actor: "kernel", Payload: p}); err != nil {
		return fmt.Errorf("%w: recording the use of %s: %w", ErrSecretRefused, u.Ref, err)
	}
	return nil
}

// writeFiles writes the file uses into a new directory of the tmpfs,
// mode 0700, each file 0400.
func (s *sessionSecrets) writeFiles(files map[string][]byte) (string, error) {
	if s.k.tmp == "" {
		return "", errors.New("no tmpfs for a file use (neither /dev/shm nor $XDG_RUNTIME_DIR is one)")
	}
	dir, err := os.MkdirTemp(s.k.tmp, "fluffy-secrets-")
	if err != nil {
		return "", err
	}
	for name, v := range files {
		if strings.ContainsRune(name, '/') {
			removeSecretDir(dir)
			return "", fmt.Errorf("file use name %q", name)
		}
		if err := os.WriteFile(filepath.Join(dir, name), v, 0o400); err != nil {
			removeSecretDir(dir)
			return "", err
		}
	}
	return dir, nil
}

// removeSecretDir overwrites each file with zeros (a tmpfs page is then
// freed zeroed) and removes the directory.
func removeSecretDir(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if fi, err := e.Info(); err == nil {
			_ = os.Chmod(p, 0o600)
			_ = os.WriteFile(p, make([]byte, fi.Size()), 0o600)
		}
	}
	_ = os.RemoveAll(dir)
}

// disableCoreDumps sets the process's core size limit to 0, so a crash
// of the daemon writes no core file with a cached value in it (the
// values' pages are also marked MADV_DONTDUMP). PR_SET_DUMPABLE is left
// as it is: it would make /proc/PID of the sandboxes this process starts
// root's, and an unprivileged daemon could no longer write their uid_map.
func disableCoreDumps() error {
	return unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{Cur: 0, Max: 0})
}
