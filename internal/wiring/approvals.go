package wiring

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/llm/catalog"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// serveApprovals gives the kernel its approval broker and registers
// approval.list, approval.answer, approval.ask and approval.watch on mux.
// The broker evaluates steps with the policy files as they are at asking
// time, records in the audit log (the kernel's, held, while its sessions
// run; else opened for each record, so the kernel does not hold the log's
// writer lock while idle) and shows requests to the terminals running
// "fluffy approvals --watch" and to extra; unwatched requests wait in
// "fluffy approvals".
func serveApprovals(u *userenv.Env, mux *ipc.Mux, held *atomic.Pointer[audit.Shared], extra approval.Notifier) (*approval.Broker, error) {
	l, err := u.Config()
	if err != nil {
		return nil, err
	}
	rec := auditOnDemand{u: u, held: held}
	pn := &policyNow{u: u}
	if m := l.Config.Approval.ClassifierModel; m != "" {
		p, name, err := catalog.Open(context.Background(), m, catalog.Options{
			Env: u.Getenv, BaseURLs: l.Config.LLM.BaseURLs,
			Retry: llm.RetryOptions{Attempts: l.Config.LLM.RetryAttempts, MaxElapsed: l.Config.LLM.RetryBudget.Std(), Logger: u.Logger()},
		})
		if err != nil {
			// classify rules then fail closed; say why once.
			u.Logger().Warn("approval.classifier_model unusable; classify rules will fail closed", "model", m, "err", err)
		} else if pn.classifier, err = approval.NewClassifier(approval.ClassifierOptions{Provider: p, Model: name, Log: rec}); err != nil {
			return nil, err
		}
	}
	w := approval.NewWatchers()
	b, err := approval.NewBroker(approval.Options{
		Evaluator: approval.PolicyEvaluator{Engine: pn},
		Notifier:  approval.Fanout{w, extra},
		Recorder:  approval.AuditRecorder{Log: rec},
		Timeout:   l.Config.Approval.Timeout.Std(),
	})
	if err != nil {
		return nil, err
	}
	return b, approval.Register(mux, b, w)
}

// policyNow evaluates with the policy files as they are now, those of the
// step's own workspace: the user's policy and <workspace>/.fluffy/policy.yaml,
// with fluffy's own files protected for that workspace, exactly the policy
// the session's router enforces (the kernel serves sessions of several
// repositories; its own working directory's policy is none of theirs). It
// reads the files at each evaluation and compiles them again when they
// changed. A policy that does not load makes every step blocked, with the
// error as the reason. An engine (and its per-session classifier cache) is
// kept per workspace while its files do not change.
type policyNow struct {
	u          *userenv.Env
	classifier policy.Classifier

	mu      sync.Mutex // guards engines
	engines map[string]compiledPolicy
}

type compiledPolicy struct {
	engine *policy.Engine
	hashes map[string]string
}

// current returns the engine for workspace ws ("" for a step of no
// workspace: the kernel's working directory's, as for any command).
func (p *policyNow) current(ws string) (*policy.Engine, error) {
	u := p.u
	if ws != "" {
		u = u.WithCwd(ws)
	}
	opts, err := u.PolicyOptions()
	if err != nil {
		return nil, err
	}
	opts.Classifier = p.classifier
	srcs, hashes, err := u.PolicyFiles().Read()
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.engines[ws]; ok && maps.Equal(hashes, c.hashes) {
		return c.engine, nil
	}
	e, err := policy.Compile(opts, srcs...)
	if err != nil {
		return nil, err
	}
	if p.engines == nil {
		p.engines = map[string]compiledPolicy{}
	}
	p.engines[ws] = compiledPolicy{engine: e, hashes: hashes}
	return e, nil
}

func (p *policyNow) Explain(ctx context.Context, op operation.Operation) policy.Decision {
	e, err := p.current(op.Session.Workspace)
	if err != nil {
		return policy.Decision{Effect: policy.Block, Rule: "policy-error", Layer: policy.LayerBuiltin, Reason: "the policy does not load: " + err.Error()}
	}
	return e.Explain(ctx, op)
}

// auditOnDemand appends to the kernel's audit log while it holds one,
// else opens the log for the one append.
type auditOnDemand struct {
	u    *userenv.Env
	held *atomic.Pointer[audit.Shared]
}

func (d auditOnDemand) Append(ctx context.Context, e audit.Entry) (uint64, error) {
	if d.held != nil {
		if l := d.held.Load(); l != nil {
			return l.Append(ctx, e)
		}
	}
	l, err := d.u.OpenAudit(ctx, 3*time.Second, false)
	if err != nil {
		return 0, err
	}
	seq, err := l.Append(ctx, e)
	if cerr := l.Close(); err == nil && cerr != nil {
		return seq, cerr
	}
	return seq, err
}
