package wiring

import (
	"context"
	"net/http"
	"sync"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/channel/webhook"
)

// retryHook is a webhook whose state could not be opened when the daemon
// started (its nonce store is corrupt): rather than stop the daemon and
// every other channel, it is a channel that fails. Each Run, restarted
// by the daemon's supervision with backoff, opens the hook again, so the
// channel shows as failing (and /readyz as not ready) with the reason
// until a person repairs the state, then connects. Until then its path
// answers 503 and nothing is delivered.
type retryHook struct {
	name string
	open func() (*webhook.Hook, error)

	mu   sync.Mutex    // guards hook
	hook *webhook.Hook // nil until open succeeds
}

var _ channel.HTTPChannel = (*retryHook)(nil)

func (r *retryHook) Name() string { return r.name }

// Pattern is the hook's path, as webhook.Hook.Pattern says it.
func (r *retryHook) Pattern() string { return "/hooks/" + r.name }

// Run opens the hook if it is not open yet, then runs it.
func (r *retryHook) Run(ctx context.Context, sink channel.Sink) error {
	r.mu.Lock()
	if r.hook == nil {
		h, err := r.open()
		if err != nil {
			r.mu.Unlock()
			return err
		}
		r.hook = h
	}
	h := r.hook
	r.mu.Unlock()
	return h.Run(ctx, sink)
}

func (r *retryHook) current() *webhook.Hook {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hook
}

// Handler serves the hook once it is open, 503 before.
func (r *retryHook) Handler(sink channel.Sink) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		h := r.current()
		if h == nil {
			http.Error(w, "webhook not available", http.StatusServiceUnavailable)
			return
		}
		h.Handler(sink).ServeHTTP(w, req)
	})
}

// Send is ErrCannotSend, as for any webhook.
func (r *retryHook) Send(context.Context, channel.Conversation, channel.Outbound) error {
	return channel.ErrCannotSend
}

// SendApproval is ErrCannotSend, as for any webhook.
func (r *retryHook) SendApproval(context.Context, channel.Conversation, approval.Request) error {
	return channel.ErrCannotSend
}

// Close releases the hook's nonce store once it is open.
func (r *retryHook) Close() error {
	if h := r.current(); h != nil {
		return h.Close()
	}
	return nil
}
