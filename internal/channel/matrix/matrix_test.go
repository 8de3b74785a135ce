//go:build goolm

package matrix

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/channel/matrix/matrixtest"
	"github.com/fluffy-agent/fluffy/internal/config"
)

// sink is a channel.Sink that keeps what it is given.
type sink struct {
	mu       sync.Mutex
	inbound  []channel.Inbound
	answers  []channel.Answer
	refusals []channel.Refusal
	verified []channel.Verification
	ready    chan struct{}
	once     sync.Once
	// failOn makes the first Deliver of a text containing it fail.
	failOn string
	// lost counts Ready(false) reports.
	lost int
}

func newSink() *sink { return &sink{ready: make(chan struct{})} }

func (s *sink) Deliver(_ context.Context, in channel.Inbound) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failOn != "" && strings.Contains(in.Text, s.failOn) {
		s.failOn = ""
		return "", errors.New("the daemon's inbox is full")
	}
	s.inbound = append(s.inbound, in)
	return "s1", nil
}

func (s *sink) Answer(_ context.Context, a channel.Answer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers = append(s.answers, a)
	return nil
}

func (s *sink) Ready(_ string, ready bool, _ error) {
	if !ready {
		s.mu.Lock()
		s.lost++
		s.mu.Unlock()
	}
	if ready {
		s.once.Do(func() { close(s.ready) })
	}
}

func (s *sink) Record(_ context.Context, r channel.Refusal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refusals = append(s.refusals, r)
	return nil
}

func (s *sink) RecordVerification(_ context.Context, v channel.Verification) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.verified = append(s.verified, v)
	return nil
}

// waitFor polls cond (under the sink's lock) up to a minute.
func (s *sink) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 600 {
		s.mu.Lock()
		ok := cond()
		s.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Fatalf("timed out waiting for %s; refusals %+v, answers %+v, inbound %d", what, s.refusals, s.answers, len(s.inbound))
}

type world struct {
	hs       *matrixtest.Dendrite
	bot, ana string
	eve      string
	// verifyTimeout is the bot's Options.VerifyTimeout.
	verifyTimeout time.Duration
}

func startWorld(t *testing.T) *world {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a Matrix homeserver (Dendrite)")
	}
	ctx := t.Context()
	hs, err := matrixtest.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hs.Stop)
	w := &world{hs: hs}
	for _, a := range []struct {
		name string
		to   *string
	}{{"bot", &w.bot}, {"ana", &w.ana}, {"eve", &w.eve}} {
		if *a.to, err = hs.CreateAccount(ctx, a.name, a.name+"-password"); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

func (w *world) person(t *testing.T, user string, crossSign bool) *matrixtest.Person {
	t.Helper()
	name := strings.TrimPrefix(strings.Split(user, ":")[0], "@")
	p, err := matrixtest.Login(t.Context(), w.hs.URL, user, name+"-password", t.TempDir(), crossSign)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// newBot is the bot's channel with its state in dir.
func (w *world) newBot(t *testing.T, dir string) *Channel {
	t.Helper()
	cfg := config.Matrix{Homeserver: w.hs.URL, UserID: w.bot, TokenEnv: "BOT_PASSWORD", Password: true, Principals: []string{w.ana}}
	c, err := New(cfg, Options{StateDir: dir, VerifyTimeout: w.verifyTimeout, LookupEnv: func(k string) (string, bool) { return "bot-password", k == "BOT_PASSWORD" }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runBot runs the channel until the returned stop is called, which
// returns Run's error.
func (w *world) runBot(t *testing.T, dir string, s *sink) (*Channel, func() error) {
	t.Helper()
	c := w.newBot(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, s) }()
	select {
	case <-s.ready:
	case err := <-done:
		cancel()
		t.Fatalf("the channel stopped: %v", err)
	case <-time.After(2 * time.Minute):
		cancel()
		t.Fatal("the channel did not connect")
	}
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return c, stop
}

func body(e *event.Event) string {
	if m, ok := e.Content.Parsed.(*event.MessageEventContent); ok {
		if m.NewContent != nil {
			return m.NewContent.Body
		}
		return m.Body
	}
	return ""
}

func bodyMatches(sub string) func(*event.Event) bool {
	return func(e *event.Event) bool { return strings.Contains(body(e), sub) }
}

// roomTest is TestEncryptedRoom's world: the homeserver, the channel
// and its sink, the person's verified device and a stranger, their room,
// and the conversation the person's first message opened.
type roomTest struct {
	t        *testing.T
	w        *world
	s        *sink
	c        *Channel
	stop     func() error
	dir      string
	ana, eve *matrixtest.Person
	room     id.RoomID
	in       channel.Inbound
}

// TestEncryptedRoom: the person's message in an encrypted room reaches
// the daemon as theirs; the reply, a long reply in a thread, a very long
// one as an encrypted file; an approval request answered by reactions (a
// stranger's and an unverified device's change nothing) and by a reply;
// restarts of the channel and of the homeserver that lose and repeat
// nothing; and none of the plaintext in the homeserver's database.
func TestEncryptedRoom(t *testing.T) {
	w := startWorld(t)
	ctx := t.Context()
	ana := w.person(t, w.ana, true)
	eve := w.person(t, w.eve, false)
	room, err := ana.CreateEncryptedRoom(ctx, "fluffy", w.bot, w.eve)
	if err != nil {
		t.Fatal(err)
	}
	s := newSink()
	dir := t.TempDir()
	c, stop := w.runBot(t, dir, s)
	waitJoined(t, ana, room, w.bot)
	waitJoined(t, ana, room, w.eve)

	// The person's task, encrypted; a stranger's message is refused.
	const task = "please summarise the plan purple-octopus"
	if _, err := ana.Send(ctx, room, task); err != nil {
		t.Fatal(err)
	}
	if _, err := eve.Send(ctx, room, "do what I say"); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the task", func() bool { return len(s.inbound) == 1 })
	in := s.inbound[0]
	if in.Text != task || in.Conversation.Principal != w.ana || in.Conversation.Room != string(room) || in.Meta["encrypted"] != "true" {
		t.Fatalf("inbound %+v", in)
	}
	s.waitFor(t, "eve refused", func() bool { return hasRefusal(s.refusals, w.eve, ReasonSenderNotAllowed) })

	r := &roomTest{t: t, w: w, s: s, c: c, stop: stop, dir: dir, ana: ana, eve: eve, room: room, in: in}
	r.replies()
	r.plainRoom()
	r.approvals()
	r.restarts()
	r.atRest()
}

// replies: the answer, a long one in a thread, a very long one as a file.
func (r *roomTest) replies() {
	t, ctx, c, ana, room, in := r.t, r.t.Context(), r.c, r.ana, r.room, r.in
	// The reply, and a long one in a thread under its summary.
	if err := c.Send(ctx, in.Conversation, channel.Outbound{Text: "**Done**: the plan has three steps."}); err != nil {
		t.Fatal(err)
	}
	e, err := ana.Wait(ctx, room, time.Minute, bodyMatches("the plan has three steps"))
	if err != nil {
		t.Fatal(err)
	}
	if m := e.Content.AsMessage(); !strings.Contains(m.FormattedBody, "<strong>Done</strong>") || !e.Mautrix.WasEncrypted {
		t.Fatalf("the reply: %+v (encrypted %v)", m, e.Mautrix.WasEncrypted)
	}
	diff := "Changes to main.go\n\ndiff --git a/main.go b/main.go\n" + strings.Repeat("+\tfmt.Println(\"line green-giraffe\")\n", 120)
	if err := c.Send(ctx, in.Conversation, channel.Outbound{Text: diff}); err != nil {
		t.Fatal(err)
	}
	summary, err := ana.Wait(ctx, room, time.Minute, bodyMatches("Changes to main.go (the whole text is in the thread)"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ana.Wait(ctx, room, time.Minute, func(e *event.Event) bool {
		m, ok := e.Content.Parsed.(*event.MessageEventContent)
		return ok && strings.Contains(m.Body, "diff --git") && m.RelatesTo != nil && m.RelatesTo.GetThreadParent() == summary.ID
	}); err != nil {
		t.Fatalf("the diff in the thread: %v", err)
	}

	// A very long reply is a file in the thread, encrypted with a key of
	// its own.
	huge := "Build log\n\n" + strings.Repeat("compiling package mango-tapir\n", 1500)
	if err := c.Send(ctx, in.Conversation, channel.Outbound{Text: huge}); err != nil {
		t.Fatal(err)
	}
	fileEv, err := ana.Wait(ctx, room, time.Minute, func(e *event.Event) bool {
		m, ok := e.Content.Parsed.(*event.MessageEventContent)
		return ok && m.MsgType == event.MsgFile && m.RelatesTo != nil && m.RelatesTo.GetThreadParent() != ""
	})
	if err != nil {
		t.Fatalf("the file in the thread: %v", err)
	}
	fm := fileEv.Content.AsMessage()
	if fm.File == nil {
		t.Fatalf("the file is not encrypted: %+v", fm)
	}
	uri, err := fm.File.URL.Parse()
	if err != nil {
		t.Fatal(err)
	}
	data, err := ana.Client.DownloadBytes(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	if err := fm.File.DecryptInPlace(data); err != nil || string(data) != huge {
		t.Fatalf("the file decrypts to %d bytes (want %d): %v", len(data), len(huge), err)
	}

}

// plainRoom: in a room without encryption the homeserver vouches for
// the sender, so messages count, but no approval request is shown there.
func (r *roomTest) plainRoom() {
	t, ctx, s, c, ana := r.t, r.t.Context(), r.s, r.c, r.ana
	plain, err := ana.CreatePlainRoom(ctx, "plain", r.w.bot)
	if err != nil {
		t.Fatal(err)
	}
	waitJoined(t, ana, plain, r.w.bot)
	if _, err := ana.Send(ctx, plain, "in the clear"); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the plain room's message", func() bool { return len(s.inbound) == 2 })
	s.mu.Lock()
	in := s.inbound[1]
	s.inbound = s.inbound[:1] // the rest of the test counts the encrypted room's
	s.mu.Unlock()
	if in.Conversation.Room != string(plain) || in.Meta["encrypted"] != "false" || in.Text != "in the clear" {
		t.Fatalf("the plain room's message: %+v", in)
	}
	if err := c.Send(ctx, in.Conversation, channel.Outbound{Text: "clear reply"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ana.Wait(ctx, plain, time.Minute, bodyMatches("clear reply")); err != nil {
		t.Fatal(err)
	}
	err = c.SendApproval(ctx, in.Conversation, approval.Request{ID: "rp", Summary: "x", Items: []approval.Item{{N: 1}}})
	if !errors.Is(err, channel.ErrCannotSend) {
		t.Fatalf("SendApproval in a plain room: %v, want ErrCannotSend", err)
	}
	if _, err := ana.Wait(ctx, plain, time.Minute, bodyMatches("this room is not end-to-end encrypted")); err != nil {
		t.Fatal(err)
	}
}

// approvals: by reactions, refused while a device is unverified, by a reply.
func (r *roomTest) approvals() {
	t, ctx, w, s, c, ana, eve, room, in := r.t, r.t.Context(), r.w, r.s, r.c, r.ana, r.eve, r.room, r.in
	// An approval request; a stranger's ✅ and an unverified device's ✅
	// change nothing; 1️⃣ 3️⃣ then ✅ approve exactly steps 1 and 3.
	req := approval.Request{ID: "r1", Session: "s1", Summary: "run three commands", Items: []approval.Item{
		{N: 1, Step: approval.Step{Preview: "echo one"}}, {N: 2, Step: approval.Step{Preview: "echo two"}}, {N: 3, Step: approval.Step{Preview: "echo three"}}}}
	if err := c.SendApproval(ctx, in.Conversation, req); err != nil {
		t.Fatal(err)
	}
	shown, err := ana.Wait(ctx, room, time.Minute, bodyMatches("Approval request"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eve.React(ctx, room, shown.ID, "✅", false); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "eve's reaction refused", func() bool { return countRefusals(s.refusals, w.eve, ReasonSenderNotAllowed) == 2 })
	ana2 := w.person(t, w.ana, false)
	for _, enc := range []bool{true, false} {
		if _, err := ana2.React(ctx, room, shown.ID, "✅", enc); err != nil {
			t.Fatal(err)
		}
	}
	// The encrypted one is refused as from an unverified device, or as
	// undecryptable when its key lost the race with it.
	s.waitFor(t, "the unverified device's reactions refused", func() bool {
		return countRefusals(s.refusals, w.ana, ReasonUnverifiedDevice)+countRefusals(s.refusals, w.ana, ReasonUndecryptable) == 2
	})
	for _, k := range []string{"1️⃣", "3️⃣"} {
		if _, err := ana.React(ctx, room, shown.ID, k, true); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ana.Wait(ctx, room, time.Minute, bodyMatches("Selected: steps 1, 3.")); err != nil {
		t.Fatal(err)
	}
	ok, err := ana.React(ctx, room, shown.ID, "✅", true)
	if err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the answer", func() bool { return len(s.answers) == 1 })
	if a := s.answers[0]; a.Text != "/approve 1,3 only" || a.RequestID != "r1" || a.From.Principal != w.ana || a.Event != ok.String() {
		t.Fatalf("answer %+v, want /approve 1,3 only from %s as %s", a, w.ana, ok)
	}
	if _, err := ana.Wait(ctx, room, time.Minute, bodyMatches("approved by "+w.ana+", steps 1, 3 (denied: 2)")); err != nil {
		t.Fatal(err)
	}

	// While the person has an unverified device, no request is shown.
	err = c.SendApproval(ctx, in.Conversation, approval.Request{ID: "r2", Summary: "x", Items: []approval.Item{{N: 1}}})
	if !errors.Is(err, ErrUnverifiedDevices) {
		t.Fatalf("SendApproval with an unverified device: %v", err)
	}
	if _, err := ana.Wait(ctx, room, time.Minute, bodyMatches("Approval request r2 is not shown")); err != nil {
		t.Fatal(err)
	}

	// Once the unverified device is gone, requests are shown again; a
	// reply in the approval language answers the room's open request.
	if _, err := ana2.Client.Logout(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.SendApproval(ctx, in.Conversation, approval.Request{ID: "r3", Summary: "two more", Items: []approval.Item{{N: 1}, {N: 2}}}); err != nil {
		t.Fatalf("SendApproval after the unverified device logged out: %v", err)
	}
	if _, err := ana.Wait(ctx, room, time.Minute, bodyMatches("two more")); err != nil {
		t.Fatal(err)
	}
	reply, err := ana.Send(ctx, room, "/deny 2 too broad")
	if err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the reply's answer", func() bool { return len(s.answers) == 2 })
	if a := s.answers[1]; a.Text != "/deny 2 too broad" || a.RequestID != "r3" || a.Event != reply.String() {
		t.Fatalf("the reply's answer: %+v", a)
	}
	if _, err := ana.Wait(ctx, room, time.Minute, bodyMatches("answered by "+w.ana+": denied step 2; still open: 1")); err != nil {
		t.Fatal(err)
	}

}

// restarts: of the channel, after a failed batch, of the homeserver.
func (r *roomTest) restarts() {
	t, ctx, w, s, stop, dir, ana, room := r.t, r.t.Context(), r.w, r.s, r.stop, r.dir, r.ana, r.room
	// Down, a message arrives; up again, it is delivered once and
	// nothing before it again.
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	const later = "are you back? blue-walrus"
	if _, err := ana.Send(ctx, room, later); err != nil {
		t.Fatal(err)
	}
	_, stop = w.runBot(t, dir, s)
	s.waitFor(t, "the message sent while down", func() bool { return len(s.inbound) == 2 })
	time.Sleep(2 * time.Second) // a repeat would arrive with the same sync
	s.mu.Lock()
	if len(s.inbound) != 2 || s.inbound[1].Text != later || len(s.answers) != 2 {
		t.Fatalf("after the restart: %d inbound, %d answers", len(s.inbound), len(s.answers))
	}
	s.mu.Unlock()

	// A message the daemon could not take fails its sync batch: the
	// channel stops without saving the batch's token, and the next run
	// delivers it; what the batch delivered before it is not repeated.
	// Both are sent while the channel is down, so they arrive in one
	// batch.
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, m := range []string{"first yellow-yak", "then red-panda"} {
		if _, err := ana.Send(ctx, room, m); err != nil {
			t.Fatal(err)
		}
	}
	s.mu.Lock()
	s.failOn = "red-panda"
	s.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err := w.newBot(t, dir).Run(rctx, s)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "inbox is full") {
		t.Fatalf("Run with a failing delivery: %v", err)
	}
	_, stop = w.runBot(t, dir, s)
	s.waitFor(t, "the redelivery", func() bool { return len(s.inbound) == 4 })
	time.Sleep(2 * time.Second)
	s.mu.Lock()
	if got := []string{s.inbound[2].Text, s.inbound[3].Text}; len(s.inbound) != 4 || got[0] != "first yellow-yak" || got[1] != "then red-panda" {
		t.Fatalf("after the failed batch: %d inbound, last %q", len(s.inbound), got)
	}
	s.mu.Unlock()

	// The homeserver goes away and comes back: the channel reports
	// itself not ready, reconnects with backoff, and what was sent
	// meanwhile arrives.
	if err := w.hs.Restart(); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the channel to notice", func() bool { return s.lost > 0 })
	if _, err := ana.Send(ctx, room, "back again? teal-otter"); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the message after the homeserver's restart", func() bool { return len(s.inbound) == 5 })
	s.mu.Lock()
	if got := s.inbound[4].Text; got != "back again? teal-otter" {
		t.Fatalf("after the homeserver's restart: %q", got)
	}
	s.mu.Unlock()
	_ = stop

}

// atRest: no plaintext in the homeserver's stores; the bot kept its recovery key.
func (r *roomTest) atRest() {
	t, w, dir := r.t, r.w, r.dir
	// Encrypted at rest: no plaintext in the homeserver's databases
	// (which the search does read: the user ids are there in clear).
	if hits, err := w.hs.Contains(w.ana); err != nil || len(hits) == 0 {
		t.Fatalf("the at-rest search finds not even %s: %v %v", w.ana, hits, err)
	}
	for _, text := range []string{"purple-octopus", "green-giraffe", "blue-walrus", "the plan has three steps", "mango-tapir"} {
		hits, err := w.hs.Contains(text)
		if err != nil {
			t.Fatal(err)
		}
		if len(hits) > 0 {
			t.Errorf("%q is in the homeserver's %v", text, hits)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "recovery-key")); err != nil {
		t.Errorf("the bot's cross-signing recovery key: %v", err)
	}
}

func waitJoined(t *testing.T, p *matrixtest.Person, room id.RoomID, user string) {
	t.Helper()
	for range 300 {
		if p.Joined(t.Context(), room, user) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not join %s", user, room)
}

func hasRefusal(rs []channel.Refusal, who, reason string) bool {
	return countRefusals(rs, who, reason) > 0
}

func countRefusals(rs []channel.Refusal, who, reason string) int {
	n := 0
	for _, r := range rs {
		if r.Principal == who && r.Reason == reason {
			n++
		}
	}
	return n
}
