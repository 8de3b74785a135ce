package webhook

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Errors of the nonce store.
var (
	// ErrReplay: a key of the delivery is remembered (or being
	// delivered right now).
	ErrReplay = errors.New("webhook: delivery seen before")
	// ErrNonceStoreFull: remembering the delivery would pass the store's
	// bound; it is refused rather than forgetting a key still inside its
	// retention (which would reopen a replay).
	ErrNonceStoreFull = errors.New("webhook: nonce store full")
	// ErrCorruptNonceStore: the store's file has a line that is not a
	// record. The channel does not start: starting empty would forget
	// every delivery it must still refuse.
	ErrCorruptNonceStore = errors.New("webhook: nonce store file corrupt")
)

// nonceFile is the store's file in the hook's state directory.
const nonceFile = "nonces"

// nonceKey is the SHA-256 of a namespaced key ("d:" delivery id, "m:"
// MAC), so records have one fixed size and no sender's byte reaches the
// file.
type nonceKey [sha256.Size]byte

func keyOf(kind, v string) nonceKey { return sha256.Sum256([]byte(kind + ":" + v)) }

// nonceStore remembers the keys of accepted deliveries until each
// expires, in memory and in an append-only file (fsynced before the
// delivery goes on), so a restart does not reopen a replay.
//
// File format, one record a line: "+ <expiry unix seconds> <hex key>"
// adds a key, "- <hex key>" removes one (a delivery the sink did not
// take, which its sender may retry). A last line without its newline is
// an append cut short by a crash before its fsync returned, so before the
// delivery was taken: it is dropped. Any other line that is not a record
// makes the file corrupt (ErrCorruptNonceStore).
type nonceStore struct {
	path string
	max  int

	mu sync.Mutex // guards the fields below
	// keys maps each remembered key to its expiry (unix seconds);
	// pending ones belong to a delivery still being handed to the sink.
	keys    map[nonceKey]int64
	pending map[nonceKey]bool
	f       *os.File // append-only, flocked
	records int      // lines in the file, for compaction
	// nextPrune is when expired keys are next dropped from memory (unix
	// seconds): a pass over every key, so not at every delivery.
	nextPrune int64
}

// pruneEvery spaces the passes that drop expired keys, in seconds.
const pruneEvery = 60

// openNonceStore opens (creating) the store in dir, drops expired keys
// and rewrites the file with the live ones. The file is flocked: a
// second daemon on the same state directory fails here.
func openNonceStore(dir string, maxKeys int, now time.Time) (*nonceStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("webhook: state directory: %w", err)
	}
	s := &nonceStore{path: filepath.Join(dir, nonceFile), max: maxKeys, keys: map[nonceKey]int64{}, pending: map[nonceKey]bool{}}
	f, err := os.OpenFile(s.path, os.O_RDWR|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("webhook: nonce store: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("webhook: nonce store %s is in use by another process: %w", s.path, err)
	}
	if err := s.load(f, now.Unix()); err != nil {
		f.Close()
		return nil, err
	}
	s.f = f
	if err := s.compact(); err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

func (s *nonceStore) load(f *os.File, now int64) error {
	r := bufio.NewReader(f)
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return nil // a torn last line (no newline) is dropped
		}
		if err != nil {
			return fmt.Errorf("webhook: nonce store %s: %w", s.path, err)
		}
		if err := s.apply(line[:len(line)-1], now); err != nil {
			return fmt.Errorf("%w: %s line %d: %v (remove the file to start empty: deliveries it remembers could then be replayed)", ErrCorruptNonceStore, s.path, n, err)
		}
	}
}

func (s *nonceStore) apply(line []byte, now int64) error {
	f := bytes.Fields(line)
	var k nonceKey
	switch {
	case len(f) == 3 && string(f[0]) == "+":
		exp, err := strconv.ParseInt(string(f[1]), 10, 64)
		if err != nil {
			return errors.New("bad expiry")
		}
		if err := decodeKey(&k, f[2]); err != nil {
			return err
		}
		if exp > now {
			s.keys[k] = exp
		}
	case len(f) == 2 && string(f[0]) == "-":
		if err := decodeKey(&k, f[1]); err != nil {
			return err
		}
		delete(s.keys, k)
	default:
		return errors.New("not a record")
	}
	return nil
}

func decodeKey(k *nonceKey, b []byte) error {
	if hex.DecodedLen(len(b)) != len(k) {
		return errors.New("bad key length")
	}
	if _, err := hex.Decode(k[:], b); err != nil {
		return errors.New("bad key")
	}
	return nil
}

// reserve remembers keys until exp, durably, unless one of them is
// remembered already (ErrReplay). The keys stay pending until commit or
// release: a concurrent delivery with any of them is a replay meanwhile.
func (s *nonceStore) reserve(keys []nonceKey, exp, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		if e, ok := s.keys[k]; ok && (e > now.Unix() || s.pending[k]) {
			return ErrReplay
		}
	}
	if len(s.keys)+len(keys) > s.max {
		s.prune(now.Unix())
		if len(s.keys)+len(keys) > s.max {
			return fmt.Errorf("%w: %d keys", ErrNonceStoreFull, len(s.keys))
		}
	}
	var b bytes.Buffer
	for _, k := range keys {
		fmt.Fprintf(&b, "+ %d %x\n", exp.Unix(), k[:])
	}
	if err := s.write(b.Bytes()); err != nil {
		return err
	}
	for _, k := range keys {
		s.keys[k] = exp.Unix()
		s.pending[k] = true
	}
	s.records += len(keys)
	return nil
}

// commit ends the keys' pending state: the sink took the delivery.
func (s *nonceStore) commit(keys []nonceKey, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		delete(s.pending, k)
	}
	s.maybeCompact(now.Unix())
}

// release forgets the keys of a delivery the sink did not take, so its
// sender's retry is not a replay. If the removal cannot be written the
// keys stay remembered after a restart: a retry is then refused, which is
// the safe side.
func (s *nonceStore) release(keys []nonceKey) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b bytes.Buffer
	for _, k := range keys {
		delete(s.keys, k)
		delete(s.pending, k)
		fmt.Fprintf(&b, "- %x\n", k[:])
	}
	s.records += len(keys)
	return s.write(b.Bytes())
}

func (s *nonceStore) write(b []byte) error {
	if s.f == nil {
		return errors.New("webhook: nonce store closed")
	}
	if _, err := s.f.Write(b); err != nil {
		return fmt.Errorf("webhook: nonce store: %w", err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("webhook: nonce store: %w", err)
	}
	return nil
}

// prune drops expired keys (not pending ones) from memory; the file
// keeps them until the next compaction.
func (s *nonceStore) prune(now int64) {
	for k, e := range s.keys {
		if e <= now && !s.pending[k] {
			delete(s.keys, k)
		}
	}
}

// maybeCompact drops expired keys (at most every pruneEvery) and
// rewrites the file when it holds many more records than live keys,
// which bounds it to about twice the store's bound.
func (s *nonceStore) maybeCompact(now int64) {
	if now >= s.nextPrune {
		s.prune(now)
		s.nextPrune = now + pruneEvery
	}
	if s.records <= 2*len(s.keys)+1024 {
		return
	}
	// A failed compaction leaves the old file, still correct, in place;
	// the next one tries again.
	_ = s.compact()
}

// compact writes the live keys to a new file, fsyncs it and renames it
// over the old one, then appends to the new one.
func (s *nonceStore) compact() error {
	tmp := s.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("webhook: nonce store: %w", err)
	}
	w := bufio.NewWriter(f)
	for k, e := range s.keys {
		fmt.Fprintf(w, "+ %d %x\n", e, k[:])
	}
	err = w.Flush()
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		// The lock moves to the new file before it replaces the old one,
		// so there is no moment without one.
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	if err == nil {
		err = os.Rename(tmp, s.path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(s.path))
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("webhook: nonce store: %w", err)
	}
	s.f.Close()
	s.f = f
	s.records = len(s.keys)
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// close releases the file and its lock.
func (s *nonceStore) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}
