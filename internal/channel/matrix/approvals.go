//go:build goolm

package matrix

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/format"
	"maunium.net/go/mautrix/id"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/channel"
)

// The reactions that answer a request.
const (
	reactApprove = "✅"
	reactDeny    = "❌"
)

// stepKeys are the number reactions 1️⃣…🔟, without the variation
// selector some clients leave out.
var stepKeys = []string{"1⃣", "2⃣", "3⃣", "4⃣", "5⃣", "6⃣", "7⃣", "8⃣", "9⃣", "🔟"}

// stepOf is the step a number reaction toggles, 0 for another key.
func stepOf(key string) int {
	key = strings.ReplaceAll(key, "\uFE0F", "")
	for i, k := range stepKeys {
		if key == k {
			return i + 1
		}
	}
	return 0
}

// SendApproval shows an approval request as one message with numbered
// steps, in encrypted rooms only and only while every device of the
// principal (or, for a routed request, of every principal) is verified:
// otherwise the room is told why and the error is ErrUnverifiedDevices
// (or channel.ErrCannotSend for a room without encryption).
func (c *Channel) SendApproval(ctx context.Context, conv channel.Conversation, req approval.Request) error {
	cli, st, _, err := c.conn()
	if err != nil {
		return err
	}
	room, thread := splitRoom(conv.Room)
	if room == "" {
		return fmt.Errorf("%w: matrix %s: the route names no room", channel.ErrCannotSend, c.name)
	}
	encrypted, err := cli.StateStore.IsEncrypted(ctx, room)
	if err != nil {
		return fmt.Errorf("matrix %s: %w", c.name, err)
	}
	if !encrypted {
		_ = c.notice(ctx, cli, room, thread, fmt.Sprintf("Approval request %s is not shown here: this room is not end-to-end encrypted, so an answer here could have been written by the homeserver. Answer it with `fluffy approve %s`, or ask in an encrypted room.", req.ID, req.ID))
		return fmt.Errorf("%w: matrix %s: %s is not encrypted", channel.ErrCannotSend, c.name, room)
	}
	who := c.principalList()
	if c.isPrincipal(id.UserID(conv.Principal)) {
		who = []id.UserID{id.UserID(conv.Principal)}
	}
	for _, p := range who {
		bad, err := c.unverifiedDevices(ctx, p)
		if err != nil {
			return fmt.Errorf("matrix %s: the devices of %s: %w", c.name, p, err)
		}
		if len(bad) > 0 {
			_ = c.notice(ctx, cli, room, thread, fmt.Sprintf("Approval request %s is not shown: %s has devices they have not verified (%s). Verify them (cross-sign), or answer with `fluffy approve %s`.",
				req.ID, p, joinDevices(bad), req.ID))
			return fmt.Errorf("%w: %s: %s", ErrUnverifiedDevices, p, joinDevices(bad))
		}
	}
	body := requestText(req)
	evID, err := c.post(ctx, cli, room, thread, format.RenderMarkdown(body, true, false))
	if err != nil {
		return err
	}
	if err := st.addRequest(ctx, posted{requestID: req.ID, room: string(room), thread: string(thread), eventID: string(evID), steps: len(req.Items), body: body}); err != nil {
		return fmt.Errorf("matrix %s: remember request %s: %w", c.name, req.ID, err)
	}
	for _, k := range []string{reactApprove, reactDeny} {
		_ = limited(ctx, func() error { _, err := cli.SendReaction(ctx, room, evID, k); return err })
	}
	return nil
}

func joinDevices(d []id.DeviceID) string {
	s := make([]string, len(d))
	for i, x := range d {
		s[i] = string(x)
	}
	return strings.Join(s, ", ")
}

// requestText is a request as Markdown: the summary, the numbered steps
// with their previews, how to answer.
func requestText(req approval.Request) string {
	var b strings.Builder
	fmt.Fprintf(&b, "**Approval request** `%s`: %s\n\n", req.ID, oneLine(req.Summary))
	for _, it := range req.Items {
		what := it.Note
		if what == "" {
			what = it.Preview
		}
		fmt.Fprintf(&b, "%d. `%s` %s", it.N, it.Op.Tool, oneLine(what))
		if it.Preview != "" && it.Note != "" {
			fmt.Fprintf(&b, " — `%s`", oneLine(it.Preview))
		}
		if it.Decision.Verdict != approval.Pending {
			fmt.Fprintf(&b, " (%s)", it.Decision.Verdict)
		}
		b.WriteByte('\n')
	}
	b.WriteString("\nReact ✅ to approve every step, ❌ to deny them all; 1️⃣…🔟 select single steps, then ✅ approves just those. Or reply `/approve 1-3 only`, `/deny 2 too broad`.")
	return b.String()
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	s = strings.ReplaceAll(s, "`", "'")
	if r := []rune(s); len(r) > 200 {
		s = string(r[:199]) + "…"
	}
	return s
}

// onReaction answers or toggles a request from a principal's reaction.
func (c *Channel) onReaction(ctx context.Context, evt *event.Event) {
	c.handleMu.Lock()
	defer c.handleMu.Unlock()
	cli, st, _, err := c.conn()
	if err != nil || evt.Sender == cli.UserID || c.batchFailed() {
		return
	}
	r := evt.Content.AsReaction()
	if r.RelatesTo.Type != event.RelAnnotation {
		return
	}
	if done, err := st.handled(ctx, evt.ID.String()); err != nil || done {
		return
	}
	p, err := st.requestByEvent(ctx, r.RelatesTo.EventID.String())
	if err != nil || p.answered != "" {
		_ = st.markHandled(ctx, evt.ID.String(), c.now().UnixNano())
		return
	}
	if ok, reason := c.sender(ctx, evt); !ok {
		c.refuse(ctx, evt, reason)
		return
	}
	key := strings.ReplaceAll(r.RelatesTo.Key, "\uFE0F", "")
	var text string
	switch {
	case key == reactApprove || key == "✔" || key == "👍":
		text = "/approve"
		if len(p.selected) > 0 {
			text = "/approve " + joinInts(p.selected, ",") + " only"
		}
	case key == reactDeny:
		text = "/deny"
	case stepOf(key) > 0 && stepOf(key) <= p.steps:
		sel, err := st.toggle(ctx, p.requestID, stepOf(key), evt.ID.String())
		if err == nil {
			c.editRequest(ctx, cli, p, selectionLine(sel))
		}
		_ = st.markHandled(ctx, evt.ID.String(), c.now().UnixNano())
		return
	default:
		_ = st.markHandled(ctx, evt.ID.String(), c.now().UnixNano())
		return
	}
	c.answer(ctx, cli, st, p, evt, text)
}

// onRedaction un-toggles a step whose number reaction was taken back.
func (c *Channel) onRedaction(ctx context.Context, evt *event.Event) {
	c.handleMu.Lock()
	defer c.handleMu.Unlock()
	cli, st, _, err := c.conn()
	if err != nil || evt.Sender == cli.UserID {
		return
	}
	if done, err := st.handled(ctx, evt.ID.String()); err != nil || done {
		return
	}
	defer func() { _ = st.markHandled(ctx, evt.ID.String(), c.now().UnixNano()) }()
	redacts := evt.Redacts
	if redacts == "" {
		redacts = evt.Content.AsRedaction().Redacts
	}
	reqID, n, err := st.toggleByReaction(ctx, redacts.String())
	if err != nil {
		return
	}
	p, err := st.requestByID(ctx, reqID)
	if err != nil || p.answered != "" {
		return
	}
	if ok, _ := c.sender(ctx, evt); !ok {
		return
	}
	if sel, err := st.toggle(ctx, reqID, n, ""); err == nil {
		c.editRequest(ctx, cli, p, selectionLine(sel))
	}
}

func selectionLine(sel []int) string {
	if len(sel) == 0 {
		return "No step selected: ✅ approves every step."
	}
	return "Selected: steps " + joinInts(sel, ", ") + ". ✅ approves just these and denies the rest."
}

// answerText answers a request with a principal's reply in the approval
// language: the request replied to, or the room's only open one. It
// reports whether the message was taken as an answer.
func (c *Channel) answerText(ctx context.Context, evt *event.Event, msg *event.MessageEventContent, text string, conv channel.Conversation) bool {
	cli, st, _, err := c.conn()
	if err != nil {
		return false
	}
	target := id.EventID("")
	if msg.RelatesTo != nil {
		target = msg.RelatesTo.GetReplyTo()
	}
	if target == "" {
		open, err := st.openRequests(ctx, string(evt.RoomID))
		if err != nil || len(open) == 0 {
			return false
		}
		if len(open) > 1 {
			_ = c.notice(ctx, cli, evt.RoomID, "", "Several approval requests are open here: reply to the one you answer.")
			return true
		}
		target = id.EventID(open[0])
	}
	p, err := st.requestByEvent(ctx, target.String())
	if err != nil {
		return false
	}
	if p.answered != "" {
		_ = c.notice(ctx, cli, evt.RoomID, id.EventID(p.thread), fmt.Sprintf("Request %s was already answered (%s).", p.requestID, p.answered))
		return true
	}
	c.answer(ctx, cli, st, p, evt, text)
	return true
}

// answer hands a principal's answer to the daemon and shows the outcome:
// edited into the request message when it counted, as a notice when not.
func (c *Channel) answer(ctx context.Context, cli *mautrix.Client, st *state, p posted, evt *event.Event, text string) {
	_, _, sink, err := c.conn()
	if err != nil {
		return
	}
	room, thread := id.RoomID(p.room), id.EventID(p.thread)
	conv := channel.Conversation{Channel: c.name, Room: joinRoom(room, thread), Principal: string(evt.Sender)}
	err = sink.Answer(ctx, channel.Answer{RequestID: p.requestID, Text: text, From: conv, Event: evt.ID.String()})
	switch {
	case err == nil:
		outcome := describeAnswer(text, p.steps, evt.Sender)
		_ = st.answered(ctx, p.requestID, outcome)
		c.editRequest(ctx, cli, p, "**"+outcome+"**")
	case errors.Is(err, approval.ErrUnknownRequest):
		_ = st.answered(ctx, p.requestID, "answered elsewhere or expired")
		c.editRequest(ctx, cli, p, "**Answered elsewhere or expired.**")
	default:
		_ = c.notice(ctx, cli, room, thread, fmt.Sprintf("Your answer to %s did not count: %v", p.requestID, err))
	}
	_ = st.markHandled(ctx, evt.ID.String(), c.now().UnixNano())
}

// describeAnswer is the line edited into a request: who answered, and
// which steps the answer approved, denied or left open.
func describeAnswer(text string, steps int, who id.UserID) string {
	a, err := approval.ParseAnswer(text, steps)
	if err != nil {
		return fmt.Sprintf("answered by %s: %s", who, oneLine(text))
	}
	var ok, no, open []int
	for i, d := range a.Steps {
		switch d.Verdict {
		case approval.Approved:
			ok = append(ok, i+1)
		case approval.Denied:
			no = append(no, i+1)
		default:
			open = append(open, i+1)
		}
	}
	switch {
	case len(open) == 0 && len(ok) == 0:
		return fmt.Sprintf("denied by %s", who)
	case len(open) == 0 && len(no) == 0:
		return fmt.Sprintf("approved by %s, %s", who, stepsText(ok))
	case len(open) == 0:
		return fmt.Sprintf("approved by %s, %s (denied: %s)", who, stepsText(ok), joinInts(no, ", "))
	}
	var parts []string
	if len(ok) > 0 {
		parts = append(parts, "approved "+stepsText(ok))
	}
	if len(no) > 0 {
		parts = append(parts, "denied "+stepsText(no))
	}
	parts = append(parts, "still open: "+joinInts(open, ", "))
	return fmt.Sprintf("answered by %s: %s", who, strings.Join(parts, "; "))
}

func stepsText(n []int) string {
	if len(n) == 1 {
		return "step " + strconv.Itoa(n[0])
	}
	return "steps " + joinInts(n, ", ")
}

// editRequest replaces the request message's text with its original
// body and a status line.
func (c *Channel) editRequest(ctx context.Context, cli *mautrix.Client, p posted, status string) {
	content := format.RenderMarkdown(p.body+"\n\n"+status, true, false)
	content.SetEdit(id.EventID(p.eventID))
	if err := limited(ctx, func() error {
		_, err := cli.SendMessageEvent(ctx, id.RoomID(p.room), event.EventMessage, &content)
		return err
	}); err != nil {
		c.log.Warn("matrix: edit an approval request", "channel", c.name, "request", p.requestID, "err", err)
	}
}
