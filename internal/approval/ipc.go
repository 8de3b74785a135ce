package approval

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/fluffy-agent/fluffy/internal/ipc"
)

// IPC method and event names.
const (
	// MethodList lists pending requests: params ListParams, result
	// ListResult.
	MethodList = "approval.list"
	// MethodAnswer answers one: params AnswerParams, result AnswerResult.
	MethodAnswer = "approval.answer"
	// MethodWatch makes the calling connection receive TopicRequest
	// events for every request shown from now on: result WatchResult.
	MethodWatch = "approval.watch"
	// MethodAsk submits a plan and waits for its decisions: params
	// AskParams, result Request. Cancelling the call (or disconnecting)
	// denies what is still open.
	MethodAsk = "approval.ask"
	// TopicRequest is the event a watching connection receives: data
	// View.
	TopicRequest = "approval.request"
)

// IPC error codes a caller may branch on.
const (
	// CodeUnknownRequest: no pending request has that id (answered,
	// timed out, or never existed).
	CodeUnknownRequest = "unknown_request"
	// CodeBadAnswer: the answer was malformed or not applicable; the
	// message explains it and the request stays open.
	CodeBadAnswer = "bad_answer"
)

// View is a request as a client sees it: the request and its prompt.
type View struct {
	Request
	Prompt string `json:"prompt"`
}

// ListParams filters approval.list; an empty Session lists every session.
type ListParams struct {
	Session string `json:"session,omitempty"`
}

// ListResult is approval.list's result, oldest first.
type ListResult struct {
	Requests []View `json:"requests"`
}

// AnswerParams are approval.answer's params. Who names the person; the
// recorded answerer is "Who (uid:N)" with the uid the socket verified, or
// "uid:N" alone. The channel is always "ipc".
type AnswerParams struct {
	ID     string `json:"id"`
	Answer string `json:"answer"`
	Who    string `json:"who,omitempty"`
}

// AnswerResult reports the request after the answer; Open is false when
// every step is decided (the request is then gone from the list).
type AnswerResult struct {
	ID   string `json:"id"`
	Open bool   `json:"open"`
	// Prompt is the question again when steps are still open.
	Prompt string `json:"prompt,omitempty"`
}

// AskParams are approval.ask's params: a plan of at most maxSteps steps
// for one session. A step's operation may leave its session empty.
type AskParams struct {
	Session string `json:"session"`
	Summary string `json:"summary,omitempty"`
	Steps   []Step `json:"steps"`
}

const maxSteps = 100

// WatchResult is approval.watch's result.
type WatchResult struct {
	Watching bool `json:"watching"`
}

// Limits on IPC params (a person types them).
const (
	maxAnswerLen = 4096
	maxWhoLen    = 64
)

// Register adds approval.list, approval.answer and, when w is not nil,
// approval.watch to mux. Call it before the server starts serving.
func Register(mux *ipc.Mux, b *Broker, w *Watchers) error {
	if b == nil {
		return errors.New("approval: Register needs a broker")
	}
	if err := mux.Handle(MethodList, func(_ context.Context, r *ipc.Request) (any, error) {
		var p ListParams
		if err := r.Bind(&p); err != nil {
			return nil, err
		}
		res := ListResult{Requests: []View{}}
		for _, req := range b.Pending(p.Session) {
			res.Requests = append(res.Requests, View{Request: req, Prompt: req.Prompt()})
		}
		return res, nil
	}); err != nil {
		return err
	}
	if err := mux.Handle(MethodAnswer, func(ctx context.Context, r *ipc.Request) (any, error) {
		var p AnswerParams
		if err := r.Bind(&p); err != nil {
			return nil, err
		}
		switch {
		case p.ID == "" || p.Answer == "":
			return nil, ipc.Errorf(ipc.CodeInvalidParams, "approval.answer needs an id and an answer")
		case len(p.Answer) > maxAnswerLen:
			return nil, ipc.Errorf(ipc.CodeInvalidParams, "the answer is longer than %d bytes", maxAnswerLen)
		case len(p.Who) > maxWhoLen || !utf8.ValidString(p.Who) || hasControl(p.Who):
			return nil, ipc.Errorf(ipc.CodeInvalidParams, "who must be at most %d printable bytes", maxWhoLen)
		}
		// The name is the answerer's claim; the uid is what the socket
		// verified (SO_PEERCRED). Both are recorded.
		uid := "uid:" + strconv.FormatUint(uint64(r.Peer.Cred.UID), 10)
		who := Who{Name: uid, Channel: "ipc"}
		if p.Who != "" {
			who.Name = p.Who + " (" + uid + ")"
		}
		err := b.Answer(ctx, p.ID, p.Answer, who)
		var se *SyntaxError
		switch {
		case errors.Is(err, ErrUnknownRequest):
			return nil, ipc.Errorf(CodeUnknownRequest, "%v", err)
		case errors.As(err, &se):
			return nil, ipc.Errorf(CodeBadAnswer, "%v", err)
		case err != nil:
			return nil, ipc.Errorf(CodeBadAnswer, "%v", err)
		}
		res := AnswerResult{ID: p.ID}
		for _, req := range b.Pending("") {
			if req.ID == p.ID {
				res.Open, res.Prompt = true, req.Prompt()
			}
		}
		return res, nil
	}); err != nil {
		return err
	}
	if err := mux.Handle(MethodAsk, func(ctx context.Context, r *ipc.Request) (any, error) {
		var p AskParams
		if err := r.Bind(&p); err != nil {
			return nil, err
		}
		switch {
		case p.Session == "" || len(p.Session) > 128 || hasControl(p.Session):
			return nil, ipc.Errorf(ipc.CodeInvalidParams, "approval.ask needs a session id (at most 128 printable bytes)")
		case len(p.Steps) == 0 || len(p.Steps) > maxSteps:
			return nil, ipc.Errorf(ipc.CodeInvalidParams, "a plan has 1 to %d steps, this one has %d", maxSteps, len(p.Steps))
		}
		for i := range p.Steps {
			op := &p.Steps[i].Op
			if op.Session.ID == "" {
				op.Session.ID = p.Session
			}
			if op.Session.ID != p.Session {
				return nil, ipc.Errorf(ipc.CodeInvalidParams, "step %d belongs to session %q, the plan to %q", i+1, op.Session.ID, p.Session)
			}
		}
		return b.Ask(ctx, p.Session, p.Summary, p.Steps)
	}); err != nil {
		return err
	}
	if w == nil {
		return nil
	}
	return mux.Handle(MethodWatch, func(_ context.Context, r *ipc.Request) (any, error) {
		w.add(r.Peer)
		return WatchResult{Watching: true}, nil
	})
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return true
		}
	}
	return false
}

// Watchers is a Notifier that pushes each request to the connections that
// called approval.watch. With Required, a request nobody watches is an
// error, so the broker does not wait for an answer no one was asked for;
// without it the request waits in approval.list for a terminal to ask.
type Watchers struct {
	Required bool

	mu    sync.Mutex // guards peers
	peers map[uint64]*ipc.Peer
}

// NewWatchers returns an empty set.
func NewWatchers() *Watchers { return &Watchers{peers: map[uint64]*ipc.Peer{}} }

func (w *Watchers) add(p *ipc.Peer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.peers[p.ID] = p
}

// ErrNobodyWatching is returned by Watchers.Notify when no connection
// watches approvals.
var ErrNobodyWatching = errors.New("approval: no terminal is watching for approvals")

// Notify implements Notifier.
func (w *Watchers) Notify(_ context.Context, req Request) error {
	w.mu.Lock()
	peers := make([]*ipc.Peer, 0, len(w.peers))
	for _, p := range w.peers {
		peers = append(peers, p)
	}
	w.mu.Unlock()
	view := View{Request: req, Prompt: req.Prompt()}
	n := 0
	for _, p := range peers {
		ok, err := p.Notify(TopicRequest, view)
		if err != nil {
			return fmt.Errorf("approval: push request: %w", err)
		}
		if !ok {
			w.mu.Lock()
			delete(w.peers, p.ID)
			w.mu.Unlock()
			continue
		}
		n++
	}
	if n == 0 && w.Required {
		return ErrNobodyWatching
	}
	return nil
}

// Terminal is a Notifier that prints the consolidated prompt. Several
// sessions may share one terminal: each prompt carries its request id and
// session, and prompts are written whole, never interleaved.
type Terminal struct {
	mu sync.Mutex // serializes writes to W
	W  io.Writer
}

// Notify implements Notifier.
func (t *Terminal) Notify(_ context.Context, req Request) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, err := io.WriteString(t.W, "\n"+req.Prompt()+"Answer here, or from another terminal: fluffy approve "+req.ID+" /approve ...\n"); err != nil {
		return fmt.Errorf("approval: terminal: %w", err)
	}
	return nil
}

// Fanout notifies every Notifier; it succeeds when at least one showed
// the request, and fails with all their errors when none did.
type Fanout []Notifier

// Notify implements Notifier.
func (f Fanout) Notify(ctx context.Context, req Request) error {
	var errs []error
	shown := false
	for _, n := range f {
		if err := n.Notify(ctx, req); err != nil {
			errs = append(errs, err)
			continue
		}
		shown = true
	}
	if shown {
		return nil
	}
	if len(errs) == 0 {
		return errors.New("approval: no channel to show the request on")
	}
	return errors.Join(errs...)
}
