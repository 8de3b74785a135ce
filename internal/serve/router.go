package serve

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/telemetry"
)

// item is one message waiting for its session's next turn: a row of the
// inbox (id 0: a resume of an interrupted session, which has no row).
type item struct {
	id      int64
	conv    channel.Conversation
	message string // "" runs the task, or resumes
	// span is the message's span: the turn it starts is its child.
	span trace.SpanContext
}

// worker runs one session's turns, one at a time, in arrival order.
type worker struct {
	session string
	queue   []item // guarded by Daemon.mu
}

// busyRetry is how long a worker waits before trying again a session
// that another client (a terminal's "fluffy resume") is running.
const busyRetry = time.Second

// Deliver implements channel.Sink: it records the message (channel.inbound,
// durable before anything else happens), finds or creates the
// conversation's session, puts the message in the inbox (fluffy.db) and
// returns the session's id; the session's worker hands it over as the
// next turn once the turns before it have ended.
func (d *Daemon) Deliver(ctx context.Context, in channel.Inbound) (string, error) {
	d.mu.Lock()
	stopping, known := d.stopping, d.channels[in.Conversation.Channel] != nil
	d.mu.Unlock()
	if stopping {
		return "", ErrStopping
	}
	if !known {
		return "", fmt.Errorf("serve: a message from channel %q, which the daemon does not run", in.Conversation.Channel)
	}
	c := in.Conversation
	// Refused before anything is recorded or stored: a flood costs
	// neither disk nor memory.
	if err := d.room(d.knownSession(ctx, c)); err != nil {
		return "", err
	}
	ctx, span := d.o.Tracer.Start(ctx, "fluffy.channel.message", trace.SpanKindConsumer, telemetry.KeyChannel.String(c.Channel),
		attribute.Bool("fluffy.untrusted", in.Untrusted))
	defer span.End()
	d.o.Metrics.Add(telemetry.MetricChannelMessages, 1, "channel", c.Channel)
	sum := sha256.Sum256([]byte(in.Text))
	if _, err := d.o.Audit.Append(ctx, audit.Entry{Kind: audit.KindChannelInbound, Actor: "channel:" + c.Channel, Payload: audit.ChannelInbound{
		Channel: c.Channel, Room: c.Room, Principal: c.Principal, Bytes: len(in.Text), SHA256: hex.EncodeToString(sum[:]),
		Untrusted: in.Untrusted, Source: in.Source, Meta: in.Meta}}); err != nil {
		return "", fmt.Errorf("serve: record the inbound message: %w", err)
	}
	text := modelText(in, d.o.Prompts[c.Channel])
	d.convMu.Lock()
	defer d.convMu.Unlock()
	id, created, err := d.session(ctx, c, text)
	if err != nil {
		return "", err
	}
	// The taint before the message can reach a turn: a session that is
	// to read untrusted data runs under the rules for it, or not at all.
	if in.Untrusted {
		if _, err := d.o.Sessions.MarkUntrusted(ctx, id, untrustedSource(in)); err != nil {
			if created {
				// Nothing routes to a session whose task is unmarked
				// untrusted data: the next message starts afresh.
				_, _ = d.o.DB.ExecContext(context.WithoutCancel(ctx), `DELETE FROM conversations WHERE session = ?`, id)
			}
			return "", fmt.Errorf("serve: mark session %s as having read untrusted data: %w", id, err)
		}
	}
	if created {
		text = "" // the message is the new session's task
	}
	now := d.o.Now().UnixNano()
	res, err := d.o.DB.ExecContext(ctx, `INSERT INTO inbox (session, channel, room, principal, message, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
		id, c.Channel, c.Room, c.Principal, text, now)
	if err != nil {
		return "", fmt.Errorf("serve: queue the message: %w", err)
	}
	row, err := res.LastInsertId()
	if err != nil {
		return "", fmt.Errorf("serve: queue the message: %w", err)
	}
	d.enqueue(id, item{id: row, conv: c, message: text, span: trace.SpanContextFromContext(ctx)})
	d.log.InfoContext(ctx, "message delivered", "channel", c.Channel, "principal", c.Principal, "session", id, "bytes", len(in.Text), "untrusted", in.Untrusted)
	return id, nil
}

// knownSession returns the session the conversation is routed to, ""
// when none (or the lookup fails: session decides then).
func (d *Daemon) knownSession(ctx context.Context, c channel.Conversation) string {
	var id string
	_ = d.o.DB.QueryRowContext(ctx, `SELECT session FROM conversations WHERE channel = ? AND room = ? AND principal = ?`,
		c.Channel, c.Room, c.Principal).Scan(&id)
	return id
}

// session returns the conversation's session, creating one (with task as
// its first message) when the conversation has none or its session was
// closed, failed or removed.
func (d *Daemon) session(ctx context.Context, c channel.Conversation, task string) (id string, created bool, err error) {
	err = d.o.DB.QueryRowContext(ctx, `SELECT session FROM conversations WHERE channel = ? AND room = ? AND principal = ?`,
		c.Channel, c.Room, c.Principal).Scan(&id)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return "", false, fmt.Errorf("serve: look the conversation up: %w", err)
	default:
		info, err := d.o.Sessions.Get(ctx, id)
		switch {
		case err == nil && info.Status != kernel.StatusClosed && info.Status != kernel.StatusFailed:
			return id, false, nil
		case err != nil && !errors.Is(err, kernel.ErrNotFound):
			return "", false, err
		}
	}
	info, err := d.o.Sessions.Create(ctx, kernel.CreateParams{Workspace: d.o.Workspace, Task: task, Model: d.o.Model, Kind: kernel.KindAssistant})
	if err != nil {
		return "", false, fmt.Errorf("serve: start a session for %s: %w", describe(c), err)
	}
	now := d.o.Now().UnixNano()
	if _, err := d.o.DB.ExecContext(ctx, `INSERT INTO conversations (channel, room, principal, session, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (channel, room, principal) DO UPDATE SET session = excluded.session, updated_at = excluded.updated_at`,
		c.Channel, c.Room, c.Principal, info.ID, now, now); err != nil {
		return "", false, fmt.Errorf("serve: remember the conversation's session: %w", err)
	}
	d.log.InfoContext(ctx, "session created", "session", info.ID, "channel", c.Channel, "principal", c.Principal)
	return info.ID, true, nil
}

// requeue loads what a previous daemon left: the inbox's messages, in
// arrival order, and a resume for each conversation's session that a
// crash interrupted and that has no message waiting.
func (d *Daemon) requeue(ctx context.Context) error {
	rows, err := d.o.DB.QueryContext(ctx, `SELECT id, session, channel, room, principal, message FROM inbox ORDER BY id`)
	if err != nil {
		return fmt.Errorf("serve: read the inbox: %w", err)
	}
	waiting := map[string]bool{}
	var items []struct {
		session string
		it      item
	}
	for rows.Next() {
		var s string
		var it item
		if err := rows.Scan(&it.id, &s, &it.conv.Channel, &it.conv.Room, &it.conv.Principal, &it.message); err != nil {
			rows.Close()
			return fmt.Errorf("serve: read the inbox: %w", err)
		}
		waiting[s] = true
		items = append(items, struct {
			session string
			it      item
		}{s, it})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("serve: read the inbox: %w", err)
	}
	convs, err := d.o.DB.QueryContext(ctx, `SELECT channel, room, principal, session FROM conversations`)
	if err != nil {
		return fmt.Errorf("serve: read the conversations: %w", err)
	}
	var resume []item
	var resumeIDs []string
	for convs.Next() {
		var c channel.Conversation
		var s string
		if err := convs.Scan(&c.Channel, &c.Room, &c.Principal, &s); err != nil {
			convs.Close()
			return fmt.Errorf("serve: read the conversations: %w", err)
		}
		if !waiting[s] {
			resume, resumeIDs = append(resume, item{conv: c}), append(resumeIDs, s)
		}
	}
	convs.Close()
	if err := convs.Err(); err != nil {
		return fmt.Errorf("serve: read the conversations: %w", err)
	}
	for i, s := range resumeIDs {
		info, err := d.o.Sessions.Get(ctx, s)
		if err != nil || !info.Interrupted {
			continue
		}
		d.log.Info("resuming a session the daemon's stop interrupted", "session", s)
		d.enqueue(s, resume[i])
	}
	for _, x := range items {
		d.enqueue(x.session, x.it)
	}
	return nil
}

// done counts n items that stopped waiting (their turn began, or the
// daemon stopped first).
func (d *Daemon) done(n int) {
	d.mu.Lock()
	d.waiting -= n
	d.mu.Unlock()
}

// room returns ErrBusy when no more messages may wait: for all sessions,
// or for session (when not "").
func (d *Daemon) room(session string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.waiting >= d.o.MaxWaiting {
		return fmt.Errorf("%w: %d messages wait for their sessions", ErrBusy, d.waiting)
	}
	if w := d.workers[session]; session != "" && w != nil && len(w.queue) >= d.o.MaxQueued {
		return fmt.Errorf("%w: %d messages wait for session %s", ErrBusy, len(w.queue), session)
	}
	return nil
}

// enqueue adds it to session's queue and starts its worker when none
// runs. Once the daemon stops no worker starts: the item stays in the
// inbox for the next start.
func (d *Daemon) enqueue(session string, it item) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping {
		return
	}
	d.waiting++
	if w := d.workers[session]; w != nil {
		w.queue = append(w.queue, it)
		return
	}
	w := &worker{session: session, queue: []item{it}}
	d.workers[session] = w
	d.turns.Add(1)
	go d.work(w)
}

// queued is the number of messages waiting in the sessions' queues.
func (d *Daemon) queued() float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, w := range d.workers {
		n += len(w.queue)
	}
	return float64(n)
}

// next pops w's next item; false when the queue is empty (the worker is
// then gone) or the daemon is stopping (the items stay in the inbox).
func (d *Daemon) next(w *worker) (item, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(w.queue) == 0 || d.stopping {
		d.waiting -= len(w.queue) // left in the inbox for the next start
		delete(d.workers, w.session)
		return item{}, false
	}
	it := w.queue[0]
	w.queue = w.queue[1:]
	return it, true
}

// work runs w's session's turns until its queue is empty: never two
// turns of one session at once.
func (d *Daemon) work(w *worker) {
	defer d.turns.Done()
	for {
		it, ok := d.next(w)
		if !ok {
			return
		}
		// A flood of sessions waits here, a blocked goroutine each,
		// still counted as waiting, so MaxWaiting bounds them.
		ctx, release, ok := d.admit(w.session, it)
		d.done(1)
		if !ok {
			return
		}
		d.turn(ctx, w.session, it)
		release()
	}
}

// admit waits until the turn of it may run: the scheduler's decision
// (Options.Admit), else one of MaxRunning slots. It returns the turn's
// context and its release; false when the daemon is stopping.
func (d *Daemon) admit(session string, it item) (context.Context, func(), bool) {
	if d.o.Admit == nil {
		select {
		case d.running <- struct{}{}:
			return d.runCtx, func() { <-d.running }, true
		case <-d.runCtx.Done():
			return nil, nil, false
		}
	}
	ctx, release, err := d.o.Admit(d.runCtx, it.conv, session)
	switch {
	case err == nil:
		return ctx, release, true
	case d.runCtx.Err() != nil:
		return nil, nil, false
	}
	// The scheduler bounds the turns; it does not decide whether a
	// message is answered: the turn runs unadmitted.
	d.log.ErrorContext(trace.ContextWithSpanContext(d.runCtx, it.span), "the scheduler did not admit a turn; it runs anyway", "session", session, "err", err)
	return d.runCtx, func() {}, true
}

// turn hands one message to the session and sends the reply back. The
// inbox row goes when the kernel has saved the message in the session
// (its first turn starts) or the run ended without one, so a daemon that
// dies mid-turn neither loses the message nor delivers it twice (the
// interrupted session is resumed at the next start instead).
func (d *Daemon) turn(ctx context.Context, session string, it item) {
	if it.span.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, it.span)
	}
	if d.o.Limits != nil {
		ctx = kernel.WithRunLimits(ctx, d.o.Limits(it.conv))
	}
	defer d.forgetRequests(session)
	taken := false
	take := func() {
		if taken || it.id == 0 {
			return
		}
		taken = true
		if _, err := d.o.DB.ExecContext(context.WithoutCancel(ctx), `DELETE FROM inbox WHERE id = ?`, it.id); err != nil {
			d.log.ErrorContext(ctx, "remove a delivered message from the inbox", "session", session, "err", err)
		}
	}
	onEvent := func(ev kernel.Event) {
		switch {
		case ev.Type == kernel.Type(agent.EventTurnStart):
			take()
		case ev.Type == kernel.TypeApproval && ev.Approval != nil:
			d.routeApproval(ctx, it.conv, *ev.Approval)
		}
	}
	for {
		res, err := d.o.Sessions.RunMessage(ctx, session, it.message, onEvent)
		if errors.Is(err, kernel.ErrBusy) {
			// A terminal runs it: the message waits its turn.
			select {
			case <-ctx.Done():
				return
			case <-time.After(busyRetry):
				continue
			}
		}
		if ctx.Err() != nil && !taken {
			// Stopped before the session took it: it stays queued.
			d.turnEnded(session, it.conv, "queued", "the daemon is stopping; the message runs at its next start")
			return
		}
		take()
		if err != nil {
			d.log.ErrorContext(ctx, "session turn", "session", session, "err", err)
			d.turnEnded(session, it.conv, "error", err.Error())
			return
		}
		d.reply(ctx, session, it.conv, res)
		d.turnEnded(session, it.conv, string(res.Status), res.Reason)
		return
	}
}

// turnEnded tells a channel that waits for each turn's end (the
// terminal's caller) that conv's turn ended, replied or not.
func (d *Daemon) turnEnded(session string, conv channel.Conversation, status, reason string) {
	if o, ok := d.channel(conv.Channel).(channel.TurnObserver); ok {
		o.TurnEnded(context.WithoutCancel(d.runCtx), conv, session, status, reason)
	}
}

// reply sends a turn's outcome to its conversation, or to the channel's
// report route when the conversation's channel cannot send; tctx is the
// turn's (its trace goes on to the send and the log).
func (d *Daemon) reply(tctx context.Context, session string, conv channel.Conversation, res kernel.RunResult) {
	text := res.Text
	if res.Fault != nil {
		// The fault's message may name host paths: it stays in the
		// daemon's log and the session, not in a chat.
		text = fmt.Sprintf("Session %s stopped on a %s fault; 'fluffy session ls' on the daemon's host says more.", session, res.Fault.Class)
		d.log.WarnContext(tctx, "session fault", "session", session, "class", res.Fault.Class, "message", res.Fault.Message)
	}
	if text == "" {
		return
	}
	if d.o.Quiet != nil && res.Fault == nil && d.o.Quiet(conv, text) {
		d.log.InfoContext(tctx, "nothing to report", "session", session, "channel", conv.Channel, "room", conv.Room)
		return
	}
	// The reply goes out even while the daemon stops: the turn is done.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(tctx), 30*time.Second)
	defer cancel()
	msg := channel.Outbound{Session: session, Text: text}
	err := d.send(ctx, conv, msg)
	if errors.Is(err, channel.ErrCannotSend) {
		if r, ok := d.report(conv); ok {
			err = d.send(ctx, r, msg)
		}
	}
	if err != nil {
		d.log.WarnContext(ctx, "the reply reached nobody", "session", session, "channel", conv.Channel, "err", err)
	}
}

func (d *Daemon) send(ctx context.Context, to channel.Conversation, msg channel.Outbound) error {
	c := d.channel(to.Channel)
	if c == nil {
		return fmt.Errorf("serve: no channel %q", to.Channel)
	}
	return c.Send(ctx, to, msg)
}

func (d *Daemon) channel(name string) channel.Channel {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.channels[name]
}

// report is where conv's session reports when its own channel cannot
// carry a message: the route of its room ("cron/JOB"), else of its
// channel (a hook).
func (d *Daemon) report(conv channel.Conversation) (channel.Conversation, bool) {
	if r, ok := d.o.Reports[conv.Channel+"/"+conv.Room]; ok && conv.Room != "" {
		return r, true
	}
	r, ok := d.o.Reports[conv.Channel]
	return r, ok
}

// describe names a conversation in messages.
func describe(c channel.Conversation) string {
	if c.Room != "" {
		return fmt.Sprintf("%s/%s (%s)", c.Channel, c.Room, c.Principal)
	}
	return fmt.Sprintf("%s (%s)", c.Channel, c.Principal)
}
