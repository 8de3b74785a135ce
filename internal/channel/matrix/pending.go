//go:build goolm

package matrix

import (
	"context"
	"errors"
	"fmt"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/crypto"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/fluffy-agent/fluffy/internal/channel"
)

// An encrypted event whose key has not come when its batch is handled is
// decrypted later, by mautrix's goroutine that waits for the key (and
// asks the sender's devices for it). Its batch's token is saved before
// then, so the event is recorded as pending in the same transaction; the
// record goes once the event is handled (afterDecrypt) or finally refused
// (undecryptable), and each start fetches the recorded events again
// (fetchPending). The ids of handled events keep a record that outlived
// its handling from handling it twice.

// eventFailureKey keys the *eventFailure of the event being handled in a
// context.
type eventFailureKey struct{}

// eventFailure is the first error handling one event (Channel.fail).
type eventFailure struct{ err error }

// undecrypted lists the encrypted events of a handled batch that are
// neither handled nor decryptable: their key has not come.
func (c *Channel) undecrypted(ctx context.Context, st *state, resp *mautrix.RespSync) ([]pendingEvent, error) {
	c.mu.Lock()
	helper := c.helper
	c.mu.Unlock()
	if helper == nil {
		return nil, nil
	}
	var out []pendingEvent
	for room, data := range resp.Rooms.Join {
		for _, evt := range data.Timeline.Events {
			content, ok := evt.Content.Parsed.(*event.EncryptedEventContent)
			if evt.Type != event.EventEncrypted || !ok || content.Algorithm != id.AlgorithmMegolmV1 {
				continue
			}
			if done, err := st.handled(ctx, evt.ID.String()); err != nil || done {
				if err != nil {
					return nil, fmt.Errorf("state: %w", err)
				}
				continue
			}
			// Keys come only with a sync, and this batch's came before
			// its room events: a session missing now was missing when
			// the event was handled, and mautrix waits for it.
			sess, err := helper.Machine().CryptoStore.GetGroupSession(ctx, room, content.SessionID)
			if errors.Is(err, crypto.ErrGroupSessionWithheld) {
				continue // refused as undecryptable already
			}
			if err != nil {
				return nil, fmt.Errorf("crypto store: %w", err)
			}
			if sess == nil {
				out = append(out, pendingEvent{room: room.String(), eventID: evt.ID.String()})
			}
		}
	}
	return out, nil
}

// afterDecrypt handles an event mautrix decrypted, then forgets it as
// pending, unless handling it failed or the channel is stopping: then
// the next start fetches it again.
func (c *Channel) afterDecrypt(ctx context.Context, st *state, syncer *mautrix.DefaultSyncer, evt *event.Event) {
	var f eventFailure
	syncer.Dispatch(context.WithValue(ctx, eventFailureKey{}, &f), evt)
	if f.err != nil || ctx.Err() != nil || c.batchFailed() {
		return
	}
	if err := st.unpend(ctx, evt.ID.String()); err != nil {
		c.log.Warn("matrix: forget a pending event", "channel", c.name, "event", evt.ID, "err", err)
	}
}

// undecryptable records an event whose key never came (or was withheld)
// as refused: no one can say who wrote it. A wait for a key that ended
// because the channel stops is no answer: the event stays pending.
func (c *Channel) undecryptable(ctx context.Context, st *state, evt *event.Event, err error) {
	if ctx.Err() != nil && errors.Is(err, crypto.ErrNoSessionFound) {
		c.log.Info("matrix: an event still waits for its key; the next start fetches it again", "channel", c.name, "event", evt.ID)
		return
	}
	c.handleMu.Lock()
	defer c.handleMu.Unlock()
	_, _, sink, cerr := c.conn()
	if cerr != nil {
		return
	}
	bg := context.WithoutCancel(ctx)
	if done, herr := st.handled(bg, evt.ID.String()); herr == nil && !done {
		c.log.Warn("matrix: an event could not be decrypted", "channel", c.name, "room", evt.RoomID, "sender", evt.Sender, "event", evt.ID, "err", err)
		if rerr := sink.Record(bg, channel.Refusal{Channel: c.name, Principal: string(evt.Sender), Reason: ReasonUndecryptable,
			Detail: fmt.Sprintf("%s in %s: %v", evt.ID, evt.RoomID, err)}); rerr != nil {
			return // kept pending: the refusal is recorded at the next start
		}
		if herr := st.markHandled(bg, evt.ID.String(), c.now().UnixNano()); herr != nil {
			return
		}
	}
	if uerr := st.unpend(bg, evt.ID.String()); uerr != nil {
		c.log.Warn("matrix: forget a pending event", "channel", c.name, "event", evt.ID, "err", uerr)
	}
}

// fetchPending fetches the events recorded as pending from the homeserver
// and hands them to mautrix as if they came with a sync: decrypted now if
// their key came meanwhile, else when it comes (or refused when it does
// not). An event the homeserver no longer shows is refused.
func (c *Channel) fetchPending(ctx context.Context, cli *mautrix.Client, st *state, since string) error {
	pend, err := st.pending(ctx)
	if err != nil || len(pend) == 0 {
		if err != nil {
			return fmt.Errorf("state: %w", err)
		}
		return nil
	}
	c.mu.Lock()
	helper := c.helper
	c.mu.Unlock()
	// mautrix waits for a missing key only for events of a sync.
	sctx := context.WithValue(ctx, mautrix.SyncTokenContextKey, since)
	for _, p := range pend {
		room, eventID := id.RoomID(p.room), id.EventID(p.eventID)
		if done, err := st.handled(ctx, p.eventID); err != nil || done {
			if err == nil {
				err = st.unpend(ctx, p.eventID)
			}
			if err != nil {
				return fmt.Errorf("state: %w", err)
			}
			continue
		}
		var evt *event.Event
		err := limited(ctx, func() (err error) { evt, err = cli.GetEvent(ctx, room, eventID); return err })
		var he mautrix.HTTPError
		if errors.As(err, &he) && he.Response != nil && he.Response.StatusCode >= 400 && he.Response.StatusCode < 500 {
			c.undecryptable(ctx, st, &event.Event{ID: eventID, RoomID: room}, fmt.Errorf("fetch it again: %w", err))
			continue
		}
		if err != nil {
			return fmt.Errorf("fetch the pending event %s: %w", eventID, err)
		}
		evt.RoomID, evt.ID = room, eventID
		evt.Type.Class = event.MessageEventType
		evt.Mautrix.EventSource = event.SourceJoin | event.SourceTimeline
		if err := evt.Content.ParseRaw(evt.Type); err != nil || evt.Type != event.EventEncrypted {
			c.undecryptable(ctx, st, evt, fmt.Errorf("not a readable encrypted event (%s): %v", evt.Type.Type, err))
			continue
		}
		c.log.Info("matrix: an event that waited for its key is handled again", "channel", c.name, "event", eventID)
		helper.HandleEncrypted(sctx, evt)
	}
	c.mu.Lock()
	failed := c.failed
	c.mu.Unlock()
	if failed != nil {
		return fmt.Errorf("matrix %s: %w", c.name, failed)
	}
	return nil
}
