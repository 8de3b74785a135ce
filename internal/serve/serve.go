// Package serve owns the assistant daemon's core, between the channels
// (internal/channel) and the kernel's sessions (internal/kernel): the
// router that maps each conversation to a session and hands it the
// conversation's messages one turn at a time (the channels' Sink), the
// routing of approval requests and answers across channels, the
// supervision of channels (restart with backoff, state) and the daemon's
// health endpoints. It runs no session itself: internal/wiring gives it
// the kernel ("fluffy serve", docs/serve.md).
package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/store"
	"github.com/fluffy-agent/fluffy/internal/telemetry"
)

// Sessions are the kernel's sessions as the daemon uses them
// (*kernel.Kernel implements it).
type Sessions interface {
	Create(ctx context.Context, p kernel.CreateParams) (kernel.Info, error)
	Get(ctx context.Context, id string) (kernel.Info, error)
	// RunMessage runs the session's next turn with message ("" resumes);
	// kernel.ErrBusy while another run of it is in progress.
	RunMessage(ctx context.Context, id, message string, onEvent func(kernel.Event)) (kernel.RunResult, error)
	// MarkUntrusted records that the session has read untrusted data
	// (audited once); its policy holds what such a session may do.
	MarkUntrusted(ctx context.Context, id, source string) (bool, error)
}

// Answerer resolves approval requests (*approval.Broker implements it):
// approval.ErrUnknownRequest for a request that is not pending.
type Answerer interface {
	Answer(ctx context.Context, id, text string, who approval.Who) error
}

// Appender writes audit entries (the kernel's audit log).
type Appender interface {
	Append(ctx context.Context, e audit.Entry) (uint64, error)
}

// Options configure a Daemon. Sessions, Approvals, Audit, DB, Workspace
// and Model are required.
type Options struct {
	Sessions  Sessions
	Approvals Answerer
	Audit     Appender
	// DB is fluffy.db: the conversations and the inbox live there.
	DB *store.DB
	// Workspace is the assistant's workspace (absolute), where the
	// daemon's sessions run; Model is the model they use.
	Workspace string
	Model     string
	// ApprovalRoute are the person's approval channels: every approval
	// request of a daemon session goes there besides its own
	// conversation (approval.route).
	ApprovalRoute []channel.Conversation
	// Approvers are the principals whose answer resolves a request
	// (approval.approvers); nobody else's does.
	Approvers []string
	// Reports maps a conversation that cannot be answered on its own
	// channel (a webhook's, a schedule's) to where its session reports
	// instead: keyed "channel/room" (a cron job: "cron/JOB"), else
	// "channel" (a hook's name).
	Reports map[string]channel.Conversation
	// Prompts maps an event channel to the person's instruction for
	// what arrives on it (serve.webhooks[].prompt, serve.email.prompt):
	// the model reads it, as the person's words, before the untrusted
	// content.
	Prompts map[string]string
	// Limits is the budget of one turn of conv's session (a scheduled
	// job's max_turns and max_cost); it only tightens the kernel's
	// limits. nil: none.
	Limits func(conv channel.Conversation) kernel.RunLimits
	// Admit waits until conv's turn of session may run (the scheduler:
	// its class, limits and queue) and returns the context to run it in
	// and the release to call when it ends; an error once the daemon
	// stops leaves the message queued. nil: MaxRunning bounds the turns.
	Admit func(ctx context.Context, conv channel.Conversation, session string) (context.Context, func(), error)
	// Quiet reports whether a reply says there is nothing to report (a
	// heartbeat's "nothing needs you"): such a reply is sent to no one.
	// nil: every reply is sent.
	Quiet func(conv channel.Conversation, text string) bool
	// Backoff is the first wait before a failed channel is restarted
	// (default 1s); it doubles up to MaxBackoff (default 1m) and starts
	// over once a channel ran for MaxBackoff.
	Backoff, MaxBackoff time.Duration
	// MaxQueued bounds the messages waiting for one session's turns, and
	// MaxWaiting those waiting for all sessions together: past either,
	// Deliver refuses the message with ErrBusy before recording or
	// storing anything, so a flood costs neither memory nor disk.
	// Defaults 64 and 1024.
	MaxQueued, MaxWaiting int
	// MaxRunning bounds the turns that run at once, all sessions
	// together; the others wait their turn. Default 8. Unused when
	// Admit is set: the scheduler bounds them.
	MaxRunning int
	// Tracer traces each inbound message (nil: none); the turn it
	// starts is the message span's child.
	Tracer *telemetry.Tracer
	// Metrics, when set, counts inbound messages, reports the queued
	// ones and is served as /metrics on the health listener unless
	// NoMetricsEndpoint (the metrics then only go to the OTLP export).
	Metrics           *telemetry.Metrics
	NoMetricsEndpoint bool
	Logger            *slog.Logger
	Now               func() time.Time
}

// ErrBusy is Deliver's error when too many messages wait already
// (Options.MaxQueued, MaxWaiting): the message was not taken; the sender
// may try again later.
var ErrBusy = errors.New("serve: too many messages are waiting")

// ErrStopping is Deliver's error once the daemon is stopping: the message
// was not taken.
var ErrStopping = errors.New("serve: the daemon is stopping")

// Daemon is the daemon's router and channel supervisor. It implements
// channel.Sink.
type Daemon struct {
	o   Options
	log *slog.Logger

	// runCtx is the context of the turns and channels; cancelled at the
	// end of Stop.
	runCtx    context.Context
	cancelRun context.CancelFunc
	// chanCtx ends the channels first, at the start of Stop.
	chanCtx    context.Context
	cancelChan context.CancelFunc
	wg         sync.WaitGroup // channels' supervisors
	turns      sync.WaitGroup // session workers

	convMu sync.Mutex // serializes finding or creating a conversation's session

	mu       sync.Mutex // guards the fields below
	stopping bool
	channels map[string]channel.Channel
	states   map[string]*kernel.ChannelStatus
	order    []string                  // channel names in start order
	workers  map[string]*worker        // by session id
	requests map[string]approvalTarget // open approval requests by id
	waiting  int                       // items in all workers' queues

	running chan struct{} // a slot per turn that may run (MaxRunning)
}

var _ channel.Sink = (*Daemon)(nil)

// New checks o and returns a daemon with no channels yet (Start).
func New(o Options) (*Daemon, error) {
	switch {
	case o.Sessions == nil, o.Approvals == nil, o.Audit == nil, o.DB == nil:
		return nil, errors.New("serve: Options.Sessions, Approvals, Audit and DB are required")
	case !filepath.IsAbs(o.Workspace):
		return nil, fmt.Errorf("serve: the workspace %q is not an absolute path", o.Workspace)
	case o.Model == "":
		return nil, errors.New("serve: Options.Model is required (llm.model)")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Backoff <= 0 {
		o.Backoff = time.Second
	}
	if o.MaxBackoff < o.Backoff {
		o.MaxBackoff = max(time.Minute, o.Backoff)
	}
	if o.MaxQueued <= 0 {
		o.MaxQueued = 64
	}
	if o.MaxWaiting <= 0 {
		o.MaxWaiting = 1024
	}
	if o.MaxRunning <= 0 {
		o.MaxRunning = 8
	}
	d := &Daemon{o: o, log: o.Logger, channels: map[string]channel.Channel{}, states: map[string]*kernel.ChannelStatus{},
		workers: map[string]*worker{}, requests: map[string]approvalTarget{}, running: make(chan struct{}, o.MaxRunning)}
	o.Metrics.GaugeFunc(telemetry.MetricInboxQueue, d.queued)
	return d, nil
}

// Start registers chans, requeues what a previous daemon left (messages
// delivered but not yet handed to their session; sessions a crash
// interrupted), and starts every channel under supervision. Channel names
// must be unique. The daemon runs until Stop; ctx bounds Start only.
func (d *Daemon) Start(ctx context.Context, chans []channel.Channel) error {
	d.runCtx, d.cancelRun = context.WithCancel(context.WithoutCancel(ctx))
	d.chanCtx, d.cancelChan = context.WithCancel(d.runCtx)
	d.mu.Lock()
	for _, c := range chans {
		name := c.Name()
		if _, dup := d.channels[name]; dup {
			d.mu.Unlock()
			d.cancelRun()
			return fmt.Errorf("serve: two channels are named %q", name)
		}
		d.channels[name] = c
		d.states[name] = &kernel.ChannelStatus{Name: name, State: kernel.ChannelStarting, Since: d.o.Now().UTC()}
		d.order = append(d.order, name)
	}
	d.mu.Unlock()
	if err := d.requeue(ctx); err != nil {
		d.cancelRun()
		return err
	}
	for _, c := range chans {
		d.wg.Add(1)
		go d.supervise(c)
	}
	return nil
}

// Stop stops the channels, takes no more messages, and gives the turns
// in progress until ctx ends to finish; then it cancels them (their
// sessions stay resumable, and the messages not yet handed to a session
// stay in the inbox for the next start).
func (d *Daemon) Stop(ctx context.Context) {
	d.mu.Lock()
	d.stopping = true
	d.mu.Unlock()
	if d.cancelChan == nil {
		return // never started
	}
	d.cancelChan()
	d.wg.Wait()
	done := make(chan struct{})
	go func() { d.turns.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		d.log.Warn("turns still running at the end of the grace period: cancelled (their sessions stay resumable)")
	}
	d.cancelRun()
	<-done
}
