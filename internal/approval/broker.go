package approval

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
)

// Effect is a policy answer as the approval flow sees it.
type Effect string

// The effects, mirroring the policy engine.
const (
	EffectAllow   Effect = "allow"
	EffectApprove Effect = "approve"
	EffectBlock   Effect = "block"
)

// Evaluation is the policy engine's answer for one step.
type Evaluation struct {
	Effect Effect `json:"effect"`
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
	// Policy is the digest of the policy that evaluated (policy
	// Engine.Digest): an approval "for session" counts only under it.
	Policy string `json:"policy,omitempty"`
}

// Evaluator pre-evaluates a step (the policy engine, wired by the kernel).
// An error makes the step blocked: the flow fails closed.
type Evaluator interface {
	Evaluate(ctx context.Context, op operation.Operation) (Evaluation, error)
}

// Notifier shows a request to the person (the session's channel). It must
// not block until the answer: answers arrive through Broker.Answer.
type Notifier interface {
	Notify(ctx context.Context, req Request) error
}

// Recorder writes approval events durably (the audit log's synchronous
// path). An error fails the approval closed: a request that cannot be
// recorded is not asked, a decision that cannot be recorded does not count.
type Recorder interface {
	Record(ctx context.Context, ev Event) error
}

// Event is what the broker records.
type Event struct {
	Kind      string     `json:"kind"` // approval.request or approval.decision
	RequestID string     `json:"request_id"`
	Session   string     `json:"session"`
	Who       Who        `json:"who"`
	Items     []ItemView `json:"items"`
}

// ItemView is one step in an event: its number, effect, rule, signature and
// decision.
type ItemView struct {
	N         int      `json:"n"`
	Tool      string   `json:"tool"`
	Signature string   `json:"signature"`
	Effect    Effect   `json:"effect"`
	Rule      string   `json:"rule,omitempty"`
	Decision  Decision `json:"decision"`
}

// Who answered, and through which channel. Timeouts are answered by
// {Name: "timeout", Channel: "kernel"}.
type Who struct {
	Name    string `json:"name"`
	Channel string `json:"channel"`
}

// Step is one operation of a plan, as the agent proposed it.
type Step struct {
	Op operation.Operation `json:"op"`
	// Note is the agent's one-line description of the step.
	Note string `json:"note,omitempty"`
	// Preview is what a person needs to judge it: the diff of a write,
	// the argv of a command.
	Preview string `json:"preview,omitempty"`
}

// Item is a step with its evaluation and current decision.
type Item struct {
	N int `json:"n"`
	Step
	Eval     Evaluation `json:"eval"`
	Decision Decision   `json:"decision"`
}

// Request is one consolidated question.
type Request struct {
	ID       string    `json:"id"`
	Session  string    `json:"session"`
	Summary  string    `json:"summary"`
	Items    []Item    `json:"items"`
	Created  time.Time `json:"created"`
	Deadline time.Time `json:"deadline"`
}

// Open reports whether any step still waits for a person.
func (r *Request) Open() bool {
	for _, it := range r.Items {
		if it.Decision.Verdict == Pending {
			return true
		}
	}
	return false
}

// ErrUnknownRequest is returned by Answer for an id that is not pending.
var ErrUnknownRequest = errors.New("no pending approval request with that id")

// Options configures a Broker. Evaluator, Notifier and Recorder are
// required.
type Options struct {
	Evaluator Evaluator
	Notifier  Notifier
	Recorder  Recorder
	// Timeout is how long a request waits before its open steps are
	// denied. Default 10 minutes.
	Timeout time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Broker holds open requests and the session-scoped approvals.
type Broker struct {
	opts Options

	mu sync.Mutex // guards the fields below
	// pending maps a request id to its state.
	pending map[string]*pending
	// sessionOK holds approvals given "for session":
	// session -> sessionKey(rule, signature) -> the policy digest they
	// were given under.
	sessionOK map[string]map[string]string
}

type pending struct {
	req     Request
	version int           // bumped at every change of req
	done    chan struct{} // closed when no step is open any more
	// answering admits one answer at a time: a second one waits until
	// the first is recorded and applied, then meets its outcome, so no
	// decision is ever recorded that does not apply.
	answering chan struct{}
}

// NewBroker checks opts and returns a broker.
func NewBroker(opts Options) (*Broker, error) {
	if opts.Evaluator == nil || opts.Notifier == nil || opts.Recorder == nil {
		return nil, errors.New("approval: Evaluator, Notifier and Recorder are required")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Broker{opts: opts, pending: map[string]*pending{}, sessionOK: map[string]map[string]string{}}, nil
}

// Ask evaluates every step, asks the person ONE question about the steps
// that need approval, and waits until each is decided, the timeout denies
// what is left, or ctx ends (which also denies what is left). Steps the
// policy allows are approved without asking; blocked steps are denied with
// their rule and cannot be approved. The returned request holds the final
// decision of every step.
func (b *Broker) Ask(ctx context.Context, session, summary string, steps []Step) (Request, error) {
	if len(steps) == 0 {
		return Request{}, errors.New("approval: a plan needs at least one step")
	}
	now := b.opts.Now()
	req := Request{Session: session, Summary: summary, Created: now, Deadline: now.Add(b.opts.Timeout)}
	for i, s := range steps {
		it := Item{N: i + 1, Step: s}
		ev, err := b.opts.Evaluator.Evaluate(ctx, s.Op)
		if err != nil {
			ev = Evaluation{Effect: EffectBlock, Rule: "evaluation-error", Reason: "the policy could not evaluate this step: " + err.Error()}
		}
		it.Eval = ev
		switch ev.Effect {
		case EffectAllow:
			it.Decision = Decision{Verdict: Approved, Scope: ScopeOnce, Reason: "allowed by rule " + ev.Rule}
		case EffectApprove:
			// An operation whose files could not be bound matches
			// no earlier approval: its signature does not say what
			// it runs.
			covered, stale := false, false
			// A rule that asks each time (a memory write of an
			// untrusted session) is never covered by an earlier
			// approval for the session.
			if s.Op.Unbound == "" && !policy.AskedEachTime(ev.Rule) {
				covered, stale = b.coveredForSession(session, ev.Policy, ev.Rule, s.Op.Signature())
			}
			switch {
			case covered:
				it.Decision = Decision{Verdict: Approved, Scope: ScopeSession, Reason: "approved earlier for this session"}
			case stale:
				// Say why a person is asked again.
				it.Decision = Decision{Verdict: Pending}
				it.Eval.Reason += " (approved earlier for this session, but the policy changed since this approval: asked again)"
			default:
				it.Decision = Decision{Verdict: Pending}
			}
		default:
			it.Decision = Decision{Verdict: Denied, Reason: fmt.Sprintf("blocked by rule %s: %s", ev.Rule, ev.Reason)}
		}
		req.Items = append(req.Items, it)
	}
	p := &pending{req: req, done: make(chan struct{}), answering: make(chan struct{}, 1)}
	b.mu.Lock()
	id, err := b.newID()
	if err != nil {
		b.mu.Unlock()
		return Request{}, err
	}
	p.req.ID = id
	snapshot := cloneRequest(p.req)
	open := p.req.Open()
	if open {
		b.pending[id] = p
	}
	b.mu.Unlock()
	if err := b.record(ctx, "approval.request", snapshot, Who{Name: "agent", Channel: "kernel"}); err != nil {
		b.drop(id)
		return Request{}, err
	}
	if !open {
		return snapshot, nil
	}
	if err := b.opts.Notifier.Notify(ctx, snapshot); err != nil {
		b.drop(id)
		return Request{}, fmt.Errorf("approval: notify the person: %w", err)
	}
	timer := time.NewTimer(b.opts.Timeout)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		b.expire(ctx, id, fmt.Sprintf("no answer within %s", b.opts.Timeout), Who{Name: "timeout", Channel: "kernel"})
	case <-ctx.Done():
		// Record on a fresh context: the caller's is gone, the denial
		// must still be logged.
		b.expire(context.WithoutCancel(ctx), id, "the session stopped waiting", Who{Name: "cancel", Channel: "kernel"})
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.pending, id)
	return cloneRequest(p.req), nil
}

// Answer applies a person's answer to request id. A malformed answer, or
// one that tries to approve a blocked or already-decided step, is refused
// with an explanation and changes nothing. Steps the answer leaves open are
// asked again through the Notifier.
func (b *Broker) Answer(ctx context.Context, id, text string, who Who) error {
	b.mu.Lock()
	p, ok := b.pending[id]
	b.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownRequest, id)
	}
	select {
	case p.answering <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-p.answering }()
	b.mu.Lock()
	if cur, ok := b.pending[id]; !ok || cur != p || !p.req.Open() {
		// Unknown, or decided and about to be removed (answered from
		// another terminal, expired): nothing to answer.
		b.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrUnknownRequest, id)
	}
	ans, err := ParseAnswer(text, len(p.req.Items))
	if err != nil {
		b.mu.Unlock()
		return err
	}
	next := cloneRequest(p.req)
	version := p.version
	explicit := explicitSteps(text, len(next.Items))
	for i := range next.Items {
		it := &next.Items[i]
		d := ans.Steps[i]
		if it.Decision.Verdict != Pending {
			// Already decided (allowed, blocked or answered): an
			// explicit attempt to change it is an error, a blanket
			// form simply does not apply.
			if explicit[it.N] && d.Verdict != Pending {
				b.mu.Unlock()
				if it.Eval.Effect == EffectBlock {
					return fmt.Errorf("approval: step %d is blocked by rule %s and cannot be approved or denied", it.N, it.Eval.Rule)
				}
				return fmt.Errorf("approval: step %d is already %s", it.N, it.Decision.Verdict)
			}
			continue
		}
		it.Decision = d
	}
	b.mu.Unlock()
	// Record before the decision takes effect.
	if err := b.record(ctx, "approval.decision", next, who); err != nil {
		return err
	}
	b.mu.Lock()
	if _, still := b.pending[id]; !still || !p.req.Open() {
		b.mu.Unlock()
		return fmt.Errorf("%w: %q (decided while this answer was recorded)", ErrUnknownRequest, id)
	}
	if p.version != version {
		b.mu.Unlock()
		return fmt.Errorf("approval: request %s changed while this answer was recorded; answer again", id)
	}
	p.req = next
	p.version++
	for _, it := range next.Items {
		if it.Decision.Verdict == Approved && it.Decision.Scope == ScopeSession && it.Eval.Effect == EffectApprove && it.Op.Unbound == "" && !policy.AskedEachTime(it.Eval.Rule) {
			b.rememberLocked(next.Session, it.Eval.Policy, it.Eval.Rule, it.Op.Signature())
		}
	}
	open := next.Open()
	if !open {
		close(p.done)
	}
	snapshot := cloneRequest(next)
	b.mu.Unlock()
	if open {
		if err := b.opts.Notifier.Notify(ctx, snapshot); err != nil {
			return fmt.Errorf("approval: ask again about the open steps: %w", err)
		}
	}
	return nil
}

// Pending lists the open requests of a session ("" for all), oldest first.
func (b *Broker) Pending(session string) []Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Request
	for _, p := range b.pending {
		if (session == "" || p.req.Session == session) && p.req.Open() {
			out = append(out, cloneRequest(p.req))
		}
	}
	sortRequests(out)
	return out
}

// CoveredForSession reports whether a person approved operations with this
// rule and signature for the rest of the session, under the policy with
// this digest.
func (b *Broker) CoveredForSession(session, policyDigest, rule, signature string) bool {
	ok, _ := b.coveredForSession(session, policyDigest, rule, signature)
	return ok
}

// EndSession forgets the session's approvals.
func (b *Broker) EndSession(session string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.sessionOK, session)
}

func sessionKey(rule, sig string) string { return rule + "\x00" + sig }

// coveredForSession reports whether the approval holds under policy, and
// whether one was given under another policy (stale).
func (b *Broker) coveredForSession(session, policy, rule, sig string) (ok, stale bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	given, found := b.sessionOK[session][sessionKey(rule, sig)]
	return found && given == policy, found && given != policy
}

func (b *Broker) rememberLocked(session, policy, rule, sig string) {
	if b.sessionOK[session] == nil {
		b.sessionOK[session] = map[string]string{}
	}
	b.sessionOK[session][sessionKey(rule, sig)] = policy
}

// expire denies every open step of request id.
func (b *Broker) expire(ctx context.Context, id, reason string, who Who) {
	b.mu.Lock()
	p, ok := b.pending[id]
	if !ok || !p.req.Open() {
		b.mu.Unlock()
		return
	}
	p.version++
	for i := range p.req.Items {
		if p.req.Items[i].Decision.Verdict == Pending {
			p.req.Items[i].Decision = Decision{Verdict: Denied, Reason: reason}
		}
	}
	snapshot := cloneRequest(p.req)
	close(p.done)
	b.mu.Unlock()
	// A failure to record a denial cannot make anything run; it is
	// still reported by the recorder's own failure handling.
	_ = b.record(ctx, "approval.decision", snapshot, who)
}

func (b *Broker) drop(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.pending, id)
}

func (b *Broker) record(ctx context.Context, kind string, r Request, who Who) error {
	ev := Event{Kind: kind, RequestID: r.ID, Session: r.Session, Who: who}
	for _, it := range r.Items {
		ev.Items = append(ev.Items, ItemView{N: it.N, Tool: it.Op.Tool, Signature: it.Op.Signature(), Effect: it.Eval.Effect, Rule: it.Eval.Rule, Decision: it.Decision})
	}
	if err := b.opts.Recorder.Record(ctx, ev); err != nil {
		return fmt.Errorf("approval: cannot record %s, refusing: %w", kind, err)
	}
	return nil
}

// newID returns a short id unique among pending requests. Callers hold mu.
func (b *Broker) newID() (string, error) {
	for range 16 {
		var buf [5]byte
		if _, err := rand.Read(buf[:]); err != nil {
			return "", fmt.Errorf("approval: request id: %w", err)
		}
		id := strings.ToLower(base32.StdEncoding.EncodeToString(buf[:]))[:6]
		if _, taken := b.pending[id]; !taken {
			return id, nil
		}
	}
	return "", errors.New("approval: could not find a free request id")
}

// explicitSteps returns the steps an answer names by number.
func explicitSteps(text string, n int) map[int]bool {
	out := map[int]bool{}
	for li, line := range strings.Split(text, "\n") {
		toks := split(strings.TrimRight(line, "\r"))
		if len(toks) < 2 || strings.EqualFold(toks[1].s, "all") {
			continue
		}
		if steps, err := parseSteps(toks[1], n, li+1); err == nil {
			for _, s := range steps {
				out[s] = true
			}
		}
	}
	return out
}

func cloneRequest(r Request) Request {
	r.Items = append([]Item(nil), r.Items...)
	return r
}

func sortRequests(rs []Request) {
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && rs[j].Created.Before(rs[j-1].Created); j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
}
