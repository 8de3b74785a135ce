// Package channel owns the contract between the assistant daemon
// (`fluffy serve`) and the ways a person or an event reaches it: chat
// rooms, webhooks, email, schedules, the terminal. A channel turns what
// arrives into Inbound messages and hands them to the daemon's Sink; the
// daemon maps each conversation to a session and sends the session's
// replies and approval requests back through the channel it came from
// (and through the person's approval channels). Each channel lives in a
// package of its own under internal/channel/<name> and depends on this
// package only, never on the daemon.
package channel

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/fluffy-agent/fluffy/internal/approval"
)

// Channel is one configured channel instance (a webhook endpoint, a mail
// address, a schedule, a chat account).
type Channel interface {
	// Name is the instance's configured name, unique in the daemon
	// ("github", "mail", "cron"); audit entries and conversations
	// carry it.
	Name() string
	// Run connects and delivers what arrives to sink until ctx ends
	// (then it returns nil) or the channel fails (it returns why; the
	// daemon restarts it with backoff and reports it not ready
	// meanwhile). Run calls sink.Ready once it is connected.
	Run(ctx context.Context, sink Sink) error
	// Send delivers a session's message to a conversation of this
	// channel. A channel that cannot send (a webhook) returns
	// ErrCannotSend; the daemon then reports through the job's or the
	// person's configured channel.
	Send(ctx context.Context, conv Conversation, msg Outbound) error
	// SendApproval shows a person an approval request; an answer comes
	// back through Sink.Answer tagged with the request's id. A channel
	// that cannot carry answers returns ErrCannotSend.
	SendApproval(ctx context.Context, conv Conversation, req approval.Request) error
}

// HTTPChannel is a channel served on the daemon's HTTP listener
// (serve.listen) rather than a connection of its own: the daemon mounts
// Handler at Pattern (an http.ServeMux pattern such as
// "POST /hooks/github").
type HTTPChannel interface {
	Channel
	Pattern() string
	Handler(sink Sink) http.Handler
}

// TurnObserver is a channel told when each turn of its conversations
// ends, replied or not (after Send, when there was a reply): a channel
// whose sender waits for the turn (the terminal) needs to know.
type TurnObserver interface {
	TurnEnded(ctx context.Context, conv Conversation, session, status, reason string)
}

// Sink is what a channel delivers to: the daemon's router.
type Sink interface {
	// Deliver hands one inbound message to the session of its
	// conversation, creating or resuming it, and returns the session's
	// id once the message is durably queued (not when the turn ends).
	// A message from a principal the channel's allow-list does not name
	// is ErrNotAllowed (recorded by the daemon, never delivered).
	Deliver(ctx context.Context, in Inbound) (session string, err error)
	// Answer resolves an approval request from a person's reply in the
	// approval language (approval.ParseAnswer). It is ErrNotApprover
	// when the principal may not approve, approval.ErrUnknownRequest
	// when the request is unknown or already answered.
	Answer(ctx context.Context, a Answer) error
	// Ready reports the channel connected (ready true) or lost (false,
	// with why), for /readyz and `fluffy status`.
	Ready(channel string, ready bool, why error)
	// Record writes an audit entry for something a channel refused
	// before any session saw it (a bad signature, a replay, a sender
	// not allowed).
	Record(ctx context.Context, r Refusal) error
}

// Conversation identifies where a message belongs: the channel instance,
// the room or thread within it, and the person (or event source) it is
// with. The daemon keeps one session per conversation.
type Conversation struct {
	Channel string `json:"channel"`
	// Room is the channel's own id of the place (a chat room, a thread,
	// a mail thread's root Message-ID, a hook's delivery); empty for a
	// channel with one place.
	Room string `json:"room,omitempty"`
	// Principal is who the channel authenticated as the sender (a Matrix
	// user id, a mail address, "hook:NAME", "cron:JOB"), never a name
	// the message claims for itself.
	Principal string `json:"principal"`
}

// Inbound is one message that arrived on a channel.
type Inbound struct {
	Conversation Conversation `json:"conversation"`
	// Text is the message as received. When Untrusted, the daemon hands
	// it to the model wrapped and labelled as data, never as the
	// person's instructions.
	Text string `json:"text"`
	// Untrusted marks content no principal wrote (a webhook payload, an
	// email, a message from someone other than the person): the session
	// is marked as having read untrusted data.
	Untrusted bool `json:"untrusted,omitempty"`
	// Source says what the content is, for the label the model sees
	// ("webhook github push", "email from a@b.c").
	Source string `json:"source,omitempty"`
	// Attachments are files stored by the channel for the agent to read
	// (never executed).
	Attachments []Attachment `json:"attachments,omitempty"`
	// Meta is what the channel verified about the message (signature,
	// SPF/DKIM results, delivery id), recorded with it.
	Meta     map[string]string `json:"meta,omitempty"`
	Received time.Time         `json:"received"`
}

// Attachment is a file a channel stored from an inbound message.
type Attachment struct {
	Name string `json:"name"`
	Path string `json:"path"`
	Type string `json:"type,omitempty"`
	Size int64  `json:"size"`
}

// Outbound is a message a session sends to a conversation.
type Outbound struct {
	Session string `json:"session"`
	Text    string `json:"text"`
}

// Answer is a person's reply to an approval request, as a channel
// received it.
type Answer struct {
	RequestID string       `json:"request_id"`
	Text      string       `json:"text"`
	From      Conversation `json:"from"`
	// Event is the channel's id of the message or reaction that carried
	// the answer (a Matrix event id), recorded with it.
	Event string `json:"event,omitempty"`
}

// Refusal is something a channel refused before it reached a session.
type Refusal struct {
	Channel   string `json:"channel"`
	Principal string `json:"principal,omitempty"`
	// Reason is a short code ("bad_signature", "replay",
	// "sender_not_allowed", "too_large").
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
	Remote string `json:"remote,omitempty"`
}

// Verification is one step of a person's interactive verification of a
// channel's own device (Matrix's emoji SAS), for the audit log. A step
// is "started" (a principal asked), "confirmed" (the operator said the
// emoji match), "cancelled" (Reason says by whom or why) or "done" (the
// person's device, and the master key the verification covered, are now
// trusted by the channel).
type Verification struct {
	Channel   string `json:"channel"`
	Principal string `json:"principal"`
	Device    string `json:"device"`
	// ID is the verification's transaction id.
	ID   string `json:"id"`
	Step string `json:"step"`
	// Room is where it runs; empty for a verification by to-device
	// messages.
	Room string `json:"room,omitempty"`
	// SAS is the short authentication string the operator compared
	// (emoji and numbers).
	SAS string `json:"sas,omitempty"`
	// MasterKey is the principal's master key the verification covered.
	MasterKey string `json:"master_key,omitempty"`
	// Repinned: the master key differed from the one first seen for the
	// principal, and the operator's confirmation made it the pinned one;
	// PinnedBefore is the key pinned until then.
	Repinned     bool   `json:"repinned,omitempty"`
	PinnedBefore string `json:"pinned_before,omitempty"`
	Reason       string `json:"reason,omitempty"`
}

// VerificationRecorder is a Sink that audits device verifications (the
// daemon's router is one). A channel whose sink is not one refuses
// verifications: each step must be on the record.
type VerificationRecorder interface {
	RecordVerification(ctx context.Context, v Verification) error
}

// Errors channels and the daemon branch on.
var (
	ErrCannotSend  = errors.New("channel: this channel cannot send messages")
	ErrNotAllowed  = errors.New("channel: the sender is not on the channel's allow-list")
	ErrNotApprover = errors.New("channel: the sender may not answer approval requests")
)
