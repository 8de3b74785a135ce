package secret

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

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
