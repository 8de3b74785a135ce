//go:build goolm

package matrix

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/fluffy-agent/fluffy/internal/channel"
)

// onMember accepts an invitation to the bot from a principal; others are
// ignored (and recorded).
func (c *Channel) onMember(ctx context.Context, evt *event.Event) {
	m := evt.Content.AsMember()
	if m.Membership != event.MembershipInvite || evt.GetStateKey() != c.cfg.UserID {
		return
	}
	cli, _, sink, err := c.conn()
	if err != nil {
		return
	}
	if !c.isPrincipal(evt.Sender) {
		_ = sink.Record(ctx, channel.Refusal{Channel: c.name, Principal: string(evt.Sender), Reason: ReasonSenderNotAllowed,
			Detail: "invitation to " + string(evt.RoomID)})
		return
	}
	if err := limited(ctx, func() error { _, err := cli.JoinRoomByID(ctx, evt.RoomID); return err }); err != nil {
		c.log.Warn("matrix: accept an invitation", "channel", c.name, "room", evt.RoomID, "err", err)
	}
}

// sender judges who an event is from: a principal (ok), or why not
// (reason, for the refusal). In an encrypted room only an encrypted
// event from a device the principal has cross-signed is theirs.
func (c *Channel) sender(ctx context.Context, evt *event.Event) (ok bool, reason string) {
	if !c.isPrincipal(evt.Sender) {
		return false, ReasonSenderNotAllowed
	}
	cli, _, _, err := c.conn()
	if err != nil {
		return false, "not_connected"
	}
	encrypted, err := cli.StateStore.IsEncrypted(ctx, evt.RoomID)
	if err != nil {
		return false, "state_error"
	}
	switch {
	case evt.Mautrix.WasEncrypted:
		if c.trustedDevice(ctx, evt) {
			return true, ""
		}
		return false, ReasonUnverifiedDevice
	case (evt.Type == event.EventReaction || evt.Type == event.EventRedaction) && encrypted:
		// Clients send reactions (and redactions, which take one back)
		// unencrypted: the server must read their relation. No device
		// signs them, so one counts only while every device of the
		// principal is verified.
		if bad, err := c.unverifiedDevices(ctx, evt.Sender); err == nil && len(bad) == 0 {
			return true, ""
		}
		return false, ReasonUnverifiedDevice
	case encrypted:
		return false, ReasonUnencrypted
	}
	return true, "" // a plaintext room: the homeserver vouches for the sender
}

// refuse records a refused event and, for a principal's unverified
// device, says so in the room.
func (c *Channel) refuse(ctx context.Context, evt *event.Event, reason string) {
	cli, st, sink, err := c.conn()
	if err != nil {
		return
	}
	if done, _ := st.handled(ctx, evt.ID.String()); done {
		return
	}
	_ = sink.Record(ctx, channel.Refusal{Channel: c.name, Principal: string(evt.Sender), Reason: reason,
		Detail: fmt.Sprintf("%s %s in %s", evt.Type.Type, evt.ID, evt.RoomID)})
	if reason == ReasonUnverifiedDevice || reason == ReasonUnencrypted {
		what := "a device you have not verified"
		if reason == ReasonUnencrypted {
			what = "an unencrypted message in this encrypted room"
		}
		_ = c.notice(ctx, cli, evt.RoomID, "", fmt.Sprintf("Ignored %s from %s: it came from %s. Verify the device (cross-sign it) and send it again.", evt.Type.Type, evt.Sender, what))
	}
	_ = st.markHandled(ctx, evt.ID.String(), c.now().UnixNano())
}

// onMessage delivers a principal's text message, or answers an approval
// request with it when it is in the approval language.
func (c *Channel) onMessage(ctx context.Context, evt *event.Event) {
	c.handleMu.Lock()
	defer c.handleMu.Unlock()
	cli, st, sink, err := c.conn()
	if err != nil || evt.Sender == cli.UserID || c.batchFailed() {
		return
	}
	msg := evt.Content.AsMessage()
	if msg.MsgType != event.MsgText && msg.MsgType != event.MsgEmote || msg.RelatesTo != nil && msg.RelatesTo.Type == event.RelReplace {
		return
	}
	if done, err := st.handled(ctx, evt.ID.String()); err != nil || done {
		if err != nil {
			c.fail(ctx, err)
		}
		return
	}
	if ok, reason := c.sender(ctx, evt); !ok {
		c.refuse(ctx, evt, reason)
		return
	}
	text := stripReplyFallback(strings.TrimSpace(msg.Body))
	thread := id.EventID("")
	if rel := msg.RelatesTo; rel != nil {
		thread = rel.GetThreadParent()
	}
	conv := channel.Conversation{Channel: c.name, Room: joinRoom(evt.RoomID, thread), Principal: string(evt.Sender)}
	if strings.HasPrefix(text, "/approve") || strings.HasPrefix(text, "/deny") {
		if handled := c.answerText(ctx, evt, msg, text, conv); handled {
			_ = st.markHandled(ctx, evt.ID.String(), c.now().UnixNano())
			return
		}
	}
	in := channel.Inbound{Conversation: conv, Text: text, Source: "matrix message from " + string(evt.Sender),
		Meta: map[string]string{"event_id": evt.ID.String(), "encrypted": fmt.Sprint(evt.Mautrix.WasEncrypted)}, Received: c.now()}
	if _, err := sink.Deliver(ctx, in); err != nil {
		if errors.Is(err, channel.ErrNotAllowed) {
			_ = st.markHandled(ctx, evt.ID.String(), c.now().UnixNano())
			return
		}
		c.log.Warn("matrix: deliver a message; the sync batch is handled again", "channel", c.name, "event", evt.ID, "err", err)
		c.fail(ctx, fmt.Errorf("deliver %s: %w", evt.ID, err))
		return
	}
	if err := st.markHandled(ctx, evt.ID.String(), c.now().UnixNano()); err != nil {
		c.fail(ctx, err)
	}
	c.startTyping(evt.RoomID)
}

// stripReplyFallback drops the "> <@user> quoted" lines a client puts
// before a reply's text.
func stripReplyFallback(text string) string {
	if !strings.HasPrefix(text, "> ") {
		return text
	}
	lines := strings.Split(text, "\n")
	i := 0
	for i < len(lines) && strings.HasPrefix(lines[i], ">") {
		i++
	}
	return strings.TrimSpace(strings.Join(lines[i:], "\n"))
}
