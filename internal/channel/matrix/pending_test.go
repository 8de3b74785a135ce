//go:build goolm

package matrix

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestKeyAfterRestart: an encrypted message whose key comes only after
// the channel stopped (its batch's token saved) is handled at the next
// start, once; one whose key never comes is refused as undecryptable,
// once; and a pending record that outlived the handling of its event (a
// crash between the two) handles nothing twice.
func TestKeyAfterRestart(t *testing.T) {
	w := startWorld(t)
	ctx := t.Context()
	ana := w.person(t, w.ana, true)
	room, err := ana.CreateEncryptedRoom(ctx, "late keys", w.bot)
	if err != nil {
		t.Fatal(err)
	}
	s := newSink()
	dir := t.TempDir()
	_, stop := w.runBot(t, dir, s)
	waitJoined(t, ana, room, w.bot)

	late, share, err := ana.SendKeyLater(ctx, room, "late key grey-heron")
	if err != nil {
		t.Fatal(err)
	}
	never, _, err := ana.SendKeyLater(ctx, room, "no key ever black-swan")
	if err != nil {
		t.Fatal(err)
	}
	// The second message is sent once the first arrived, so it comes in
	// a later batch: the batch with the two above was saved by then.
	for i, m := range []string{"after them one", "after them two"} {
		if _, err := ana.Send(ctx, room, m); err != nil {
			t.Fatal(err)
		}
		s.waitFor(t, m, func() bool { return len(s.inbound) == i+1 })
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := []string{late.String(), never.String()}
	slices.Sort(want)
	if got := pendingIDs(t, dir); !slices.Equal(got, want) {
		t.Fatalf("pending after the first run: %v, want %s %s", got, late, never)
	}
	s.mu.Lock()
	if len(s.inbound) != 2 || countRefusals(s.refusals, w.ana, ReasonUndecryptable) != 0 {
		t.Fatalf("before the key: %d inbound, refusals %+v", len(s.inbound), s.refusals)
	}
	s.mu.Unlock()

	// The key comes while the channel is down; the next start fetches
	// the event again and handles it.
	if err := share(ctx, w.bot); err != nil {
		t.Fatal(err)
	}
	_, stop = w.runBot(t, dir, s)
	s.waitFor(t, "the message whose key came late", func() bool { return len(s.inbound) == 3 })
	s.mu.Lock()
	if in := s.inbound[2]; in.Text != "late key grey-heron" || in.Meta["event_id"] != late.String() || in.Conversation.Principal != w.ana {
		t.Fatalf("the late message: %+v", in)
	}
	s.mu.Unlock()
	s.waitFor(t, "the message without a key refused", func() bool { return countRefusals(s.refusals, w.ana, ReasonUndecryptable) == 1 })
	s.mu.Lock()
	if r := s.refusals[len(s.refusals)-1]; !strings.Contains(r.Detail, never.String()) {
		t.Fatalf("the refusal: %+v, want one of %s", r, never)
	}
	s.mu.Unlock()
	waitNoPending(t, dir)

	// A key that comes while the channel runs, after the event's batch
	// was saved: the event is handled then, and its record goes.
	during, share, err := ana.SendKeyLater(ctx, room, "key while running ochre-ibis")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ana.Send(ctx, room, "after it"); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the message after it", func() bool { return len(s.inbound) == 4 })
	if err := share(ctx, w.bot); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the message whose key came while running", func() bool { return len(s.inbound) == 5 })
	s.mu.Lock()
	if in := s.inbound[4]; in.Meta["event_id"] != during.String() {
		t.Fatalf("the message whose key came while running: %+v", in)
	}
	s.mu.Unlock()
	waitNoPending(t, dir)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	// A crash after the events were handled, before their records went.
	st, err := openState(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.saveBatch(ctx, mustGet(t, st, "next_batch"), []pendingEvent{{string(room), late.String()}, {string(room), never.String()}}, 1); err != nil {
		t.Fatal(err)
	}
	st.close()
	_, stop = w.runBot(t, dir, s)
	if _, err := ana.Send(ctx, room, "after the crash"); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the message after the crash", func() bool { return len(s.inbound) == 6 })
	waitNoPending(t, dir)
	time.Sleep(time.Second) // a repeat would come with the same sync
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.inbound) != 6 || s.inbound[5].Text != "after the crash" || countRefusals(s.refusals, w.ana, ReasonUndecryptable) != 1 {
		t.Fatalf("after the crash: %d inbound (last %q), refusals %+v", len(s.inbound), s.inbound[len(s.inbound)-1].Text, s.refusals)
	}
	_ = stop
}

func pendingIDs(t *testing.T, dir string) []string {
	t.Helper()
	st, err := openState(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	p, err := st.pending(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, 0, len(p))
	for _, e := range p {
		out = append(out, e.eventID)
	}
	slices.Sort(out)
	return out
}

func waitNoPending(t *testing.T, dir string) {
	t.Helper()
	for range 600 {
		if len(pendingIDs(t, dir)) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("still pending: %v", pendingIDs(t, dir))
}

func mustGet(t *testing.T, st *state, k string) string {
	t.Helper()
	v, err := st.get(t.Context(), k)
	if err != nil || v == "" {
		t.Fatalf("state %s: %q %v", k, v, err)
	}
	return v
}
