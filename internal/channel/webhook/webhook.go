// Package webhook owns the webhook channel of the assistant daemon: one
// signed HTTP endpoint, POST /hooks/NAME on serve.listen, per
// serve.webhooks entry. It verifies a delivery's signature (GitHub's
// X-Hub-Signature-256 or fluffy's timestamped X-Fluffy-Signature) under
// the hook's own secret, refuses replays with a signed-time window and a
// persisted nonce store, bounds the body, and hands a valid payload to
// the daemon as untrusted data (docs/webhooks.md). It depends on the
// channel contract only.
package webhook

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/config"
)

// Defaults and bounds of a hook's settings.
const (
	// DefaultMaxBody bounds a body when max_body is not set.
	DefaultMaxBody = 1 << 20
	// MaxMaxBody is the largest max_body accepted: a body is held in
	// memory while it is verified.
	MaxMaxBody = 32 << 20
	// DefaultWindow is how far a fluffy-form timestamp may be from now
	// when window is not set.
	DefaultWindow = 5 * time.Minute
	// MaxWindow is the largest window accepted.
	MaxWindow = 24 * time.Hour
	// GitHubRetention is how long a GitHub-form delivery is remembered:
	// nothing signed says when it was sent, so a replay is refused only
	// while its delivery id and MAC are remembered.
	GitHubRetention = 24 * time.Hour
	// DefaultMaxNonces bounds a hook's nonce store (two keys a
	// delivery).
	DefaultMaxNonces = 200_000
)

// handoffTimeout bounds Sink.Deliver and Sink.Record for one request.
// They run without the request's cancellation: a sender that hangs up
// must not cut a delivery off half-way (its nonce then stays taken).
const handoffTimeout = 30 * time.Second

// Reasons of the refusals a hook records (channel.Refusal.Reason).
const (
	ReasonBadSignature = "bad_signature"
	ReasonReplay       = "replay"
	ReasonTooLarge     = "too_large"
	ReasonBadRequest   = "bad_request"
	ReasonStoreFull    = "nonce_store_full"
)

// Options are a hook's dependencies.
type Options struct {
	// Logger receives the hook's log lines (never its secret or a
	// payload); nil discards them.
	Logger *slog.Logger
	// StateDir is the directory the hook owns: its nonce store lives
	// there. Must be set; created 0700 if missing.
	StateDir string
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// LookupEnv resolves env: secrets; nil is os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// Resolve resolves secret references of the backends beyond env and
	// file (the daemon's secret broker); nil refuses them.
	Resolve Resolver
	// MaxNonces bounds the nonce store; 0 is DefaultMaxNonces.
	MaxNonces int
}

// Hook is one webhook endpoint. It implements channel.HTTPChannel; its
// handler is safe for concurrent requests. Close releases its nonce
// store.
type Hook struct {
	name    string
	scheme  string
	secret  []byte
	maxBody int64
	window  time.Duration
	log     *slog.Logger
	now     func() time.Time
	nonces  *nonceStore
}

var _ channel.HTTPChannel = (*Hook)(nil)

// New builds the hook cfg describes: it resolves the secret and opens
// the nonce store in opts.StateDir. A corrupt store is
// ErrCorruptNonceStore: the hook does not start rather than forget the
// deliveries it must refuse.
func New(cfg config.Webhook, opts Options) (*Hook, error) {
	if opts.StateDir == "" {
		return nil, errors.New("webhook: Options.StateDir is required")
	}
	if opts.LookupEnv == nil {
		opts.LookupEnv = os.LookupEnv
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxNonces <= 0 {
		opts.MaxNonces = DefaultMaxNonces
	}
	if errs := checkHook(cfg, -1, config.Origin{}); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	secret, err := resolveSecret(context.Background(), cfg.Secret, opts.LookupEnv, opts.Resolve)
	if err != nil {
		return nil, fmt.Errorf("webhook %s: secret: %w", cfg.Name, err)
	}
	log := opts.Logger.With("hook", cfg.Name)
	if len(secret) < minSecret {
		log.Warn("webhook secret is short; use at least 16 random bytes", "length", len(secret))
	}
	h := &Hook{
		name:    cfg.Name,
		scheme:  cfg.Signature,
		secret:  secret,
		maxBody: int64(cfg.MaxBody),
		window:  cfg.Window.Std(),
		log:     log,
		now:     opts.Now,
	}
	if h.maxBody == 0 {
		h.maxBody = DefaultMaxBody
	}
	if h.window == 0 {
		h.window = DefaultWindow
	}
	h.nonces, err = openNonceStore(opts.StateDir, opts.MaxNonces, opts.Now())
	if err != nil {
		return nil, fmt.Errorf("webhook %s: %w", cfg.Name, err)
	}
	return h, nil
}

// Close releases the hook's nonce store; the handler refuses deliveries
// afterwards.
func (h *Hook) Close() error { return h.nonces.close() }

// Name is the hook's configured name.
func (h *Hook) Name() string { return h.name }

// Pattern is the hook's path on the daemon's HTTP listener. It names no
// method: the handler answers other methods 405 itself.
func (h *Hook) Pattern() string { return "/hooks/" + h.name }

// Run reports the hook ready and waits for ctx: the daemon's listener
// does the serving.
func (h *Hook) Run(ctx context.Context, sink channel.Sink) error {
	sink.Ready(h.name, true, nil)
	<-ctx.Done()
	return nil
}

// Send is ErrCannotSend: a webhook has no one to answer.
func (h *Hook) Send(context.Context, channel.Conversation, channel.Outbound) error {
	return channel.ErrCannotSend
}

// SendApproval is ErrCannotSend: a hook's session asks through its
// report route and the person's approval channels.
func (h *Hook) SendApproval(context.Context, channel.Conversation, approval.Request) error {
	return channel.ErrCannotSend
}

// Handler serves the hook's deliveries into sink.
func (h *Hook) Handler(sink channel.Sink) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.serve(w, r, sink) })
}

// delivery is what a verified request carries.
type delivery struct {
	id, event string
	signedAt  time.Time // zero for the GitHub form
	keys      []nonceKey
	expiry    time.Time
}

// refusal is a request's refusal: its status, the code recorded (empty:
// not recorded) and the detail recorded and logged.
type refusal struct {
	status int
	reason string
	detail string
}

func (h *Hook) serve(w http.ResponseWriter, r *http.Request, sink channel.Sink) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		reply(w, http.StatusMethodNotAllowed, "error", "method not allowed")
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		reply(w, http.StatusUnsupportedMediaType, "error", "content type must be application/json")
		return
	}
	body, ref := h.readBody(w, r)
	var d delivery
	if ref == nil {
		d, ref = h.verify(r, body)
	}
	if ref == nil {
		ref = h.take(d)
	}
	if ref != nil {
		h.refuse(w, r, sink, *ref)
		return
	}
	in := channel.Inbound{
		Conversation: channel.Conversation{Channel: h.name, Room: d.id, Principal: "hook:" + h.name},
		Text:         string(body),
		Untrusted:    true,
		Source:       h.source(d.event),
		Meta:         map[string]string{"delivery": d.id, "event": d.event, "signature": h.scheme},
		Received:     h.now(),
	}
	if !d.signedAt.IsZero() {
		in.Meta["signed_at"] = d.signedAt.UTC().Format(time.RFC3339)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), handoffTimeout)
	defer cancel()
	session, err := sink.Deliver(ctx, in)
	if err != nil {
		if rerr := h.nonces.release(d.keys); rerr != nil {
			h.log.Error("webhook delivery not taken, and its nonce not released (a retry will be refused)", "delivery", d.id, "err", rerr)
		}
		if errors.Is(err, channel.ErrNotAllowed) {
			h.log.Warn("webhook delivery not allowed", "delivery", d.id, "err", err)
			reply(w, http.StatusForbidden, "error", "not allowed")
			return
		}
		h.log.Error("webhook delivery not taken", "delivery", d.id, "err", err)
		reply(w, http.StatusServiceUnavailable, "error", "not delivered, try again")
		return
	}
	h.nonces.commit(d.keys, h.now())
	h.log.Info("webhook delivered", "delivery", d.id, "event", d.event, "session", session)
	reply(w, http.StatusAccepted, "session", session)
}

// readBody reads the body up to the hook's bound.
func (h *Hook) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *refusal) {
	tooLarge := &refusal{http.StatusRequestEntityTooLarge, ReasonTooLarge, "body longer than " + strconv.FormatInt(h.maxBody, 10) + " bytes"}
	if r.ContentLength > h.maxBody {
		return nil, tooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge
		}
		return nil, &refusal{http.StatusBadRequest, "", "reading the body: " + err.Error()}
	}
	return body, nil
}

// verify checks the request's signature, then its delivery id, event and
// payload. Nothing of an unverified request is looked at beyond its
// signature header.
func (h *Hook) verify(r *http.Request, body []byte) (delivery, *refusal) {
	var d delivery
	var m []byte
	var err error
	now := h.now()
	switch h.scheme {
	case SchemeGitHub:
		m, err = VerifyGitHub(h.secret, body, r.Header.Get(HeaderGitHubSignature))
		d.id, d.event = r.Header.Get(HeaderGitHubDelivery), r.Header.Get(HeaderGitHubEvent)
		d.expiry = now.Add(GitHubRetention)
	default:
		var s FluffySignature
		s, err = VerifyFluffy(h.secret, body, r.Header.Get(HeaderFluffySignature), now, h.window)
		m, d.signedAt = s.MAC, time.Unix(s.Timestamp, 0)
		d.id, d.event = r.Header.Get(HeaderFluffyDelivery), r.Header.Get(HeaderFluffyEvent)
		// Past its signed time plus the window the timestamp check
		// alone refuses it.
		d.expiry = d.signedAt.Add(h.window)
	}
	switch {
	case errors.Is(err, ErrStale):
		return d, &refusal{http.StatusConflict, ReasonReplay, err.Error()}
	case err != nil:
		return d, &refusal{http.StatusUnauthorized, ReasonBadSignature, err.Error()}
	}
	if !validDeliveryID(d.id) {
		return d, &refusal{http.StatusBadRequest, ReasonBadRequest, "missing or malformed delivery id header"}
	}
	if !validEvent(d.event) {
		return d, &refusal{http.StatusBadRequest, ReasonBadRequest, "malformed event header"}
	}
	if !utf8.Valid(body) || !json.Valid(body) {
		return d, &refusal{http.StatusBadRequest, ReasonBadRequest, "body is not valid UTF-8 JSON"}
	}
	// Neither scheme signs the delivery id, so the MAC is remembered as
	// well: a captured delivery sent again under a new id is a replay
	// too.
	d.keys = []nonceKey{keyOf("d", d.id), keyOf("m", hex.EncodeToString(m))}
	return d, nil
}

// take remembers the delivery's keys, refusing a replay.
func (h *Hook) take(d delivery) *refusal {
	err := h.nonces.reserve(d.keys, d.expiry, h.now())
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrReplay):
		return &refusal{http.StatusConflict, ReasonReplay, "delivery " + d.id + ": its id or signature was seen before"}
	case errors.Is(err, ErrNonceStoreFull):
		return &refusal{http.StatusServiceUnavailable, ReasonStoreFull, err.Error()}
	}
	h.log.Error("webhook nonce store", "err", err)
	return &refusal{http.StatusServiceUnavailable, "", err.Error()}
}

// refuse answers a refused request and records it once (when it has a
// reason). The sender learns the status and no more.
func (h *Hook) refuse(w http.ResponseWriter, r *http.Request, sink channel.Sink, ref refusal) {
	h.log.Warn("webhook refused", "status", ref.status, "reason", ref.reason, "detail", ref.detail, "remote", r.RemoteAddr)
	if ref.reason != "" {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), handoffTimeout)
		defer cancel()
		err := sink.Record(ctx, channel.Refusal{Channel: h.name, Reason: ref.reason, Detail: ref.detail, Remote: r.RemoteAddr})
		if err != nil {
			h.log.Error("webhook refusal not recorded", "reason", ref.reason, "err", err)
		}
	}
	reply(w, ref.status, "error", http.StatusText(ref.status))
}

// source is the label the model sees with the payload.
func (h *Hook) source(event string) string {
	if event == "" {
		return "webhook " + h.name
	}
	return "webhook " + h.name + " " + event
}

// reply writes a one-member JSON object.
func reply(w http.ResponseWriter, status int, key, value string) {
	b, _ := json.Marshal(map[string]string{key: value})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// validDeliveryID accepts the ids senders use (GitHub's are UUIDs): 1 to
// 128 of A-Z a-z 0-9 . _ : -. They become a conversation's room and
// appear in the audit log, so nothing else is taken.
func validDeliveryID(s string) bool {
	return s != "" && len(s) <= 128 && allIn(s, func(c byte) bool {
		return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-'
	})
}

// validEvent accepts an empty event or up to 64 of a-z 0-9 . _ -: the
// event is part of the label the model sees, and no sender's text may
// shape it.
func validEvent(s string) bool {
	return len(s) <= 64 && allIn(s, func(c byte) bool {
		return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
	})
}

func allIn(s string, ok func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}
