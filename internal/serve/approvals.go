package serve

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/channel"
)

// approvalTarget is where an open request was shown.
type approvalTarget struct {
	session string
	conv    channel.Conversation
}

// Headless reports whether principal is an event source rather than a
// person ("hook:NAME", "cron:JOB", "heartbeat"): such a principal never
// answers an approval request, whatever approval.approvers says, so a
// session no person started cannot approve itself.
func Headless(principal string) bool {
	return strings.HasPrefix(principal, "hook:") || strings.HasPrefix(principal, "cron:") || principal == "heartbeat"
}

// routeApproval shows req to the session's own conversation and to every
// approval.route channel, each once. A channel that cannot carry answers
// (ErrCannotSend) is skipped; when no channel took the request, only a
// terminal ("fluffy approve") can answer it, and approval.timeout denies
// it otherwise.
func (d *Daemon) routeApproval(ctx context.Context, own channel.Conversation, req approval.Request) {
	d.mu.Lock()
	d.requests[req.ID] = approvalTarget{session: req.Session, conv: own}
	d.mu.Unlock()
	targets := []channel.Conversation{own}
	if r, ok := d.report(own); ok {
		targets = append(targets, r)
	}
	targets = append(targets, d.o.ApprovalRoute...)
	seen := map[[2]string]bool{}
	shown := 0
	for _, t := range targets {
		key := [2]string{t.Channel, t.Room}
		if seen[key] {
			continue
		}
		seen[key] = true
		c := d.channel(t.Channel)
		if c == nil {
			d.log.Warn("approval route names no running channel", "channel", t.Channel, "request", req.ID)
			continue
		}
		switch err := c.SendApproval(ctx, t, req); {
		case err == nil:
			shown++
		case errors.Is(err, channel.ErrCannotSend):
		default:
			d.log.Warn("show an approval request", "channel", t.Channel, "request", req.ID, "err", err)
		}
	}
	if shown == 0 {
		d.log.Warn("an approval request reached no channel: only 'fluffy approve' can answer it before approval.timeout denies it",
			"request", req.ID, "session", req.Session)
	}
}

// Answer implements channel.Sink: an answer resolves the request only
// when its principal is a designated approver (approval.approvers) and no
// event source; the first valid answer wins, and a later one is
// approval.ErrUnknownRequest. Every answer is recorded (channel.answer),
// whatever its outcome.
func (d *Daemon) Answer(ctx context.Context, a channel.Answer) error {
	p := a.From.Principal
	outcome, err := "accepted", error(nil)
	switch {
	case Headless(p):
		outcome, err = "headless", fmt.Errorf("%w: %s is an event source, not a person", channel.ErrNotApprover, p)
	case !slices.Contains(d.o.Approvers, p):
		outcome, err = "not_approver", fmt.Errorf("%w: %s is not in approval.approvers", channel.ErrNotApprover, p)
	default:
		err = d.o.Approvals.Answer(ctx, a.RequestID, a.Text, approval.Who{Name: p, Channel: a.From.Channel})
		switch {
		case errors.Is(err, approval.ErrUnknownRequest):
			outcome, err = "already_answered", fmt.Errorf("request %s was already answered or is unknown: %w", a.RequestID, err)
		case err != nil:
			outcome = "invalid"
		}
	}
	rec := audit.ChannelAnswer{Channel: a.From.Channel, Room: a.From.Room, Principal: p, RequestID: a.RequestID, Event: a.Event, Outcome: outcome}
	if err != nil {
		rec.Error = err.Error()
	}
	if _, aerr := d.o.Audit.Append(ctx, audit.Entry{Session: d.requestSession(a.RequestID), Kind: audit.KindChannelAnswer,
		Actor: "channel:" + a.From.Channel, Payload: rec}); aerr != nil {
		return errors.Join(err, fmt.Errorf("serve: record the answer: %w", aerr))
	}
	d.log.Info("approval answer", "channel", a.From.Channel, "principal", p, "request", a.RequestID, "outcome", outcome)
	return err
}

func (d *Daemon) requestSession(id string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.requests[id].session
}

// forgetRequests drops the requests of a session whose turn ended: the
// broker has decided them by then.
func (d *Daemon) forgetRequests(session string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, t := range d.requests {
		if t.session == session {
			delete(d.requests, id)
		}
	}
}

// Record implements channel.Sink: a channel's refusal becomes a
// channel.refused audit entry.
func (d *Daemon) Record(ctx context.Context, r channel.Refusal) error {
	d.log.Info("channel refused", "channel", r.Channel, "principal", r.Principal, "reason", r.Reason, "remote", r.Remote)
	_, err := d.o.Audit.Append(ctx, audit.Entry{Kind: audit.KindChannelRefused, Actor: "channel:" + r.Channel, Payload: audit.ChannelRefused{
		Channel: r.Channel, Principal: r.Principal, Reason: r.Reason, Detail: r.Detail, Remote: r.Remote}})
	if err != nil {
		return fmt.Errorf("serve: record the refusal: %w", err)
	}
	return nil
}

var _ channel.VerificationRecorder = (*Daemon)(nil)

// RecordVerification implements channel.VerificationRecorder: each step
// of a person's verification of a channel's device becomes a
// channel.verify audit entry.
func (d *Daemon) RecordVerification(ctx context.Context, v channel.Verification) error {
	d.log.Info("channel verification", "channel", v.Channel, "principal", v.Principal, "device", v.Device, "id", v.ID, "step", v.Step, "reason", v.Reason)
	_, err := d.o.Audit.Append(ctx, audit.Entry{Kind: audit.KindChannelVerify, Actor: "channel:" + v.Channel, Payload: audit.ChannelVerify{
		Channel: v.Channel, Principal: v.Principal, Device: v.Device, ID: v.ID, Step: v.Step, Room: v.Room, SAS: v.SAS,
		MasterKey: v.MasterKey, Repinned: v.Repinned, PinnedBefore: v.PinnedBefore, Reason: v.Reason}})
	if err != nil {
		return fmt.Errorf("serve: record the verification: %w", err)
	}
	return nil
}
