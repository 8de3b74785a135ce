//go:build goolm

package matrixtest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"go.mau.fi/util/dbutil"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/crypto"
	"maunium.net/go/mautrix/crypto/cryptohelper"
	"maunium.net/go/mautrix/crypto/verificationhelper"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	_ "modernc.org/sqlite" // the "sqlite" driver
)

// Person is one device of a person's account: a mautrix client with its
// own crypto store, syncing in the background and keeping every message
// and reaction it sees (decrypted where it can).
type Person struct {
	Client *mautrix.Client
	helper *cryptohelper.CryptoHelper
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	events []*event.Event
	seen   chan struct{}

	// late are the sessions of SendKeyLater: a key request for one is
	// not answered (as by a device that went offline).
	late map[id.SessionID]bool

	vh *verificationhelper.VerificationHelper
	// vstore is vh's store of verifications (VerifyInRoom adds to it).
	vstore *verificationhelper.InMemoryVerificationStore
	// starting is held while VerifyInRoom sends a request and stores
	// it: the bot's answer waits for that.
	starting sync.RWMutex
	// sas is every verification of this device, by transaction id.
	sas map[id.VerificationTransactionID]*SAS
}

// Login logs a new device of user in, with its crypto store in dir. With
// crossSign it makes the account's cross-signing keys and signs the
// device with them, as a person who set up their first device does; a
// device logged in without is one its person has not verified.
func Login(ctx context.Context, homeserver, user, password, dir string, crossSign bool) (*Person, error) {
	cli, err := mautrix.NewClient(homeserver, "", "")
	if err != nil {
		return nil, err
	}
	cli.Log = zerolog.Nop()
	syncer := mautrix.NewDefaultSyncer()
	cli.Syncer = syncer
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_txlock", "immediate")
	raw, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "person.db")+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	db, err := dbutil.NewWithDB(raw, "sqlite")
	if err != nil {
		return nil, err
	}
	helper, err := cryptohelper.NewCryptoHelper(cli, []byte("matrixtest pickle key"), db)
	if err != nil {
		return nil, err
	}
	local := user
	if m := regexp.MustCompile(`^@([^:]+):`).FindStringSubmatch(user); m != nil {
		local = m[1]
	}
	helper.LoginAs = &mautrix.ReqLogin{Type: mautrix.AuthTypePassword,
		Identifier: mautrix.UserIdentifier{Type: mautrix.IdentifierTypeUser, User: local}, Password: password}
	if err := helper.Init(ctx); err != nil {
		return nil, fmt.Errorf("crypto init: %w", err)
	}
	cli.Crypto = helper
	p := &Person{Client: cli, helper: helper, done: make(chan struct{}), seen: make(chan struct{}, 1), late: map[id.SessionID]bool{}}
	allow := helper.Machine().AllowKeyShare
	helper.Machine().AllowKeyShare = func(ctx context.Context, d *id.Device, info event.RequestedKeyInfo) *crypto.KeyShareRejection {
		p.mu.Lock()
		late := p.late[info.SessionID]
		p.mu.Unlock()
		if late {
			return &crypto.KeyShareRejectNoResponse
		}
		return allow(ctx, d, info)
	}
	if crossSign {
		mach := helper.Machine()
		if _, _, err := mach.GenerateAndUploadCrossSigningKeysWithPassword(ctx, password, ""); err != nil {
			return nil, fmt.Errorf("cross-signing keys: %w", err)
		}
		if err := mach.SignOwnDevice(ctx, mach.OwnIdentity()); err != nil {
			return nil, fmt.Errorf("sign own device: %w", err)
		}
		if err := mach.SignOwnMasterKey(ctx); err != nil {
			return nil, fmt.Errorf("sign own master key: %w", err)
		}
	}
	keep := func(_ context.Context, evt *event.Event) {
		p.mu.Lock()
		p.events = append(p.events, evt)
		p.mu.Unlock()
		select {
		case p.seen <- struct{}{}:
		default:
		}
	}
	p.sas = map[id.VerificationTransactionID]*SAS{}
	p.vstore = verificationhelper.NewInMemoryVerificationStore()
	p.vh = verificationhelper.NewVerificationHelper(cli, helper.Machine(), p.vstore, (*personSAS)(p), false, false, true)
	cli.Syncer = inRoomSyncer{syncer, p}
	err = p.vh.Init(ctx)
	cli.Syncer = syncer
	if err != nil {
		return nil, fmt.Errorf("verification helper: %w", err)
	}
	syncer.OnEventType(event.EventMessage, keep)
	syncer.OnEventType(event.EventReaction, keep)
	syncer.OnEventType(event.StateMember, func(ctx context.Context, evt *event.Event) {
		if evt.GetStateKey() == cli.UserID.String() && evt.Content.AsMember().Membership == event.MembershipInvite {
			_, _ = cli.JoinRoomByID(ctx, evt.RoomID)
		}
		keep(ctx, evt)
	})
	sctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go func() {
		defer close(p.done)
		_ = cli.SyncWithContext(sctx)
	}()
	return p, nil
}

// CreateEncryptedRoom makes a private room with encryption on and
// invites users; it returns the room id.
func (p *Person) CreateEncryptedRoom(ctx context.Context, name string, invite ...string) (id.RoomID, error) {
	var inv []id.UserID
	for _, u := range invite {
		inv = append(inv, id.UserID(u))
	}
	enc := &event.Event{Type: event.StateEncryption, StateKey: new(string),
		Content: event.Content{Parsed: &event.EncryptionEventContent{Algorithm: id.AlgorithmMegolmV1}}}
	resp, err := p.Client.CreateRoom(ctx, &mautrix.ReqCreateRoom{Name: name, Preset: "private_chat", Invite: inv, InitialState: []*event.Event{enc}})
	if err != nil {
		return "", err
	}
	return resp.RoomID, nil
}

// CreatePlainRoom makes a private room without encryption and invites
// users; it returns the room id.
func (p *Person) CreatePlainRoom(ctx context.Context, name string, invite ...string) (id.RoomID, error) {
	var inv []id.UserID
	for _, u := range invite {
		inv = append(inv, id.UserID(u))
	}
	resp, err := p.Client.CreateRoom(ctx, &mautrix.ReqCreateRoom{Name: name, Preset: "private_chat", Invite: inv})
	if err != nil {
		return "", err
	}
	return resp.RoomID, nil
}

// Send sends a text message (encrypted in an encrypted room).
func (p *Person) Send(ctx context.Context, room id.RoomID, text string) (id.EventID, error) {
	resp, err := p.Client.SendText(ctx, room, text)
	if err != nil {
		return "", err
	}
	return resp.EventID, nil
}

// React sends a reaction; encrypted, when encrypt, as the clients that
// encrypt reactions do (its sending device is then known).
func (p *Person) React(ctx context.Context, room id.RoomID, target id.EventID, key string, encrypt bool) (id.EventID, error) {
	if !encrypt {
		resp, err := p.Client.SendReaction(ctx, room, target, key)
		if err != nil {
			return "", err
		}
		return resp.EventID, nil
	}
	content := &event.ReactionEventContent{RelatesTo: event.RelatesTo{Type: event.RelAnnotation, EventID: target, Key: key}}
	enc, err := p.helper.Encrypt(ctx, room, event.EventReaction, content)
	if err != nil {
		return "", err
	}
	resp, err := p.Client.SendMessageEvent(ctx, room, event.EventEncrypted, enc)
	if err != nil {
		return "", err
	}
	return resp.EventID, nil
}

// Joined reports whether user is a joined member of room.
func (p *Person) Joined(ctx context.Context, room id.RoomID, user string) bool {
	m, err := p.Client.JoinedMembers(ctx, room)
	if err != nil {
		return false
	}
	_, ok := m.Joined[id.UserID(user)]
	return ok
}

// Wait returns the first event seen in room for which match is true,
// waiting up to timeout.
func (p *Person) Wait(ctx context.Context, room id.RoomID, timeout time.Duration, match func(*event.Event) bool) (*event.Event, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		for _, e := range p.events {
			if e.RoomID == room && match(e) {
				p.mu.Unlock()
				return e, nil
			}
		}
		p.mu.Unlock()
		select {
		case <-p.seen:
		case <-deadline.C:
			return nil, fmt.Errorf("no matching event in %s within %s", room, timeout)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Events is every event seen so far.
func (p *Person) Events() []*event.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*event.Event(nil), p.events...)
}

// Close stops syncing and closes the crypto store.
func (p *Person) Close() {
	p.cancel()
	<-p.done
	_ = p.helper.Close()
}

// SendKeyLater sends an encrypted text message whose room key is shared
// with no one else yet, as by a client whose key sharing is delayed; the
// returned share sends that key (from before the message) to every
// device of a user. The person's next message starts a new session.
func (p *Person) SendKeyLater(ctx context.Context, room id.RoomID, text string) (id.EventID, func(ctx context.Context, user string) error, error) {
	mach := p.helper.Machine()
	if err := mach.CryptoStore.RemoveOutboundGroupSession(ctx, room); err != nil {
		return "", nil, err
	}
	if err := mach.ShareGroupSession(ctx, room, []id.UserID{p.Client.UserID}); err != nil {
		return "", nil, err
	}
	sess, err := mach.CryptoStore.GetOutboundGroupSession(ctx, room)
	if err != nil || sess == nil {
		return "", nil, fmt.Errorf("the new outbound session: %v", err)
	}
	key := sess.ShareContent()
	p.mu.Lock()
	p.late[sess.ID()] = true
	p.mu.Unlock()
	enc, err := mach.EncryptMegolmEvent(ctx, room, event.EventMessage, &event.MessageEventContent{MsgType: event.MsgText, Body: text})
	if err != nil {
		return "", nil, err
	}
	resp, err := p.Client.SendMessageEvent(ctx, room, event.EventEncrypted, enc)
	if err != nil {
		return "", nil, err
	}
	if err := mach.CryptoStore.RemoveOutboundGroupSession(ctx, room); err != nil {
		return "", nil, err
	}
	share := func(ctx context.Context, user string) error {
		devices := mach.LoadDevices(ctx, id.UserID(user))
		if len(devices) == 0 {
			return fmt.Errorf("no devices of %s", user)
		}
		for _, d := range devices {
			if err := mach.SendEncryptedToDevice(ctx, d, event.ToDeviceRoomKey, key); err != nil {
				return err
			}
		}
		return nil
	}
	return resp.EventID, share, nil
}
