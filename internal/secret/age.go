package secret

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"filippo.io/age"
)

// maxAgeStore bounds the encrypted store: names and tokens, not files.
const maxAgeStore = 1 << 20

// Age resolves secret://age/NAME from an age-encrypted file of named
// values. The store is decrypted with an X25519 identity file, or with a
// passphrase (scrypt) asked for when first needed and kept in locked
// memory until Lock. Plaintext layout, one entry a line: NAME, a space,
// the value in standard base64. Names are letters, digits, '.', '_', '-'.
//
// age's reader decrypts through a chunk buffer of its own that fluffy
// cannot zero; the value's copies fluffy makes are zeroed (docs/secrets.md).
type Age struct {
	// Store is the encrypted file; must be set.
	Store string
	// Identity is an age identity file (age-keygen's output); "" means
	// the store is passphrase-encrypted.
	Identity string
	// Passphrase asks for the store's passphrase (a terminal prompt, a
	// file descriptor, a systemd credential); nil leaves a passphrase
	// store locked. The backend zeroes what it returns on Lock.
	Passphrase func(ctx context.Context) ([]byte, error)

	// mu guards pass.
	mu   sync.Mutex
	pass *locked
}

var (
	_ Backend = (*Age)(nil)
	_ Stater  = (*Age)(nil)
	_ Locker  = (*Age)(nil)
)

// ErrAgeName: a name the store cannot hold.
var ErrAgeName = errors.New("secret: age entry names are letters, digits, '.', '_' and '-'")

func ageName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// identities returns what decrypts the store, asking for the passphrase
// when there is no identity file and none is held.
func (a *Age) identities(ctx context.Context, ask bool) ([]age.Identity, []age.Recipient, error) {
	if a.Identity != "" {
		f, err := os.Open(a.Identity)
		if err != nil {
			return nil, nil, errorf(ErrUnreachable, "age identity: %w", err)
		}
		defer f.Close()
		ids, err := age.ParseIdentities(f)
		if err != nil {
			return nil, nil, errorf(ErrUnreachable, "age identity %s: %w", a.Identity, err)
		}
		var rs []age.Recipient
		for _, id := range ids {
			if x, ok := id.(*age.X25519Identity); ok {
				rs = append(rs, x.Recipient())
			}
		}
		return ids, rs, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pass == nil {
		if !ask || a.Passphrase == nil {
			return nil, nil, errorf(ErrLocked, "the age store %s needs its passphrase", a.Store)
		}
		p, err := a.Passphrase(ctx)
		if err != nil {
			return nil, nil, errorf(ErrLocked, "age passphrase: %w", err)
		}
		l, err := newLocked(p)
		wipe(p)
		if err != nil {
			return nil, nil, err
		}
		a.pass = l
	}
	id, err := age.NewScryptIdentity(string(a.pass.b))
	if err != nil {
		return nil, nil, errorf(ErrLocked, "%w", err)
	}
	r, err := age.NewScryptRecipient(string(a.pass.b))
	if err != nil {
		return nil, nil, errorf(ErrLocked, "%w", err)
	}
	return []age.Identity{id}, []age.Recipient{r}, nil
}

// read decrypts the store into one buffer the caller zeroes; a store
// that does not exist is empty.
func (a *Age) read(ctx context.Context) ([]byte, []age.Recipient, error) {
	ids, rs, err := a.identities(ctx, true)
	if err != nil {
		return nil, nil, err
	}
	ct, err := os.ReadFile(a.Store)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, rs, nil
	}
	if err != nil {
		return nil, nil, errorf(ErrUnreachable, "%w", err)
	}
	if len(ct) > maxAgeStore {
		return nil, nil, errorf(ErrUnreachable, "%s is larger than %d bytes", a.Store, maxAgeStore)
	}
	r, err := age.Decrypt(bytes.NewReader(ct), ids...)
	if err != nil {
		if a.Identity == "" {
			_ = a.Lock(ctx) // a wrong passphrase is not kept
			return nil, nil, errorf(ErrLocked, "decrypting %s: %w", a.Store, err)
		}
		return nil, nil, errorf(ErrUnreachable, "decrypting %s: %w", a.Store, err)
	}
	// The plaintext is shorter than the ciphertext: one buffer, no
	// growth, so no copy is left behind.
	buf := make([]byte, len(ct))
	n, err := io.ReadFull(r, buf)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		wipe(buf)
		return nil, nil, errorf(ErrUnreachable, "decrypting %s: %w", a.Store, err)
	}
	return buf[:n], rs, nil
}

// find returns the decoded value of name in plain, in a new slice.
func find(plain []byte, name string) ([]byte, bool) {
	for line := range bytes.SplitSeq(plain, []byte("\n")) {
		n, v, ok := bytes.Cut(line, []byte(" "))
		if !ok || string(n) != name {
			continue
		}
		out := make([]byte, base64.StdEncoding.DecodedLen(len(v)))
		m, err := base64.StdEncoding.Decode(out, v)
		if err != nil {
			wipe(out)
			return nil, false
		}
		return out[:m], true
	}
	return nil, false
}

// Lookup returns the entry name.
func (a *Age) Lookup(ctx context.Context, name string) ([]byte, error) {
	plain, _, err := a.read(ctx)
	if err != nil {
		return nil, err
	}
	defer wipe(plain)
	v, ok := find(plain, name)
	if !ok {
		return nil, errorf(ErrNotFound, "no entry %q in %s", name, a.Store)
	}
	return v, nil
}

// Names lists the store's entry names.
func (a *Age) Names(ctx context.Context) ([]string, error) {
	plain, _, err := a.read(ctx)
	if err != nil {
		return nil, err
	}
	defer wipe(plain)
	var names []string
	for line := range bytes.SplitSeq(plain, []byte("\n")) {
		if n, _, ok := bytes.Cut(line, []byte(" ")); ok {
			names = append(names, string(n))
		}
	}
	slices.Sort(names)
	return names, nil
}

// Set stores value under name (replacing an entry of that name; a nil
// value deletes it) and writes the store again, encrypted to the same
// identity or passphrase, atomically with mode 0600.
func (a *Age) Set(ctx context.Context, name string, value []byte) error {
	if !ageName(name) {
		return fmt.Errorf("%w: %q", ErrAgeName, name)
	}
	plain, rs, err := a.read(ctx)
	if err != nil {
		return err
	}
	defer wipe(plain)
	if len(rs) == 0 {
		return errorf(ErrUnreachable, "the age identity %s has no X25519 key to encrypt to", a.Identity)
	}
	var out bytes.Buffer
	out.Grow(len(plain) + base64.StdEncoding.EncodedLen(len(value)) + len(name) + 2)
	defer func() { wipe(out.Bytes()[:out.Cap()]) }()
	for line := range bytes.SplitSeq(plain, []byte("\n")) {
		if n, _, ok := bytes.Cut(line, []byte(" ")); ok && string(n) != name {
			out.Write(line)
			out.WriteByte('\n')
		}
	}
	if value != nil {
		out.WriteString(name)
		out.WriteByte(' ')
		enc := make([]byte, base64.StdEncoding.EncodedLen(len(value)))
		base64.StdEncoding.Encode(enc, value)
		out.Write(enc)
		wipe(enc)
		out.WriteByte('\n')
	}
	return a.write(out.Bytes(), rs)
}

func (a *Age) write(plain []byte, rs []age.Recipient) error {
	dir := filepath.Dir(a.Store)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("secret: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".store-*.age")
	if err != nil {
		return fmt.Errorf("secret: %w", err)
	}
	defer os.Remove(tmp.Name())
	bw := bufio.NewWriter(tmp)
	w, err := age.Encrypt(bw, rs...)
	if err == nil {
		_, err = w.Write(plain)
	}
	if err == nil {
		err = w.Close()
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("secret: writing %s: %w", a.Store, err)
	}
	if err := os.Rename(tmp.Name(), a.Store); err != nil {
		return fmt.Errorf("secret: %w", err)
	}
	return nil
}

// State: unlocked with an identity file or a held passphrase, locked
// while the passphrase is not given, unreachable when the identity file
// cannot be read.
func (a *Age) State(ctx context.Context) (State, string) {
	if a.Identity != "" {
		if _, _, err := a.identities(ctx, false); err != nil {
			return Unreachable, "the identity file cannot be read"
		}
		return Unlocked, "identity file " + a.Identity
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pass == nil {
		return Locked, "passphrase not given yet"
	}
	return Unlocked, "passphrase held in memory"
}

// Lock forgets a held passphrase.
func (a *Age) Lock(context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	err := a.pass.free()
	a.pass = nil
	return err
}
