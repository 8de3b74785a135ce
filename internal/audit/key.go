package audit

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// Key files under the data directory's keys/.
const (
	KeyFile        = "audit.key"        // the signer key, mode 0600
	PubFile        = "audit.pub"        // the verifier string
	CheckpointFile = "audit.checkpoint" // the newest signed checkpoint, kept outside audit.db
)

// ErrKeyPermissions is returned when the signing key is readable by
// anyone but its owner.
var ErrKeyPermissions = errors.New("audit signing key has unsafe permissions")

// Key is the checkpoint signing key.
type Key struct {
	Signer note.Signer
	// Verifier is the note verifier string (name+hash+base64 key), what
	// `fluffy audit key` prints and `--key` accepts.
	Verifier string
}

// Name is the key's name, which is also the log's origin line.
func (k Key) Name() string { return k.Signer.Name() }

// LoadOrCreateKey reads the signing key in dir (keys/), creating a new
// Ed25519 key named "fluffy.audit/<16 hex digits>" when there is none. The
// key file must be a regular file of mode 0600 owned by this user: a wider
// mode is an error, not silently fixed, since the key may have leaked.
func LoadOrCreateKey(dir string) (Key, error) {
	path := filepath.Join(dir, KeyFile)
	k, err := LoadKey(dir)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Key{}, fmt.Errorf("audit: create %s: %w", dir, err)
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return Key{}, fmt.Errorf("audit: %w", err)
	}
	skey, vkey, err := note.GenerateKey(rand.Reader, "fluffy.audit/"+hex.EncodeToString(id[:]))
	if err != nil {
		return Key{}, fmt.Errorf("audit: generate key: %w", err)
	}
	// O_EXCL: two processes racing to create the key must not overwrite
	// each other's; the loser reads the winner's.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return LoadKey(dir)
	}
	if err != nil {
		return Key{}, fmt.Errorf("audit: create key: %w", err)
	}
	if _, err := f.WriteString(skey + "\n"); err != nil {
		f.Close()
		return Key{}, fmt.Errorf("audit: write key: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return Key{}, fmt.Errorf("audit: write key: %w", err)
	}
	if err := f.Close(); err != nil {
		return Key{}, fmt.Errorf("audit: write key: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, PubFile), []byte(vkey+"\n"), 0o644); err != nil {
		return Key{}, err
	}
	return LoadKey(dir)
}

// LoadKey reads the signing key in dir.
func LoadKey(dir string) (Key, error) {
	path := filepath.Join(dir, KeyFile)
	fi, err := os.Lstat(path)
	if err != nil {
		return Key{}, fmt.Errorf("audit: signing key: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return Key{}, fmt.Errorf("audit: signing key %s is not a regular file", path)
	}
	if fi.Mode().Perm() != 0o600 {
		return Key{}, fmt.Errorf("%w: %s has mode %04o, must be 0600 (if others could read it, make a new key: move it away and restart)", ErrKeyPermissions, path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Key{}, fmt.Errorf("audit: signing key: %w", err)
	}
	signer, err := note.NewSigner(strings.TrimSpace(string(b)))
	if err != nil {
		return Key{}, fmt.Errorf("audit: signing key %s: %w", path, err)
	}
	vkey, err := verifierString(strings.TrimSpace(string(b)))
	if err != nil {
		return Key{}, fmt.Errorf("audit: signing key %s: %w", path, err)
	}
	return Key{Signer: signer, Verifier: vkey}, nil
}

// verifierString derives the verifier string from a signer key string:
// "PRIVATE+KEY+name+hash+base64(alg||priv)". The Ed25519 public key is
// derived from the seed.
func verifierString(skey string) (string, error) {
	rest, ok := strings.CutPrefix(skey, "PRIVATE+KEY+")
	if !ok {
		return "", errors.New("not a signer key")
	}
	name, rest, _ := strings.Cut(rest, "+")
	_, b64, _ := strings.Cut(rest, "+")
	priv, err := decodeB64(b64)
	if err != nil || len(priv) != 33 || priv[0] != 1 {
		return "", errors.New("malformed Ed25519 signer key")
	}
	return note.NewEd25519VerifierKey(name, ed25519Public(priv[1:]))
}

// writeFileAtomic writes a file through a temporary file, fsync and rename.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("audit: write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("audit: write %s: %w", path, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("audit: write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("audit: write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("audit: write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("audit: write %s: %w", path, err)
	}
	return nil
}

func decodeB64(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }

func ed25519Public(seed []byte) ed25519.PublicKey {
	return ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
}
