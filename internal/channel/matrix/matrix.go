//go:build goolm

package matrix

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/secret"
)

// Refusal reasons this channel records (channel.Refusal.Reason).
const (
	ReasonSenderNotAllowed = "sender_not_allowed"
	// ReasonUnverifiedDevice: a principal's message or answer from a
	// device the principal has not cross-signed.
	ReasonUnverifiedDevice = "unverified_device"
	// ReasonUnencrypted: a plaintext message in an encrypted room, which
	// the homeserver could have written.
	ReasonUnencrypted = "unencrypted_in_encrypted_room"
	// ReasonUndecryptable: an encrypted event whose key never came (or
	// was withheld): no one can say who wrote it.
	ReasonUndecryptable = "undecryptable"
)

// ErrUnverifiedDevices is SendApproval's error while a principal has
// devices they have not verified: the request is not shown there (the
// room is told why).
var ErrUnverifiedDevices = errors.New("matrix: the principal has unverified devices")

// Limits on what one reply becomes.
const (
	// threadAbove: a reply longer than this (bytes or lines) goes into
	// a thread under its first line.
	threadAbove      = 2000
	threadAboveLines = 20
	// fileAbove: a reply longer than this is sent as a file in the
	// thread, not as a message.
	fileAbove = 32 << 10
	// typingFor is how long one typing notification lasts; it is
	// renewed while the turn runs.
	typingFor = 30 * time.Second
	// handledFor is how long a handled event's id is kept: far longer
	// than a sync batch can be replayed.
	handledFor = 30 * 24 * time.Hour
)

// Options are the channel's dependencies. StateDir is required.
type Options struct {
	// Logger receives the channel's log; nil discards it.
	Logger *slog.Logger
	// StateDir is the account's directory (<data dir>/matrix/<name>):
	// crypto.db, state.db, the pickle key and the recovery key. Created
	// 0700 when missing.
	StateDir string
	// Secret returns the access token (or the password, with
	// password: true); nil reads the account's token reference, or
	// token_env or token_file.
	Secret func(ctx context.Context) (string, error)
	// Resolve resolves a token reference of a backend beyond env: and
	// file: (the daemon's age store or vault); nil refuses them.
	Resolve func(ctx context.Context, ref secret.Ref) ([]byte, error)
	// LookupEnv resolves token_env; nil is os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// Now stamps Inbound.Received; nil is time.Now.
	Now func() time.Time
	// VerifyTimeout is how long a person's verification of the bot's
	// device waits for the operator; zero is the account's
	// verify_timeout (and its default, DefaultVerifyTimeout).
	VerifyTimeout time.Duration
}

// Channel is one Matrix account. It implements channel.Channel and
// channel.TurnObserver.
type Channel struct {
	cfg        config.Matrix
	name       string
	principals map[id.UserID]bool
	dir        string
	log        *slog.Logger
	secret     func(ctx context.Context) (string, error)
	now        func() time.Time

	// mu guards the fields below, set while Run is connected.
	mu     sync.Mutex
	cli    *mautrix.Client
	helper *cryptohelper.CryptoHelper
	st     *state
	sink   channel.Sink
	typing map[id.RoomID]context.CancelFunc
	// failed is the first error handling the current sync batch: the
	// batch's token is then not saved, so it is handled again.
	failed error
	// verify holds the verifications principals started.
	verify *verifier
	// handleMu serialises the handling of events (a decrypted event can
	// arrive from mautrix's goroutine that waited for its key).
	handleMu sync.Mutex
}

var (
	_ channel.Channel      = (*Channel)(nil)
	_ channel.TurnObserver = (*Channel)(nil)
)

// New builds the channel from an account's configuration (which must
// pass Check) without connecting: Run connects.
func New(cfg config.Matrix, opts Options) (*Channel, error) {
	if errs := Check([]config.Matrix{cfg}, config.Origin{}, opts.LookupEnv); len(errs) > 0 {
		return nil, fmt.Errorf("matrix: %w", errors.Join(errs...))
	}
	if opts.StateDir == "" {
		return nil, errors.New("matrix: Options.StateDir is required")
	}
	if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("matrix: state directory: %w", err)
	}
	c := &Channel{cfg: cfg, name: ChannelName(cfg), principals: map[id.UserID]bool{}, dir: opts.StateDir,
		log: opts.Logger, secret: opts.Secret, now: opts.Now, typing: map[id.RoomID]context.CancelFunc{}}
	for _, p := range cfg.Principals {
		c.principals[id.UserID(p)] = true
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.now == nil {
		c.now = time.Now
	}
	timeout := opts.VerifyTimeout
	if timeout == 0 {
		timeout = cfg.VerifyTimeout.Std()
	}
	c.verify = newVerifier(c, timeout)
	if c.secret == nil {
		env, other := opts.LookupEnv, opts.Resolve
		c.secret = func(ctx context.Context) (string, error) { return resolveToken(ctx, cfg, env, other) }
	}
	return c, nil
}

// Name is the channel's instance name.
func (c *Channel) Name() string { return c.name }

// Run logs in, sets up end-to-end encryption, joins the configured
// rooms and syncs until ctx ends (nil) or the homeserver cannot be
// reached for long (the daemon then restarts it with backoff).
func (c *Channel) Run(ctx context.Context, sink channel.Sink) error {
	// Ends with Run, so that the goroutines still waiting for a key end
	// too (what they wait for stays pending for the next start).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := openState(ctx, c.dir)
	if err != nil {
		return err
	}
	defer st.close()
	cli, helper, err := c.connect(ctx, st)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		err = fmt.Errorf("matrix %s: %w", c.name, err)
		sink.Ready(c.name, false, err)
		return err
	}
	defer helper.Close()
	c.mu.Lock()
	c.cli, c.helper, c.st, c.sink = cli, helper, st, sink
	c.mu.Unlock()
	defer func() {
		cancel() // before the connection is forgotten: see above
		c.mu.Lock()
		for _, stop := range c.typing {
			stop()
		}
		c.typing = map[id.RoomID]context.CancelFunc{}
		c.cli, c.helper, c.st, c.sink = nil, nil, nil, nil
		c.mu.Unlock()
	}()
	// Before the connection is forgotten (deferred calls run last
	// first): what is pending ends on the record.
	defer c.verify.stop()
	for _, r := range c.cfg.Rooms {
		if _, err := cli.JoinRoom(ctx, r, nil); err != nil {
			c.log.Warn("matrix: join a configured room", "channel", c.name, "room", r, "err", err)
		}
	}
	err = c.syncLoop(ctx, cli, st, sink)
	if ctx.Err() != nil {
		return nil
	}
	sink.Ready(c.name, false, err)
	return err
}

// connect logs in (or uses the access token), opens the crypto store and
// makes sure the bot's device is cross-signed.
func (c *Channel) connect(ctx context.Context, st *state) (*mautrix.Client, *cryptohelper.CryptoHelper, error) {
	secret, err := c.secret(ctx)
	if err != nil {
		return nil, nil, err
	}
	token := ""
	if !c.cfg.Password {
		token = secret
	}
	cli, err := mautrix.NewClient(c.cfg.Homeserver, id.UserID(c.cfg.UserID), token)
	if err != nil {
		return nil, nil, fmt.Errorf("client: %w", err)
	}
	cli.Log = zerolog.Nop()
	cli.DefaultHTTPRetries = 4
	cli.DeviceID = id.DeviceID(c.cfg.DeviceID)
	if token != "" && cli.DeviceID == "" {
		who, err := cli.Whoami(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("whoami: %w", err)
		}
		cli.DeviceID = who.DeviceID
	}
	syncer := mautrix.NewDefaultSyncer()
	cli.Syncer = syncer
	pickle, err := c.pickleKey()
	if err != nil {
		return nil, nil, err
	}
	raw, err := openSQLite(filepath.Join(c.dir, "crypto.db"))
	if err != nil {
		return nil, nil, err
	}
	db, err := dbutil.NewWithDB(raw, "sqlite")
	if err != nil {
		raw.Close()
		return nil, nil, fmt.Errorf("crypto store: %w", err)
	}
	helper, err := cryptohelper.NewCryptoHelper(cli, pickle, db)
	if err != nil {
		raw.Close()
		return nil, nil, fmt.Errorf("crypto: %w", err)
	}
	if c.cfg.Password {
		helper.LoginAs = &mautrix.ReqLogin{Type: mautrix.AuthTypePassword,
			Identifier: mautrix.UserIdentifier{Type: mautrix.IdentifierTypeUser, User: c.cfg.UserID},
			Password:   secret, DeviceID: id.DeviceID(c.cfg.DeviceID), InitialDeviceDisplayName: "fluffy"}
	}
	if err := helper.Init(ctx); err != nil {
		helper.Close()
		return nil, nil, fmt.Errorf("crypto: %w", err)
	}
	cli.Crypto = helper
	if err := c.crossSign(ctx, helper.Machine(), secret); err != nil {
		// Not fatal: the bot works, its device shows as unverified.
		c.log.Warn("matrix: the bot's device is not cross-signed", "channel", c.name, "err", err)
	}
	// The person verifies the bot's device by emoji (SAS); the operator
	// confirms (verify.go).
	vh := verificationhelper.NewVerificationHelper(cli, helper.Machine(), nil, c.verify, false, false, true)
	cli.Syncer = gatedSyncer{DefaultSyncer: syncer, v: c.verify}
	err = vh.Init(ctx)
	cli.Syncer = syncer
	if err != nil {
		helper.Close()
		return nil, nil, fmt.Errorf("verification: %w", err)
	}
	c.verify.attach(vh, helper.Machine())
	syncer.OnEventType(event.EventMessage, c.onMessage)
	syncer.OnEventType(event.EventReaction, c.onReaction)
	syncer.OnEventType(event.EventRedaction, c.onRedaction)
	syncer.OnEventType(event.StateMember, c.onMember)
	helper.DecryptErrorCallback = func(evt *event.Event, err error) { c.undecryptable(ctx, st, evt, err) }
	helper.CustomPostDecrypt = func(ctx context.Context, evt *event.Event) { c.afterDecrypt(ctx, st, syncer, evt) }
	return cli, helper, nil
}

// pickleKey is the key the crypto store's olm state is encrypted with,
// made once and kept 0600 beside it.
func (c *Channel) pickleKey() ([]byte, error) {
	p := filepath.Join(c.dir, "pickle.key")
	b, err := os.ReadFile(p)
	if err == nil && len(b) == 32 {
		return b, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("pickle key: %w", err)
	}
	b = make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		return nil, fmt.Errorf("pickle key: %w", err)
	}
	return b, nil
}

// crossSign makes the bot's cross-signing keys once (uploading them needs
// the account's password) and signs its own device with them, so a
// person who verifies the bot's user verifies this device. The recovery
// key is written 0600 to recovery-key in the state directory.
func (c *Channel) crossSign(ctx context.Context, mach *crypto.OlmMachine, secret string) error {
	own, err := mach.GetOwnCrossSigningPublicKeys(ctx)
	if err != nil {
		return err
	}
	if own != nil {
		if t, err := mach.ResolveTrustContext(ctx, mach.OwnIdentity()); err == nil && trusted(t) {
			return nil // signed at an earlier start
		}
		// Keys exist but this device is not signed: restore the private
		// keys with the recovery key this channel wrote, if it did.
		rk, err := os.ReadFile(filepath.Join(c.dir, "recovery-key"))
		if err != nil {
			return errors.New("the account has cross-signing keys this device does not hold, and no recovery-key file")
		}
		return mach.VerifyWithRecoveryKey(ctx, strings.TrimSpace(string(rk)))
	}
	if !c.cfg.Password {
		return errors.New("making cross-signing keys needs the account's password (password: true)")
	}
	recovery, _, err := mach.GenerateAndUploadCrossSigningKeysWithPassword(ctx, secret, "")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.dir, "recovery-key"), []byte(recovery+"\n"), 0o600); err != nil {
		return fmt.Errorf("write the recovery key: %w", err)
	}
	if err := mach.SignOwnDevice(ctx, mach.OwnIdentity()); err != nil {
		return err
	}
	return mach.SignOwnMasterKey(ctx)
}

// syncLoop syncs with backoff. The token of a batch is saved only after
// every event in it was handled (handled events are remembered by id),
// or, for an encrypted event whose key has not come, recorded as pending
// in the same transaction; so a restart neither loses a message nor
// handles one twice.
func (c *Channel) syncLoop(ctx context.Context, cli *mautrix.Client, st *state, sink channel.Sink) error {
	filterID, err := st.get(ctx, "filter")
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if filterID == "" {
		f, err := cli.CreateFilter(ctx, cli.Syncer.GetFilterJSON(cli.UserID))
		if err != nil {
			return fmt.Errorf("create a sync filter: %w", err)
		}
		filterID = f.FilterID
		if err := st.put(ctx, "filter", filterID); err != nil {
			return fmt.Errorf("state: %w", err)
		}
	}
	if err := st.prune(ctx, c.now().Add(-handledFor).UnixNano()); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	since, err := st.get(ctx, "next_batch")
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if err := c.fetchPending(ctx, cli, st, since); err != nil {
		return err
	}
	wait, ready := time.Duration(0), false
	for {
		timeout := 30000
		if !ready {
			timeout = 0
		}
		resp, err := cli.FullSyncRequest(ctx, mautrix.ReqSync{Timeout: timeout, Since: since, FilterID: filterID})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			wait = nextWait(wait, err)
			if ready || wait == time.Second {
				sink.Ready(c.name, false, fmt.Errorf("matrix %s: sync: %w", c.name, err))
			}
			ready = false
			c.log.Warn("matrix: sync failed; retrying", "channel", c.name, "in", wait, "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
			continue
		}
		wait = 0
		c.mu.Lock()
		c.failed = nil
		c.mu.Unlock()
		if err := cli.Syncer.ProcessResponse(ctx, resp, since); err != nil {
			return fmt.Errorf("process a sync: %w", err)
		}
		c.mu.Lock()
		failed := c.failed
		c.mu.Unlock()
		if failed != nil {
			return fmt.Errorf("matrix %s: %w", c.name, failed)
		}
		pend, err := c.undecrypted(ctx, st, resp)
		if err != nil {
			return fmt.Errorf("matrix %s: %w", c.name, err)
		}
		if err := st.saveBatch(ctx, resp.NextBatch, pend, c.now().UnixNano()); err != nil {
			return fmt.Errorf("state: save the sync token: %w", err)
		}
		since = resp.NextBatch
		if !ready {
			ready = true
			sink.Ready(c.name, true, nil)
			c.log.Info("matrix: connected", "channel", c.name, "user", cli.UserID, "device", cli.DeviceID)
		}
	}
}

// nextWait is the wait before the next sync attempt: the homeserver's
// retry_after_ms on M_LIMIT_EXCEEDED, else doubling from 1s to 1m.
func nextWait(prev time.Duration, err error) time.Duration {
	if d, ok := retryAfter(err); ok {
		return d
	}
	return min(max(2*prev, time.Second), time.Minute)
}

// retryAfter reads M_LIMIT_EXCEEDED's retry_after_ms.
func retryAfter(err error) (time.Duration, bool) {
	var he mautrix.HTTPError
	if !errors.As(err, &he) || he.RespError == nil || he.RespError.ErrCode != mautrix.MLimitExceeded.ErrCode {
		return 0, false
	}
	d := 5 * time.Second
	if ms, ok := he.RespError.ExtraData["retry_after_ms"].(float64); ok && ms > 0 {
		d = time.Duration(ms) * time.Millisecond
	}
	return min(d, 10*time.Minute), true
}

// limited runs f, waiting out M_LIMIT_EXCEEDED answers (a few times).
func limited(ctx context.Context, f func() error) error {
	for i := 0; ; i++ {
		err := f()
		d, ok := retryAfter(err)
		if !ok || i == 5 {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
	}
}

// conn is the connected client and state, or an error when Run is not
// connected.
func (c *Channel) conn() (*mautrix.Client, *state, channel.Sink, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cli == nil {
		return nil, nil, nil, fmt.Errorf("matrix %s: not connected", c.name)
	}
	return c.cli, c.st, c.sink, nil
}

// batchFailed reports whether an event of the current batch failed:
// the events after it wait for the batch to be handled again, in order.
func (c *Channel) batchFailed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed != nil
}

// fail marks the current batch failed: its token is not saved. An
// event that was waiting for its key also stays pending (afterDecrypt).
func (c *Channel) fail(ctx context.Context, err error) {
	if f, ok := ctx.Value(eventFailureKey{}).(*eventFailure); ok && f.err == nil {
		f.err = err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed == nil {
		c.failed = err
	}
}

// splitRoom reads a conversation's Room: a room id, or a room id and a
// thread's root event joined by "/".
func splitRoom(room string) (id.RoomID, id.EventID) {
	r, t, _ := strings.Cut(room, "/$")
	if t != "" {
		t = "$" + t
	}
	return id.RoomID(r), id.EventID(t)
}

func joinRoom(room id.RoomID, thread id.EventID) string {
	if thread == "" {
		return string(room)
	}
	return string(room) + "/" + string(thread)
}

// isPrincipal reports whether user is configured as a principal.
func (c *Channel) isPrincipal(user id.UserID) bool { return c.principals[user] }

func (c *Channel) principalList() []id.UserID {
	out := make([]id.UserID, 0, len(c.principals))
	for p := range c.principals {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}
