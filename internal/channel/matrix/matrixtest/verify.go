//go:build goolm

package matrixtest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.mau.fi/util/jsontime"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/crypto/verificationhelper"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"
)

// SAS is what the person's device saw of one emoji verification.
type SAS struct {
	// Emoji are the emoji with their names ("🐶 Dog"), as the bot lists
	// them; Decimals the three numbers.
	Emoji    []string
	Decimals []int
	Done     bool
	// Cancelled is the cancel code ("m.user", "m.timeout"), when it was.
	Cancelled string
	Reason    string
}

// personSAS is the person's side of mautrix's verification helper: it
// starts SAS once the bot is ready and confirms the emoji at once (the
// test person trusts what it is shown; the bot's operator is the one who
// compares).
type personSAS Person

func (p *personSAS) entry(txn id.VerificationTransactionID) *SAS {
	s := p.sas[txn]
	if s == nil {
		s = &SAS{}
		p.sas[txn] = s
	}
	return s
}

func (p *personSAS) changed() {
	select {
	case p.seen <- struct{}{}:
	default:
	}
}

func (p *personSAS) VerificationRequested(context.Context, id.VerificationTransactionID, id.UserID, id.DeviceID) {
}

func (p *personSAS) VerificationReady(_ context.Context, txn id.VerificationTransactionID, _ id.DeviceID, sas, _ bool, _ *verificationhelper.QRCode) {
	if !sas {
		return
	}
	// The helper holds its lock while it calls back.
	go func() { _ = p.vh.StartSAS(context.Background(), txn) }()
}

func (p *personSAS) ShowSAS(_ context.Context, txn id.VerificationTransactionID, emojis []rune, names []string, decimals []int) {
	p.mu.Lock()
	s := p.entry(txn)
	s.Emoji = s.Emoji[:0]
	for i, e := range emojis {
		s.Emoji = append(s.Emoji, string(e)+" "+names[i])
	}
	s.Decimals = decimals
	p.mu.Unlock()
	p.changed()
	go func() { _ = p.vh.ConfirmSAS(context.Background(), txn) }()
}

func (p *personSAS) VerificationCancelled(_ context.Context, txn id.VerificationTransactionID, code event.VerificationCancelCode, reason string) {
	p.mu.Lock()
	s := p.entry(txn)
	s.Cancelled, s.Reason = string(code), reason
	p.mu.Unlock()
	p.changed()
}

func (p *personSAS) VerificationDone(_ context.Context, txn id.VerificationTransactionID, _ event.VerificationMethod) {
	p.mu.Lock()
	p.entry(txn).Done = true
	p.mu.Unlock()
	p.changed()
}

// Verify asks user's devices to verify this one by emoji, by to-device
// messages (as a client's "verify user" does); it returns the
// transaction id.
func (p *Person) Verify(ctx context.Context, user string) (id.VerificationTransactionID, error) {
	txn, err := p.vh.StartVerification(ctx, id.UserID(user))
	if err != nil {
		return "", err
	}
	p.mu.Lock()
	(*personSAS)(p).entry(txn)
	p.mu.Unlock()
	return txn, nil
}

// VerifyInRoom asks user to verify this device by emoji in room, as a
// client's "verify user" in a direct chat does; it returns the
// transaction id (the request's event id). The request is sent here, not
// by mautrix v0.32's StartInRoomVerification, which encrypts it twice
// (once itself, once more in SendMessageEvent): the bot would read an
// empty message.
func (p *Person) VerifyInRoom(ctx context.Context, room id.RoomID, user string) (id.VerificationTransactionID, error) {
	// The request's key goes to the members this device knows of.
	if _, err := p.Wait(ctx, room, time.Minute, func(e *event.Event) bool {
		return e.Type == event.StateMember && e.GetStateKey() == user && e.Content.AsMember().Membership == event.MembershipJoin
	}); err != nil {
		return "", fmt.Errorf("%s's join of %s not seen: %w", user, room, err)
	}
	p.starting.Lock()
	defer p.starting.Unlock()
	resp, err := p.Client.SendMessageEvent(ctx, room, event.EventMessage, &event.MessageEventContent{
		MsgType: event.MsgVerificationRequest, Body: "verification request", FromDevice: p.Client.DeviceID,
		Methods: []event.VerificationMethod{event.VerificationMethodSAS}, To: id.UserID(user)})
	if err != nil {
		return "", err
	}
	txn := id.VerificationTransactionID(resp.EventID)
	if err := p.vstore.SaveVerificationTransaction(ctx, verificationhelper.VerificationTransaction{
		ExpirationTime: jsontime.UnixMilli{Time: time.Now().Add(10 * time.Minute)}, RoomID: room,
		VerificationState: verificationhelper.VerificationStateRequested, TransactionID: txn, TheirUserID: id.UserID(user),
	}); err != nil {
		return "", err
	}
	p.mu.Lock()
	(*personSAS)(p).entry(txn)
	p.mu.Unlock()
	return txn, nil
}

// inRoomSyncer is the syncer the person's verification helper registers
// on: it hands the helper an in-room verification event under the id of
// the request it relates to (mautrix v0.32 looks it up by its own id) and
// drops the person's own, as the channel does (verify.go there).
type inRoomSyncer struct {
	*mautrix.DefaultSyncer
	p *Person
}

func (s inRoomSyncer) OnEventType(t event.Type, h mautrix.EventHandler) {
	if t.Class == event.MessageEventType && strings.HasPrefix(t.Type, "m.key.verification.") {
		next := h
		h = func(ctx context.Context, evt *event.Event) {
			if evt.RoomID == "" {
				next(ctx, evt)
				return
			}
			r, ok := evt.Content.Parsed.(event.Relatable)
			if !ok || evt.Sender == s.p.Client.UserID {
				return
			}
			rel := r.OptionalGetRelatesTo()
			if rel == nil || rel.Type != event.RelReference || rel.EventID == "" {
				return
			}
			s.p.starting.RLock()
			defer s.p.starting.RUnlock()
			e := *evt
			e.ID = rel.EventID
			next(ctx, &e)
		}
	}
	s.DefaultSyncer.OnEventType(t, h)
}

// WaitSAS returns the verification's state once cond holds, waiting up
// to timeout.
func (p *Person) WaitSAS(ctx context.Context, txn id.VerificationTransactionID, timeout time.Duration, cond func(SAS) bool) (SAS, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		var s SAS
		if e := p.sas[txn]; e != nil {
			s = *e
			s.Emoji = append([]string(nil), e.Emoji...)
		}
		p.mu.Unlock()
		if cond(s) {
			return s, nil
		}
		select {
		case <-p.seen:
		case <-deadline.C:
			return s, fmt.Errorf("verification %s: not there within %s (now %+v)", txn, timeout, s)
		case <-ctx.Done():
			return s, ctx.Err()
		}
	}
}

// TrustsUser reports whether this device has verified user (its
// user-signing key signed user's master key, as a finished emoji
// verification does).
func (p *Person) TrustsUser(ctx context.Context, user string) (bool, error) {
	return p.helper.Machine().IsUserTrusted(ctx, id.UserID(user))
}
