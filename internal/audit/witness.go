package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"syscall"
)

// The checkpoint copy kept outside the database (keys/audit.checkpoint),
// the witness that reveals a truncated, rolled-back or replaced audit.db.
//
// It is rewritten after every write transaction, in place: two fixed
// slots of witnessSlot bytes, written alternately, each one
//
//	fluffy-audit-checkpoint-v1 <length of note> <hex SHA-256 of note>\n
//	<signed checkpoint note>
//	NUL bytes up to witnessSlot
//
// A write replaces the slot not holding the newest checkpoint, so a write
// torn by a crash damages only that slot (its digest no longer matches)
// and the other still holds the previous checkpoint. Readers take every
// intact slot; the newest counts.
//
// Ordering instead of fsync: a slot is written only after the database
// commit it describes returned, which is after SQLite's fsync of the
// WAL. So the witness never describes more than the database holds on
// disk, whatever the crash: it cannot raise a false alarm. It is not
// fsynced on the write path (that would be a second sequential fsync per
// commit); the kernel writes it back within seconds, and the next Open
// makes it durable (fdatasync, in the background while that process
// opens the database). A power failure in that window leaves it
// one or more commits behind the database, which weakens the truncation
// check for those last entries and loses nothing.
//
// An older fluffy wrote the file as one bare note; it reads as slot 0
// (legacy), and the first write goes to slot 1, so the file migrates in
// place without a moment with no valid checkpoint.

const (
	witnessSlot  = 4096
	witnessMagic = "fluffy-audit-checkpoint-v1 "
)

// ErrWitnessCorrupt is wrapped when the checkpoint file kept outside the
// database holds no intact checkpoint at all (both slots damaged): it was
// tampered with or the disk failed, so the truncation check it provides
// is gone.
var ErrWitnessCorrupt = errors.New("checkpoint file has no intact slot")

// encodeWitnessSlot returns the slot holding note.
func encodeWitnessSlot(note []byte) ([]byte, error) {
	sum := sha256.Sum256(note)
	b := make([]byte, 0, witnessSlot)
	b = append(b, witnessMagic...)
	b = strconv.AppendInt(b, int64(len(note)), 10)
	b = append(b, ' ')
	b = hex.AppendEncode(b, sum[:])
	b = append(b, '\n')
	b = append(b, note...)
	if len(b) > witnessSlot || len(note) == 0 || bytes.IndexByte(note, 0) >= 0 {
		return nil, fmt.Errorf("audit: checkpoint note of %d bytes does not fit a %d-byte slot", len(note), witnessSlot)
	}
	return b[:witnessSlot], nil
}

// slotNote is the note of an intact slot.
type slotNote struct {
	slot int
	note []byte
}

// witnessSlots splits the content of a checkpoint file into the notes of
// its intact slots (in slot order; empty slots are skipped) and counts
// the damaged ones. A file that does not start with a slot header holds
// the older format in slot 0: one bare note, returned as it is (its
// signature decides).
func witnessSlots(b []byte) (notes []slotNote, damaged int) {
	for i := 0; i < len(b); i += witnessSlot {
		s := b[i:min(i+witnessSlot, len(b))]
		if len(bytes.Trim(s, "\x00")) == 0 {
			continue // never written (or a hole)
		}
		slot := i / witnessSlot
		if slot >= 2 {
			damaged++
			continue
		}
		if note, ok := parseWitnessSlot(s); ok {
			notes = append(notes, slotNote{slot, note})
			continue
		}
		if slot == 0 && !bytes.HasPrefix(s, []byte(witnessMagic)) {
			// The older format: a bare note (then NULs if slot 1 was
			// written since).
			note, pad, _ := bytes.Cut(s, []byte{0})
			if len(bytes.Trim(pad, "\x00")) == 0 {
				notes = append(notes, slotNote{0, note})
				continue
			}
		}
		damaged++
	}
	return notes, damaged
}

// parseWitnessSlot returns the note in an intact slot.
func parseWitnessSlot(s []byte) ([]byte, bool) {
	rest, ok := bytes.CutPrefix(s, []byte(witnessMagic))
	if !ok {
		return nil, false
	}
	head, body, ok := bytes.Cut(rest, []byte{'\n'})
	if !ok {
		return nil, false
	}
	ln, sum, ok := bytes.Cut(head, []byte{' '})
	n, err := strconv.Atoi(string(ln))
	if !ok || err != nil || n < 0 || n > len(body) || strconv.Itoa(n) != string(ln) || len(sum) != 2*sha256.Size {
		return nil, false
	}
	note := body[:n]
	want := sha256.Sum256(note)
	if hex.EncodeToString(want[:]) != string(sum) || len(bytes.Trim(body[n:], "\x00")) != 0 {
		return nil, false
	}
	return note, true
}

// parseWitness returns the newest checkpoint of a checkpoint file (either
// format) that verifies with vkey. A slot whose digest does not match is
// a torn write and skipped; an intact slot that does not verify is an
// error (ErrBadCheckpoint), as is a file with no intact slot.
func parseWitness(b []byte, vkey string) (Checkpoint, error) {
	notes, damaged := witnessSlots(b)
	if len(notes) == 0 {
		if damaged > 0 {
			return Checkpoint{}, fmt.Errorf("%w: %w: %d damaged slots", ErrBadCheckpoint, ErrWitnessCorrupt, damaged)
		}
		return Checkpoint{}, fmt.Errorf("%w: empty checkpoint file", ErrBadCheckpoint)
	}
	var newest Checkpoint
	for i, n := range notes {
		cp, err := ParseCheckpoint(n.note, vkey)
		if err != nil {
			return Checkpoint{}, err
		}
		if i == 0 || cp.Size > newest.Size {
			newest = cp
		}
	}
	return newest, nil
}

// isWitnessFile reports whether b is a checkpoint file in slot format (as
// opposed to one bare note).
func isWitnessFile(b []byte) bool {
	return bytes.HasPrefix(b, []byte(witnessMagic)) || len(b) > witnessSlot || bytes.IndexByte(b, 0) >= 0
}

// witness writes the checkpoint file. Its methods are called with the
// log's wmu held, so writes never overlap.
type witness struct {
	path string
	f    *os.File // nil until the first write when there was no file
	next int      // the slot the next write replaces

	synced chan error // the background fdatasync started by openWitness
	once   sync.Once
}

// openWitness opens the checkpoint file in keyDir (created by the first
// write when there is none), reads it and returns it with the notes of
// its intact slots and the number of damaged slots. It starts making what
// a previous process wrote durable in the background.
func openWitness(keyDir string) (*witness, []slotNote, int, error) {
	path := keyDir + "/" + CheckpointFile
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		w := &witness{path: path, synced: make(chan error, 1)}
		w.synced <- nil
		return w, nil, 0, nil
	}
	if err != nil {
		return nil, nil, 0, fmt.Errorf("audit: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(f, 4*witnessSlot))
	if err != nil {
		f.Close()
		return nil, nil, 0, fmt.Errorf("audit: read %s: %w", path, err)
	}
	notes, damaged := witnessSlots(b)
	w := &witness{path: path, f: f, synced: make(chan error, 1)}
	// The next write replaces the slot that does not hold the newest
	// intact checkpoint (sizes compared unverified: the caller verifies).
	var newest uint64
	for i, n := range notes {
		if size, ok := noteSize(n.note); ok && (i == 0 || size > newest) {
			newest, w.next = size, 1-n.slot
		}
	}
	go func() { w.synced <- syscall.Fdatasync(int(f.Fd())) }()
	return w, notes, damaged, nil
}

// noteSize reads the tree size line of an unverified checkpoint note.
func noteSize(note []byte) (uint64, bool) {
	_, rest, _ := bytes.Cut(note, []byte{'\n'})
	line, _, _ := bytes.Cut(rest, []byte{'\n'})
	n, err := strconv.ParseUint(string(line), 10, 64)
	return n, err == nil
}

// write replaces the older slot with note. It does not fsync (see above).
func (w *witness) write(note []byte) error {
	slot, err := encodeWitnessSlot(note)
	if err != nil {
		return err
	}
	if w.f == nil {
		if w.f, err = os.OpenFile(w.path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600); err != nil {
			return fmt.Errorf("audit: %w", err)
		}
	}
	if _, err := w.f.WriteAt(slot, int64(w.next*witnessSlot)); err != nil {
		return fmt.Errorf("audit: write %s: %w", w.path, err)
	}
	w.next = 1 - w.next
	return nil
}

// close waits for the background sync and closes the file.
func (w *witness) close() error {
	var err error
	w.once.Do(func() {
		err = <-w.synced
		if w.f == nil {
			return
		}
		if cerr := w.f.Close(); err == nil {
			err = cerr
		}
	})
	return err
}
