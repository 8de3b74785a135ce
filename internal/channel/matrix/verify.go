//go:build goolm

package matrix

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/crypto"
	"maunium.net/go/mautrix/crypto/verificationhelper"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/fluffy-agent/fluffy/internal/channel"
)

// answerWait bounds how long a confirmation waits for the person's
// device to finish the verification.
const answerWait = 30 * time.Second

// Errors of Verifications and Answer.
var (
	ErrUnknownVerification = errors.New("matrix: no pending verification has that id")
	ErrNotComparable       = errors.New("matrix: the verification has no emoji to compare yet")
)

// verification is one SAS verification a principal started with the
// bot's device.
type verification struct {
	info PendingVerification
	// prior is the device's own trust before the verification: mautrix
	// marks the device verified before it signs the master key, and a
	// verification that fails after that must not leave it so.
	prior id.TrustState
	timer *time.Timer
	// end is closed when the verification is done or cancelled; outcome
	// and the fields after it are set before.
	end      chan struct{}
	outcome  string
	reason   string
	repinned bool
	// macOpen: the bot sent its MAC (the operator confirmed); until
	// then the person's MAC waits in held (gateMAC).
	macOpen bool
	held    []*event.Event
}

// verifier holds the verifications of one connection and is the
// callbacks of mautrix's verification helper. The bot never confirms on
// its own: only Answer, for the operator, does.
type verifier struct {
	c       *Channel
	timeout time.Duration

	mu      sync.Mutex
	vh      *verificationhelper.VerificationHelper
	mach    *crypto.OlmMachine
	pending map[id.VerificationTransactionID]*verification
	// macHandler is the helper's handler of MAC events (gatedSyncer).
	macHandler mautrix.EventHandler
}

func newVerifier(c *Channel, timeout time.Duration) *verifier {
	if timeout <= 0 {
		timeout = DefaultVerifyTimeout
	}
	return &verifier{c: c, timeout: timeout, pending: map[id.VerificationTransactionID]*verification{}}
}

var (
	_ verificationhelper.RequiredCallbacks = (*verifier)(nil)
	_ verificationhelper.ShowSASCallbacks  = (*verifier)(nil)
)

func (v *verifier) recorder() (channel.VerificationRecorder, bool) {
	_, _, sink, err := v.c.conn()
	if err != nil {
		return nil, false
	}
	r, ok := sink.(channel.VerificationRecorder)
	return r, ok
}

// record audits a step; a step that cannot be recorded stops the
// verification.
func (v *verifier) record(ctx context.Context, p PendingVerification, step, reason string, extra func(*channel.Verification)) error {
	r, ok := v.recorder()
	if !ok {
		return errors.New("the daemon does not record verifications")
	}
	rec := channel.Verification{Channel: v.c.name, Principal: p.Principal, Device: p.Device, ID: p.ID, Step: step, Room: p.Room, Reason: reason}
	if extra != nil {
		extra(&rec)
	}
	return r.RecordVerification(ctx, rec)
}

// VerificationRequested accepts a principal's request (the bot answers
// ready and waits for the person's client to start SAS) and cancels
// anyone else's.
func (v *verifier) VerificationRequested(ctx context.Context, txn id.VerificationTransactionID, from id.UserID, fromDevice id.DeviceID) {
	v.mu.Lock()
	vh, mach := v.vh, v.mach
	v.mu.Unlock()
	if vh == nil {
		return
	}
	if !v.c.isPrincipal(from) {
		if _, _, sink, err := v.c.conn(); err == nil {
			_ = sink.Record(ctx, channel.Refusal{Channel: v.c.name, Principal: string(from), Reason: ReasonSenderNotAllowed,
				Detail: fmt.Sprintf("verification request %s from device %s", txn, fromDevice)})
		}
		if err := vh.CancelVerification(ctx, txn, event.VerificationCancelCodeUser, "only the bot's principals may verify it"); err != nil {
			v.c.log.Warn("matrix: cancel a stranger's verification", "channel", v.c.name, "from", from, "err", err)
		}
		return
	}
	now := v.c.now()
	p := PendingVerification{ID: string(txn), Channel: v.c.name, Principal: string(from), Device: string(fromDevice),
		State: StateRequested, Started: now, Expires: now.Add(v.timeout)}
	var prior id.TrustState
	if d, err := mach.GetOrFetchDevice(ctx, from, fromDevice); err == nil {
		prior = d.Trust
	}
	if err := v.record(ctx, p, "started", "", nil); err != nil {
		v.c.log.Warn("matrix: a verification cannot be recorded; refused", "channel", v.c.name, "from", from, "err", err)
		_ = vh.CancelVerification(ctx, txn, event.VerificationCancelCodeInternalError, "the verification could not be recorded")
		return
	}
	ver := &verification{info: p, prior: prior, end: make(chan struct{})}
	ver.timer = time.AfterFunc(v.timeout, func() { v.expire(txn) })
	v.mu.Lock()
	v.pending[txn] = ver
	v.mu.Unlock()
	if err := vh.AcceptVerification(ctx, txn); err != nil {
		v.c.log.Warn("matrix: accept a verification", "channel", v.c.name, "from", from, "err", err)
		v.finish(ctx, txn, OutcomeCancelled, "accept: "+err.Error())
	}
}

// VerificationReady: the person's client starts SAS next.
func (v *verifier) VerificationReady(context.Context, id.VerificationTransactionID, id.DeviceID, bool, bool, *verificationhelper.QRCode) {
}

// ShowSAS keeps the emoji and numbers for the operator, with the
// principal's master key as the bot has it, and waits.
func (v *verifier) ShowSAS(ctx context.Context, txn id.VerificationTransactionID, emojis []rune, names []string, decimals []int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	ver := v.pending[txn]
	if ver == nil {
		return
	}
	ver.info.Emoji = ver.info.Emoji[:0]
	for i, e := range emojis {
		s := string(e)
		if i < len(names) {
			s += " " + names[i]
		}
		ver.info.Emoji = append(ver.info.Emoji, s)
	}
	ver.info.Decimals = decimals
	ver.info.State = StateCompare
	if keys, err := v.mach.CryptoStore.GetCrossSigningKeys(ctx, id.UserID(ver.info.Principal)); err == nil {
		if mk, ok := keys[id.XSUsageMaster]; ok {
			ver.info.MasterKey = mk.Key.String()
			if mk.First != mk.Key {
				ver.info.PinnedKey = mk.First.String()
			}
		}
	}
	v.c.log.Info("matrix: a verification waits for the operator (fluffy matrix verify)", "channel", v.c.name,
		"principal", ver.info.Principal, "device", ver.info.Device, "id", txn)
}

// VerificationCancelled: the person's client, or mautrix on a failed
// check, cancelled.
func (v *verifier) VerificationCancelled(ctx context.Context, txn id.VerificationTransactionID, code event.VerificationCancelCode, reason string) {
	v.finish(ctx, txn, OutcomeCancelled, fmt.Sprintf("%s: %s", code, reason))
}

// VerificationDone: both sides checked each other's keys, after the
// operator confirmed.
func (v *verifier) VerificationDone(ctx context.Context, txn id.VerificationTransactionID, _ event.VerificationMethod) {
	v.finish(ctx, txn, OutcomeVerified, "")
}

// finish ends a verification once: it is audited, a device a failed
// verification left marked verified gets its old trust back, and a
// confirmed master key that differs from the pinned one is pinned.
func (v *verifier) finish(ctx context.Context, txn id.VerificationTransactionID, outcome, reason string) {
	v.mu.Lock()
	ver := v.pending[txn]
	delete(v.pending, txn)
	mach := v.mach
	var p PendingVerification
	if ver != nil {
		p = ver.info
	}
	v.mu.Unlock()
	if ver == nil || mach == nil {
		return
	}
	ver.timer.Stop()
	user, dev := id.UserID(p.Principal), id.DeviceID(p.Device)
	if outcome == OutcomeVerified && p.State != StateConfirmed {
		// Done without the operator's confirmation cannot happen through
		// mautrix (the bot's MAC goes out only in ConfirmSAS); were it to,
		// it must not count.
		outcome, reason = OutcomeCancelled, "done without the operator's confirmation"
	}
	var extra func(*channel.Verification)
	step := "cancelled"
	if outcome == OutcomeVerified {
		step = "done"
		repinned, before, master, err := v.repin(ctx, mach, user)
		if err != nil {
			v.c.log.Warn("matrix: re-pin the principal's master key", "channel", v.c.name, "principal", user, "err", err)
		}
		ver.repinned = repinned
		extra = func(r *channel.Verification) { r.MasterKey, r.Repinned, r.PinnedBefore = master, repinned, before }
	} else if d, err := mach.CryptoStore.GetDevice(ctx, user, dev); err == nil && d != nil && d.Trust == id.TrustStateVerified && ver.prior != id.TrustStateVerified {
		d.Trust = ver.prior
		if err := mach.CryptoStore.PutDevice(ctx, user, d); err != nil {
			v.c.log.Warn("matrix: restore a device's trust after a failed verification", "channel", v.c.name, "device", dev, "err", err)
		}
	}
	if err := v.record(ctx, p, step, reason, extra); err != nil {
		v.c.log.Warn("matrix: record a verification", "channel", v.c.name, "id", txn, "err", err)
	}
	ver.outcome, ver.reason = outcome, reason
	close(ver.end)
}

// repin makes the principal's current master key the pinned one when
// the bot's user-signing key signed it (the verification the operator
// confirmed covered it) and it differs from the key first seen.
func (v *verifier) repin(ctx context.Context, mach *crypto.OlmMachine, user id.UserID) (repinned bool, before, master string, err error) {
	keys, err := mach.CryptoStore.GetCrossSigningKeys(ctx, user)
	if err != nil {
		return false, "", "", err
	}
	mk, ok := keys[id.XSUsageMaster]
	if !ok {
		return false, "", "", nil
	}
	master = mk.Key.String()
	if mk.First == mk.Key {
		return false, "", master, nil
	}
	signed, err := mach.IsUserTrusted(ctx, user)
	if err != nil || !signed {
		return false, "", master, err
	}
	if err := mach.CryptoStore.ResetMasterKeyTOFU(ctx, user, mk.Key); err != nil {
		return false, "", master, err
	}
	return true, mk.First.String(), master, nil
}

// expire cancels a verification the operator did not answer in time.
func (v *verifier) expire(txn id.VerificationTransactionID) {
	v.mu.Lock()
	ver, vh := v.pending[txn], v.vh
	v.mu.Unlock()
	if ver == nil || vh == nil {
		return
	}
	ctx := context.Background()
	if err := vh.CancelVerification(ctx, txn, event.VerificationCancelCodeTimeout, "the bot's operator did not confirm the emoji in time"); err != nil {
		v.c.log.Warn("matrix: cancel an expired verification", "channel", v.c.name, "id", txn, "err", err)
	}
	v.finish(ctx, txn, OutcomeCancelled, "timeout: the operator did not answer")
}

// list is the pending verifications, oldest first.
func (v *verifier) list() []PendingVerification {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]PendingVerification, 0, len(v.pending))
	for _, ver := range v.pending {
		p := ver.info
		p.Emoji = slices.Clone(p.Emoji)
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b PendingVerification) int { return a.Started.Compare(b.Started) })
	return out
}

// answer is the operator's: confirm (the emoji match what the person
// sees) or cancel. A confirmation waits for the person's device to
// finish, up to answerWait.
func (v *verifier) answer(ctx context.Context, txnID string, confirm bool) (VerifyAnswer, error) {
	txn := id.VerificationTransactionID(txnID)
	v.mu.Lock()
	ver, vh := v.pending[txn], v.vh
	if ver == nil || vh == nil {
		v.mu.Unlock()
		return VerifyAnswer{}, fmt.Errorf("%w: %s", ErrUnknownVerification, txnID)
	}
	if confirm && ver.info.State != StateCompare {
		state := ver.info.State
		v.mu.Unlock()
		return VerifyAnswer{}, fmt.Errorf("%w (it is %s)", ErrNotComparable, state)
	}
	if confirm {
		ver.info.State = StateConfirmed
		ver.timer.Stop()
	}
	p := ver.info
	v.mu.Unlock()
	if !confirm {
		if err := vh.CancelVerification(ctx, txn, event.VerificationCancelCodeUser, "the bot's operator cancelled: the emoji did not match"); err != nil {
			v.c.log.Warn("matrix: cancel a verification", "channel", v.c.name, "id", txn, "err", err)
		}
		v.finish(ctx, txn, OutcomeCancelled, "the operator cancelled")
		return VerifyAnswer{PendingVerification: p, Outcome: OutcomeCancelled, Reason: "the operator cancelled"}, nil
	}
	sas := strings.Join(p.Emoji, ", ")
	if len(p.Decimals) > 0 {
		sas += fmt.Sprintf(" (%d %d %d)", p.Decimals[0], p.Decimals[1%len(p.Decimals)], p.Decimals[2%len(p.Decimals)])
	}
	if err := v.record(ctx, p, "confirmed", "", func(r *channel.Verification) {
		r.SAS, r.MasterKey, r.PinnedBefore = sas, p.MasterKey, p.PinnedKey
	}); err != nil {
		_ = vh.CancelVerification(ctx, txn, event.VerificationCancelCodeInternalError, "the verification could not be recorded")
		v.finish(ctx, txn, OutcomeCancelled, "the confirmation could not be recorded")
		return VerifyAnswer{}, fmt.Errorf("matrix: record the confirmation: %w", err)
	}
	if err := vh.ConfirmSAS(ctx, txn); err != nil {
		_ = vh.CancelVerification(ctx, txn, event.VerificationCancelCodeUser, "the bot could not finish the verification")
		v.finish(ctx, txn, OutcomeCancelled, "confirm: "+err.Error())
		return VerifyAnswer{PendingVerification: p, Outcome: OutcomeCancelled, Reason: ver.reason}, nil
	}
	v.mu.Lock()
	ver.macOpen = true
	held, handle := ver.held, v.macHandler
	ver.held = nil
	v.mu.Unlock()
	for _, evt := range held {
		handle(ctx, evt)
	}
	wait := time.NewTimer(answerWait)
	defer wait.Stop()
	select {
	case <-ver.end:
		return VerifyAnswer{PendingVerification: p, Outcome: ver.outcome, Reason: ver.reason, Repinned: ver.repinned}, nil
	case <-wait.C:
	case <-ctx.Done():
	}
	return VerifyAnswer{PendingVerification: p, Outcome: OutcomePending, Reason: "the person's device has not finished yet"}, nil
}

// stop cancels what is pending when the connection ends.
func (v *verifier) stop() {
	v.mu.Lock()
	var ids []id.VerificationTransactionID
	for txn := range v.pending {
		ids = append(ids, txn)
	}
	v.mu.Unlock()
	for _, txn := range ids {
		v.finish(context.Background(), txn, OutcomeCancelled, "the channel stopped")
	}
	v.mu.Lock()
	v.vh, v.mach = nil, nil
	v.mu.Unlock()
}

// gatedSyncer is the syncer mautrix's verification helper registers its
// handlers on: the person's MAC reaches the helper only after the bot
// sent its own (after the operator confirmed). mautrix checks the
// person's master key against the key their MAC names only when their
// MAC comes last; when it comes first, ConfirmSAS compares the bot's own
// master key with theirs and fails. Holding it also keeps the person's
// keys out of the helper's hands until the operator has spoken.
type gatedSyncer struct {
	*mautrix.DefaultSyncer
	v *verifier
}

func (g gatedSyncer) OnEventType(t event.Type, h mautrix.EventHandler) {
	if t == event.ToDeviceVerificationMAC || t == event.InRoomVerificationMAC {
		g.v.mu.Lock()
		g.v.macHandler = h
		g.v.mu.Unlock()
		h = g.v.gateMAC(h)
	}
	if t.Class == event.MessageEventType && strings.HasPrefix(t.Type, "m.key.verification.") {
		h = inRoomVerification(id.UserID(g.v.c.cfg.UserID), h)
	}
	g.DefaultSyncer.OnEventType(t, h)
}

// inRoomVerification hands the helper an in-room verification event
// (one a client sends after a "verify user" in a direct chat) under the
// id of the request it relates to: that id is the verification's, and
// mautrix v0.32 looks the event up by the event's own id instead, which
// finds nothing (and cancels). The bot's own events, which come back with
// the sync, are dropped: the helper would take them for the other side's.
func inRoomVerification(self id.UserID, h mautrix.EventHandler) mautrix.EventHandler {
	return func(ctx context.Context, evt *event.Event) {
		if evt.RoomID == "" {
			h(ctx, evt)
			return
		}
		if evt.Sender == self {
			return
		}
		r, ok := evt.Content.Parsed.(event.Relatable)
		if !ok {
			return
		}
		rel := r.OptionalGetRelatesTo()
		if rel == nil || rel.Type != event.RelReference || rel.EventID == "" {
			return // tied to no request
		}
		e := *evt
		e.ID = rel.EventID
		h(ctx, &e)
	}
}

// gateMAC holds a MAC event of a pending verification until the bot has
// sent its own.
func (v *verifier) gateMAC(h mautrix.EventHandler) mautrix.EventHandler {
	return func(ctx context.Context, evt *event.Event) {
		// The transaction as the helper reads it.
		txn := id.VerificationTransactionID(evt.ID)
		if evt.ID == "" {
			if t, ok := evt.Content.Parsed.(event.VerificationTransactionable); ok {
				txn = t.GetTransactionID()
			}
		}
		v.mu.Lock()
		if ver := v.pending[txn]; ver != nil && !ver.macOpen {
			ver.held = append(ver.held, evt)
			v.mu.Unlock()
			return
		}
		v.mu.Unlock()
		h(ctx, evt)
	}
}

func (v *verifier) attach(vh *verificationhelper.VerificationHelper, mach *crypto.OlmMachine) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.vh, v.mach = vh, mach
}

// Verifications lists the verifications of the bot's device that
// principals started and that have not ended, oldest first.
func (c *Channel) Verifications() []PendingVerification { return c.verify.list() }

// AnswerVerification is the operator's answer to a verification:
// confirm when the emoji match what the person's client shows, which
// makes the bot trust the person's device and the master key the
// verification covered (re-pinning it when it differs from the pinned
// one); else cancel. ErrUnknownVerification, ErrNotComparable.
func (c *Channel) AnswerVerification(ctx context.Context, id string, confirm bool) (VerifyAnswer, error) {
	return c.verify.answer(ctx, id, confirm)
}
