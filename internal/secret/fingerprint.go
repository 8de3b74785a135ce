package secret

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// KeySize is the fingerprint key's length.
const KeySize = 32

// Fingerprint is the keyed fingerprint the audit log records for a value:
// HMAC-SHA256 under the data directory's key, 16 bytes in hex. Two uses of
// one value share it; without the key it tells nothing of the value (a
// plain hash of a short token could be brute-forced).
func Fingerprint(key, v []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(v)
	sum := m.Sum(nil)
	// The hash keeps the value's last partial block in a buffer of its
	// own; a full block of zeros written after the sum overwrites it.
	m.Write(make([]byte, sha256.BlockSize))
	return "hmac-sha256:" + hex.EncodeToString(sum[:16])
}

// LoadKey reads the fingerprint key at path, creating it (mode 0600,
// KeySize random bytes) when it does not exist.
func LoadKey(path string) ([]byte, error) {
	k, err := readKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	k = make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("secret: fingerprint key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return readKey(path) // another process made it first
	}
	if err != nil {
		return nil, fmt.Errorf("secret: fingerprint key: %w", err)
	}
	if _, err := f.Write(k); err != nil {
		f.Close()
		return nil, fmt.Errorf("secret: fingerprint key: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("secret: fingerprint key: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("secret: fingerprint key: %w", err)
	}
	return k, nil
}

func readKey(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("secret: fingerprint key: %w", err)
	}
	defer f.Close()
	k := make([]byte, KeySize)
	if _, err := io.ReadFull(f, k); err != nil {
		return nil, fmt.Errorf("secret: fingerprint key %s: %w", path, err)
	}
	return k, nil
}
