package wiring

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/llm"
	"github.com/fluffy-agent/fluffy/internal/llm/catalog"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// serveApprovals registers approval.list, approval.answer, approval.ask
// and approval.watch on mux and returns the kernel's approval broker. The
// broker evaluates steps with the live policy (the engine the sessions'
// gates use), records in the audit log (the kernel's, held, while its
// sessions run; else opened for each record, so the kernel does not hold
// the log's writer lock while idle) and shows requests to the terminals
// running "fluffy approvals --watch" and to extra; unwatched requests wait
// in "fluffy approvals".
func serveApprovals(u *userenv.Env, mux *ipc.Mux, live *livePolicy, rec approval.Appender, extra approval.Notifier) (*approval.Broker, error) {
	l, err := u.Config()
	if err != nil {
		return nil, err
	}
	w := approval.NewWatchers()
	b, err := approval.NewBroker(approval.Options{
		Evaluator: approval.PolicyEvaluator{Engine: live},
		Notifier:  approval.Fanout{w, extra},
		Recorder:  approval.AuditRecorder{Log: rec},
		Timeout:   l.Config.Approval.Timeout.Std(),
	})
	if err != nil {
		return nil, err
	}
	return b, approval.Register(mux, b, w)
}

// newLivePolicy builds the kernel's live policy: its engines validate
// toks (nil ignores tokens), judge classify rules with the model of
// approval.classifier_model (unset or unusable: classify rules fail
// closed) and record policy.change and the classifier's calls in rec.
func newLivePolicy(u *userenv.Env, log *slog.Logger, toks *policy.Tokens, rec approval.Appender) (*livePolicy, error) {
	l, err := u.Config()
	if err != nil {
		return nil, err
	}
	live := &livePolicy{u: u, log: log, tokens: toks, audit: rec}
	if m := l.Config.Approval.ClassifierModel; m != "" {
		p, name, err := catalog.Open(context.Background(), m, catalog.Options{
			Env: u.Getenv, BaseURLs: l.Config.LLM.BaseURLs,
			Retry: llm.RetryOptions{Attempts: l.Config.LLM.RetryAttempts, MaxElapsed: l.Config.LLM.RetryBudget.Std(), Logger: log},
		})
		if err != nil {
			// classify rules then fail closed; say why once.
			log.Warn("approval.classifier_model unusable; classify rules will fail closed", "model", m, "err", err)
		} else if live.classifier, err = approval.NewClassifier(approval.ClassifierOptions{Provider: p, Model: name, Log: rec}); err != nil {
			return nil, err
		}
	}
	if live.watch, err = newWatcher(); err != nil {
		// Correct still, a little slower: each call stats the files.
		log.Warn("no inotify for the policy files; each tool call checks them with stat", "err", err)
	}
	return live, nil
}

// auditOnDemand appends to the kernel's audit log while it holds one,
// else opens the log for the one append.
type auditOnDemand struct {
	u    *userenv.Env
	held *atomic.Pointer[audit.Shared]
	// kern, once set, places a sub-agent's entries in its tree.
	kern *atomic.Pointer[kernel.Kernel]
}

func (d auditOnDemand) Append(ctx context.Context, e audit.Entry) (uint64, error) {
	if d.kern != nil {
		if k := d.kern.Load(); k != nil {
			if err := k.Place(ctx, &e); err != nil {
				return 0, err
			}
		}
	}
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
