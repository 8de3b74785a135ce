//go:build goolm

package matrix

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"maunium.net/go/mautrix/id"

	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/channel/matrix/matrixtest"
)

// TestVerification: the person verifies the bot's device by emoji from
// a device of theirs the bot does not trust (their cross-signing was
// reset since the bot pinned their master key). A stranger's request is
// refused; one the operator never answers times out; one the operator
// cancels ends; in none of them does the bot trust the device. One the
// operator confirms after comparing the emoji (the person's client shows
// the same) makes the bot trust the device, re-pins the new master key
// (said in the answer and audited), and the person's client sees the bot
// verified.
func TestVerification(t *testing.T) {
	w := startWorld(t)
	w.verifyTimeout = 15 * time.Second
	ctx := t.Context()
	s := newSink()
	c, _ := w.runBot(t, t.TempDir(), s)

	// The bot pins ana's master key from her first device; then she
	// resets cross-signing from a new device.
	w.person(t, w.ana, true)
	if bad, err := c.unverifiedDevices(ctx, id.UserID(w.ana)); err != nil || len(bad) != 0 {
		t.Fatalf("ana's first device: unverified %v, %v", bad, err)
	}
	ana := w.person(t, w.ana, true)
	dev := ana.Client.DeviceID
	if !untrusted(t, c, w.ana, dev) {
		t.Fatal("ana's device under a reset master key is trusted before any verification")
	}

	// A stranger cannot verify with the bot.
	eve := w.person(t, w.eve, true)
	etxn, err := eve.Verify(ctx, w.bot)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := eve.WaitSAS(ctx, etxn, time.Minute, func(s matrixtest.SAS) bool { return s.Cancelled != "" || s.Done }); err != nil || got.Done {
		t.Fatalf("eve's verification: %+v, %v", got, err)
	}
	s.waitFor(t, "eve's request refused", func() bool { return hasRefusal(s.refusals, w.eve, ReasonSenderNotAllowed) })
	if v := steps(s, w.eve); len(v) != 0 {
		t.Fatalf("eve's verification was taken up: %v", v)
	}
	if len(c.Verifications()) != 0 {
		t.Fatalf("eve's verification is pending: %+v", c.Verifications())
	}

	// One the operator never answers times out.
	txn := startSAS(t, c, ana, w.bot)
	got, err := ana.WaitSAS(ctx, txn, time.Minute, func(s matrixtest.SAS) bool { return s.Cancelled != "" || s.Done })
	if err != nil || got.Cancelled != "m.timeout" {
		t.Fatalf("an unanswered verification: %+v, %v", got, err)
	}
	waitStep(t, s, string(txn), "cancelled")
	if !untrusted(t, c, w.ana, dev) {
		t.Fatal("the device is trusted after a verification that timed out")
	}

	// One the operator cancels ends, for the person too.
	txn = startSAS(t, c, ana, w.bot)
	a, err := c.AnswerVerification(ctx, string(txn), false)
	if err != nil || a.Outcome != OutcomeCancelled {
		t.Fatalf("cancel: %+v, %v", a, err)
	}
	if got, err := ana.WaitSAS(ctx, txn, time.Minute, func(s matrixtest.SAS) bool { return s.Cancelled != "" || s.Done }); err != nil || got.Cancelled != "m.user" {
		t.Fatalf("a cancelled verification, the person's side: %+v, %v", got, err)
	}
	waitStep(t, s, string(txn), "cancelled")
	if !untrusted(t, c, w.ana, dev) {
		t.Fatal("the device is trusted after the operator cancelled")
	}
	if _, err := c.AnswerVerification(ctx, string(txn), true); !errors.Is(err, ErrUnknownVerification) {
		t.Fatalf("confirming a cancelled verification: %v", err)
	}

	// The operator compares and confirms.
	txn = startSAS(t, c, ana, w.bot)
	pending := c.Verifications()[0]
	seen, err := ana.WaitSAS(ctx, txn, time.Minute, func(s matrixtest.SAS) bool { return len(s.Emoji) == 7 })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pending.Emoji, seen.Emoji) || !slices.Equal(pending.Decimals, seen.Decimals) {
		t.Fatalf("the bot shows %v %v, the person %v %v", pending.Emoji, pending.Decimals, seen.Emoji, seen.Decimals)
	}
	if pending.PinnedKey == "" || pending.MasterKey == pending.PinnedKey {
		t.Fatalf("the operator is not told the master key differs from the pinned one: %+v", pending)
	}
	a, err = c.AnswerVerification(ctx, string(txn), true)
	if err != nil || a.Outcome != OutcomeVerified || !a.Repinned {
		t.Fatalf("confirm: %+v, %v", a, err)
	}
	if untrusted(t, c, w.ana, dev) {
		t.Fatal("the device is not trusted after the operator confirmed")
	}
	if got, err := ana.WaitSAS(ctx, txn, time.Minute, func(s matrixtest.SAS) bool { return s.Cancelled != "" || s.Done }); err != nil || !got.Done {
		t.Fatalf("the person's side: %+v, %v", got, err)
	}
	if ok, err := ana.TrustsUser(ctx, w.bot); err != nil || !ok {
		t.Fatalf("the person's client does not see the bot verified: %v", err)
	}
	v := steps(s, w.ana)
	want := []string{"started", "cancelled", "started", "cancelled", "started", "confirmed", "done"}
	if got := stepNames(v); !slices.Equal(got, want) {
		t.Fatalf("audited steps %v, want %v", got, want)
	}
	done := v[len(v)-1]
	if !done.Repinned || done.PinnedBefore != pending.PinnedKey || done.MasterKey != pending.MasterKey || done.Device != string(dev) || v[len(v)-2].SAS == "" {
		t.Fatalf("the done step: %+v", done)
	}
}

// startSAS has the person ask the bot for a verification and waits until
// the bot lists it with the emoji to compare.
func startSAS(t *testing.T, c *Channel, p *matrixtest.Person, bot string) id.VerificationTransactionID {
	t.Helper()
	txn, err := p.Verify(t.Context(), bot)
	if err != nil {
		t.Fatal(err)
	}
	for range 600 {
		for _, v := range c.Verifications() {
			if v.ID == string(txn) && v.State == StateCompare {
				return txn
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the bot does not list verification %s with emoji: %+v", txn, c.Verifications())
	return ""
}

// untrusted reports whether the bot does not count device as user's,
// from freshly fetched keys.
func untrusted(t *testing.T, c *Channel, user string, device id.DeviceID) bool {
	t.Helper()
	bad, err := c.unverifiedDevices(context.Background(), id.UserID(user))
	if err != nil {
		t.Fatal(err)
	}
	return slices.Contains(bad, device)
}

func steps(s *sink, principal string) []channel.Verification {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []channel.Verification
	for _, v := range s.verified {
		if v.Principal == principal {
			out = append(out, v)
		}
	}
	return out
}

func stepNames(v []channel.Verification) []string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = x.Step
	}
	return out
}

func waitStep(t *testing.T, s *sink, txn, step string) {
	t.Helper()
	s.waitFor(t, "step "+step+" of "+txn, func() bool {
		for _, v := range s.verified {
			if v.ID == txn && v.Step == step {
				return true
			}
		}
		return false
	})
}

// TestInRoomVerification: a verification the person starts in a direct
// chat (in-room events, each related to the request) finishes like one
// by to-device messages once the operator confirms.
func TestInRoomVerification(t *testing.T) {
	w := startWorld(t)
	ctx := t.Context()
	s := newSink()
	c, _ := w.runBot(t, t.TempDir(), s)
	ana := w.person(t, w.ana, true)
	room, err := ana.CreateEncryptedRoom(ctx, "dm", w.bot)
	if err != nil {
		t.Fatal(err)
	}
	waitJoined(t, ana, room, w.bot)
	// Once the bot reads the room, the person's client knows its device.
	if _, err := ana.Send(ctx, room, "hello"); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the first message", func() bool { return len(s.inbound) == 1 })
	txn, err := ana.VerifyInRoom(ctx, room, w.bot)
	if err != nil {
		t.Fatal(err)
	}
	waitCompare(t, c, txn)
	pending := c.Verifications()[0]
	seen, err := ana.WaitSAS(ctx, txn, time.Minute, func(s matrixtest.SAS) bool { return len(s.Emoji) == 7 || s.Cancelled != "" })
	if err != nil || !slices.Equal(pending.Emoji, seen.Emoji) {
		t.Fatalf("the bot shows %v, the person %+v: %v", pending.Emoji, seen, err)
	}
	a, err := c.AnswerVerification(ctx, string(txn), true)
	if err != nil || a.Outcome != OutcomeVerified {
		t.Fatalf("confirm: %+v, %v", a, err)
	}
	if got, err := ana.WaitSAS(ctx, txn, time.Minute, func(s matrixtest.SAS) bool { return s.Cancelled != "" || s.Done }); err != nil || !got.Done {
		t.Fatalf("the person's side: %+v, %v", got, err)
	}
	if ok, err := ana.TrustsUser(ctx, w.bot); err != nil || !ok {
		t.Fatalf("the person's client does not see the bot verified: %v", err)
	}
	if got := stepNames(steps(s, w.ana)); !slices.Equal(got, []string{"started", "confirmed", "done"}) {
		t.Fatalf("audited steps %v", got)
	}
}

// waitCompare waits until the bot lists verification txn with the emoji
// to compare.
func waitCompare(t *testing.T, c *Channel, txn id.VerificationTransactionID) {
	t.Helper()
	for range 600 {
		for _, v := range c.Verifications() {
			if v.ID == string(txn) && v.State == StateCompare {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the bot does not list verification %s with emoji: %+v", txn, c.Verifications())
}
