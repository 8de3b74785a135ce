package kernel

import (
	"context"
	"errors"
	"fmt"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/ipc"
)

// IPC methods. A client attaches to a session by subscribing to
// Topic(id) ("session.<id>"); session.run streams the run's events there
// and answers with the RunResult when the run ends. Cancelling the
// session.run request (or disconnecting) pauses the session, resumable.
const (
	MethodCreate = "session.create" // CreateParams → Info
	MethodRun    = "session.run"    // RunParams → RunResult
	MethodCancel = "session.cancel" // IDParams → {"cancelled": bool}
	MethodGet    = "session.get"    // IDParams → Info
	MethodList   = "session.list"   // ListParams → []Info
	MethodDiff   = "session.diff"   // DiffParams → DiffResult
	MethodClose  = "session.close"  // CloseParams → CloseResult
	// MethodApprove answers an approval request (ApproveParams → {}).
	MethodApprove = "session.approve"
	// MethodMarkUntrusted marks a session as having read untrusted data
	// (MarkUntrustedParams → {"marked": bool}), as MarkUntrusted does for
	// a daemon in the kernel's process. It only ever tightens what the
	// session may do.
	MethodMarkUntrusted = "session.mark_untrusted"
)

// MarkUntrustedParams name a session and what it read: Source, 1 to
// maxTaintSource bytes, is shown to the person in approval requests.
type MarkUntrustedParams struct {
	ID     string `json:"id"`
	Source string `json:"source"`
}

// maxTaintSource bounds a taint's source label.
const maxTaintSource = 1024

// ApproveParams answer an approval request in the approval language
// ("/approve", "/deny 2 too broad"; see approval.Help).
type ApproveParams struct {
	Request string `json:"request"`
	Answer  string `json:"answer"`
	Name    string `json:"name,omitempty"` // who answers (default: the peer's uid)
}

// IDParams name a session.
type IDParams struct {
	ID string `json:"id"`
}

// ListParams select sessions.
type ListParams struct {
	All bool `json:"all,omitempty"`
}

// DiffResult is a session's pending change set.
type DiffResult struct {
	Diff    string             `json:"diff"`
	Changes []changeset.Change `json:"changes"`
	// Widening says what the changes widen of the workspace's skills
	// (SkillReview), "" when nothing widens.
	Widening string `json:"widening,omitempty"`
}

// Register adds the session methods to mux.
func (k *Kernel) Register(mux *ipc.Mux) error {
	handlers := map[string]ipc.Handler{
		MethodCreate: func(ctx context.Context, r *ipc.Request) (any, error) {
			var p CreateParams
			if err := r.Bind(&p); err != nil {
				return nil, err
			}
			i, err := k.Create(ctx, p)
			return i, wireError(err)
		},
		MethodRun: func(ctx context.Context, r *ipc.Request) (any, error) {
			var p RunParams
			if err := r.Bind(&p); err != nil {
				return nil, err
			}
			res, err := k.RunMessage(ctx, p.ID, p.Message, nil)
			return res, wireError(err)
		},
		MethodCancel: func(_ context.Context, r *ipc.Request) (any, error) {
			var p IDParams
			if err := r.Bind(&p); err != nil {
				return nil, err
			}
			return map[string]bool{"cancelled": k.Cancel(p.ID)}, nil
		},
		MethodGet: func(ctx context.Context, r *ipc.Request) (any, error) {
			var p IDParams
			if err := r.Bind(&p); err != nil {
				return nil, err
			}
			i, err := k.Get(ctx, p.ID)
			return i, wireError(err)
		},
		MethodList: func(ctx context.Context, r *ipc.Request) (any, error) {
			var p ListParams
			if len(r.Params) > 0 {
				if err := r.Bind(&p); err != nil {
					return nil, err
				}
			}
			l, err := k.List(ctx, p.All)
			return l, wireError(err)
		},
		MethodDiff: func(ctx context.Context, r *ipc.Request) (any, error) {
			var p DiffParams
			if err := r.Bind(&p); err != nil {
				return nil, err
			}
			d, ch, err := k.Diff(ctx, p.ID, p.Paths...)
			if ch == nil {
				ch = []changeset.Change{}
			}
			res := DiffResult{Diff: d, Changes: ch}
			if err == nil {
				res.Widening = k.skillReview(ctx, p.ID, ch)
			}
			return res, wireError(err)
		},
		MethodApprove: func(ctx context.Context, r *ipc.Request) (any, error) {
			var p ApproveParams
			if err := r.Bind(&p); err != nil {
				return nil, err
			}
			if k.o.Approvals == nil {
				return nil, ipc.Errorf(ipc.CodeUnavailable, "this kernel takes no approvals")
			}
			who := approval.Who{Name: p.Name, Channel: "ipc"}
			if who.Name == "" {
				who.Name = fmt.Sprintf("uid:%d", r.Peer.Cred.UID)
			}
			if err := k.o.Approvals.Answer(ctx, p.Request, p.Answer, who); err != nil {
				if errors.Is(err, approval.ErrUnknownRequest) {
					// Answered elsewhere or expired: a code the client
					// can tell from a bad answer.
					return nil, ipc.Errorf(approval.CodeUnknownRequest, "%v", err)
				}
				return nil, ipc.Errorf(ipc.CodeInvalidParams, "%v", err)
			}
			return struct{}{}, nil
		},
		MethodMarkUntrusted: func(ctx context.Context, r *ipc.Request) (any, error) {
			var p MarkUntrustedParams
			if err := r.Bind(&p); err != nil {
				return nil, err
			}
			if p.Source == "" || len(p.Source) > maxTaintSource {
				return nil, ipc.Errorf(ipc.CodeInvalidParams, "source: 1 to %d bytes saying what the session read", maxTaintSource)
			}
			marked, err := k.MarkUntrusted(ctx, p.ID, p.Source)
			return map[string]bool{"marked": marked}, wireError(err)
		},
		MethodClose: func(ctx context.Context, r *ipc.Request) (any, error) {
			var p CloseParams
			if err := r.Bind(&p); err != nil {
				return nil, err
			}
			res, err := k.Close(ctx, p)
			return res, wireError(err)
		},
	}
	handlers[MethodRemove] = k.removeHandler()
	handlers[MethodTree] = func(ctx context.Context, r *ipc.Request) (any, error) {
		var p IDParams
		if err := r.Bind(&p); err != nil {
			return nil, err
		}
		t, err := k.Tree(ctx, p.ID)
		return t, wireError(err)
	}
	for name, h := range k.controlHandlers() {
		handlers[name] = h
	}
	for name, h := range k.externalHandlers() {
		handlers[name] = h
	}
	for name, h := range handlers {
		if err := mux.Handle(name, h); err != nil {
			return err
		}
	}
	return k.registerChanges(mux)
}

// CodeInvalidPath is the error code of a request naming a path that is
// not a workspace-relative path a change set can hold (changeset.ErrBadPath);
// ErrInvalidPath matches it with errors.Is on the client side.
const CodeInvalidPath = "invalid_path"

// ErrInvalidPath is a CodeInvalidPath error received over IPC.
var ErrInvalidPath = &ipc.Error{Code: CodeInvalidPath}

// wireError gives the errors a client branches on a stable code.
func wireError(err error) error {
	var ce *changeset.ConflictError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotFound):
		return ipc.Errorf(ipc.CodeInvalidParams, "%v", err)
	case errors.Is(err, ErrStopping):
		// Stopping, or handed over: nothing started; the client may
		// ask the next kernel.
		return ipc.Errorf(ipc.CodeShuttingDown, "%v", err)
	case errors.Is(err, changeset.ErrBadPath):
		return ipc.Errorf(CodeInvalidPath, "%v", err)
	case errors.Is(err, changeset.ErrLocked):
		return ipc.Errorf(ipc.CodeUnavailable, "%v", err)
	case errors.Is(err, ErrBusy), errors.Is(err, ErrClosed), errors.Is(err, ErrOpen), errors.Is(err, ErrExternal), errors.Is(err, ErrNotExternal), errors.Is(err, ErrSubagentApply):
		return ipc.Errorf(ipc.CodeUnavailable, "%v", err)
	case errors.As(err, &ce), errors.Is(err, changeset.ErrSensitive), errors.Is(err, changeset.ErrOwnFile):
		return ipc.Errorf(ipc.CodeUnavailable, "%v", err)
	}
	return err
}
