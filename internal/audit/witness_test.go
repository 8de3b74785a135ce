package audit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// witnessFile reads the checkpoint file of a log.
func witnessFile(t *testing.T, opts Options) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(opts.KeyDir, CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeWitnessFile(t *testing.T, opts Options, b []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(opts.KeyDir, CheckpointFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// slotSizes returns the tree sizes in the intact slots of b, by slot.
func slotSizes(b []byte) map[int]uint64 {
	notes, _ := witnessSlots(b)
	m := map[int]uint64{}
	for _, n := range notes {
		m[n.slot], _ = noteSize(n.note)
	}
	return m
}

// TestWitnessSlots checks that every commit rewrites the older slot, so
// the file always holds the newest checkpoint and the one before it.
func TestWitnessSlots(t *testing.T) {
	l, opts := testLog(t, Options{})
	k := l.Key()
	for i := 1; i <= 4; i++ {
		appendN(t, l, 1, KindGatePolicy) // synchronous: one commit each
		b := witnessFile(t, opts)
		if len(b) != witnessSlot*min(i, 2) {
			t.Fatalf("after %d commits the file has %d bytes", i, len(b))
		}
		got := slotSizes(b)
		if got[(i-1)%2] != uint64(i) || i > 1 && got[i%2] != uint64(i-1) {
			t.Fatalf("after commit %d: slots %v", i, got)
		}
		cp, err := ParseCheckpoint(b, k.Verifier)
		if err != nil || cp.Size != uint64(i) {
			t.Fatalf("ParseCheckpoint of the file: %+v, %v", cp, err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := verifyDB(t, opts, true); err != nil {
		t.Fatal(err)
	}
}

// TestWitnessDamage covers what a crash or an edit can leave in the
// checkpoint file: a torn slot (the other one is used, and it is the one
// the next write replaces), both slots damaged (Open refuses, Verify
// reports it), a forged slot (Verify reports it), and the file of an
// older fluffy (one bare note: read, then migrated in place).
func TestWitnessDamage(t *testing.T) {
	setup := func(t *testing.T) (Options, Key, []byte) {
		// A periodic checkpoint at every commit, so a truncated log
		// still has signed checkpoints for what remains.
		l, opts := testLog(t, Options{CheckpointEvery: 1})
		appendN(t, l, 3, KindGatePolicy)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		return opts, l.Key(), witnessFile(t, opts)
	}
	newestSlot := func(b []byte) int {
		s := slotSizes(b)
		if s[0] > s[1] {
			return 0
		}
		return 1
	}

	t.Run("torn newest slot", func(t *testing.T) {
		opts, k, b := setup(t)
		// A crash in the middle of writing the newest slot: its second
		// half still holds older bytes.
		n := newestSlot(b)
		torn := bytes.Clone(b)
		copy(torn[n*witnessSlot+witnessSlot/2:(n+1)*witnessSlot], bytes.Repeat([]byte{'x'}, witnessSlot/2))
		copy(torn[n*witnessSlot+60:], "garbage")
		writeWitnessFile(t, opts, torn)
		notes, damaged := witnessSlots(torn)
		if len(notes) != 1 || damaged != 1 || notes[0].slot != 1-n {
			t.Fatalf("torn slot %d: notes %v, damaged %d", n, notes, damaged)
		}
		// The other slot (one commit older) still checks the log.
		if rep, err := verifyDB(t, opts, true); err != nil || rep.Size != 3 {
			t.Fatalf("verify with a torn slot: %+v, %v", rep, err)
		}
		l, err := Open(t.Context(), opts)
		if err != nil {
			t.Fatalf("Open with a torn slot: %v", err)
		}
		appendN(t, l, 1, KindGatePolicy)
		// The write replaced the torn slot, not the intact one.
		got := slotSizes(witnessFile(t, opts))
		if len(got) != 2 || got[n] != 4 || got[1-n] != 2 {
			t.Fatalf("after a write: slots %v, want slot %d rewritten", got, n)
		}
		l.Close()
		if cp, err := ParseCheckpoint(witnessFile(t, opts), k.Verifier); err != nil || cp.Size != 4 {
			t.Fatalf("ParseCheckpoint: %+v, %v", cp, err)
		}
	})

	t.Run("both slots damaged", func(t *testing.T) {
		opts, k, b := setup(t)
		bad := bytes.Clone(b)
		bad[len(witnessMagic)+10] ^= 1
		bad[witnessSlot+len(witnessMagic)+200] ^= 1
		writeWitnessFile(t, opts, bad)
		_, err := Open(t.Context(), opts)
		if !errors.Is(err, ErrWitnessCorrupt) {
			t.Fatalf("Open with both slots damaged: %v, want ErrWitnessCorrupt", err)
		}
		_, err = verifyDB(t, opts, true)
		var de *DamageError
		if !errors.As(err, &de) || de.Damage != DamageCheckpoint {
			t.Fatalf("verify with both slots damaged: %v", err)
		}
		if _, err := ParseCheckpoint(bad, k.Verifier); !errors.Is(err, ErrWitnessCorrupt) {
			t.Fatalf("ParseCheckpoint: %v", err)
		}
	})

	t.Run("forged slot", func(t *testing.T) {
		opts, k, b := setup(t)
		// An intact slot (digest recomputed) whose note was edited: the
		// signature catches it.
		n := newestSlot(b)
		notes, _ := witnessSlots(b)
		var note []byte
		for _, x := range notes {
			if x.slot == n {
				note = bytes.Replace(x.note, []byte("\n3\n"), []byte("\n2\n"), 1)
			}
		}
		slot, err := encodeWitnessSlot(note)
		if err != nil {
			t.Fatal(err)
		}
		forged := bytes.Clone(b)
		copy(forged[n*witnessSlot:], slot)
		writeWitnessFile(t, opts, forged)
		_, err = verifyDB(t, opts, true)
		var de *DamageError
		if !errors.As(err, &de) || de.Damage != DamageForeign {
			t.Fatalf("verify with a forged slot: %v", err)
		}
		if _, err := ParseCheckpoint(forged, k.Verifier); !errors.Is(err, ErrBadCheckpoint) {
			t.Fatalf("ParseCheckpoint: %v", err)
		}
	})

	t.Run("truncated database", func(t *testing.T) {
		opts, _, _ := setup(t)
		sqlExec(t, opts.Path, `DELETE FROM entries WHERE seq = 3`, `DELETE FROM checkpoints WHERE size = 3`,
			`DELETE FROM head`)
		_, err := Open(t.Context(), opts)
		var de *DamageError
		if !errors.As(err, &de) || de.Damage != DamageTruncated || de.Seq != 3 {
			t.Fatalf("Open on a truncated log: %v", err)
		}
		_, err = verifyDB(t, opts, true)
		if !errors.As(err, &de) || de.Damage != DamageTruncated {
			t.Fatalf("verify: %v", err)
		}
	})

	t.Run("older format", func(t *testing.T) {
		opts, k, b := setup(t)
		// The bare note an older fluffy wrote (its newest checkpoint).
		cp, err := ParseCheckpoint(b, k.Verifier)
		if err != nil {
			t.Fatal(err)
		}
		writeWitnessFile(t, opts, cp.Note)
		if c, err := ParseCheckpoint(cp.Note, k.Verifier); err != nil || c.Size != 3 {
			t.Fatalf("ParseCheckpoint of a bare note: %+v, %v", c, err)
		}
		if rep, err := verifyDB(t, opts, true); err != nil || rep.Size != 3 {
			t.Fatalf("verify with the older format: %+v, %v", rep, err)
		}
		// A truncated database is still caught against it.
		sqlExec(t, opts.Path, `DELETE FROM entries WHERE seq = 3`, `DELETE FROM checkpoints WHERE size = 3`, `DELETE FROM head`)
		_, err = Open(t.Context(), opts)
		if !errors.Is(err, ErrDamaged) {
			t.Fatalf("Open on a truncated log, older checkpoint file: %v", err)
		}
	})

	t.Run("older format migrates", func(t *testing.T) {
		opts, k, b := setup(t)
		cp, _ := ParseCheckpoint(b, k.Verifier)
		writeWitnessFile(t, opts, cp.Note)
		l, err := Open(t.Context(), opts)
		if err != nil {
			t.Fatal(err)
		}
		appendN(t, l, 1, KindGatePolicy)
		// The first write goes to slot 1: the bare note stays readable
		// in slot 0 until the next one.
		mid := witnessFile(t, opts)
		if !bytes.HasPrefix(mid, cp.Note) || len(mid) != 2*witnessSlot {
			t.Fatalf("after the first write: %q", mid[:min(len(mid), 80)])
		}
		if got := slotSizes(mid); got[0] != 3 || got[1] != 4 {
			t.Fatalf("slots %v", got)
		}
		appendN(t, l, 1, KindGatePolicy)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		end := witnessFile(t, opts)
		if !bytes.HasPrefix(end, []byte(witnessMagic)) {
			t.Fatalf("slot 0 not rewritten: %q", end[:80])
		}
		if rep, err := verifyDB(t, opts, true); err != nil || rep.Size != 5 {
			t.Fatalf("verify after migration: %+v, %v", rep, err)
		}
	})
}

func TestWitnessSlotRoundTrip(t *testing.T) {
	for _, note := range [][]byte{[]byte("a\n"), bytes.Repeat([]byte("n"), witnessSlot-200)} {
		slot, err := encodeWitnessSlot(note)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := parseWitnessSlot(slot)
		if !ok || !bytes.Equal(got, note) || len(slot) != witnessSlot {
			t.Fatalf("round trip of %d bytes: %v", len(note), ok)
		}
	}
	for _, note := range [][]byte{nil, bytes.Repeat([]byte("n"), witnessSlot), []byte("a\x00b")} {
		if _, err := encodeWitnessSlot(note); err == nil {
			t.Fatalf("note of %d bytes encoded", len(note))
		}
	}
}

// FuzzWitnessSlots parses arbitrary checkpoint files (the file under
// keys/ is outside input): no panic, intact slots round-trip, and what is
// reported as a note never comes from a damaged slot. Inputs run to 8 KiB,
// whose default minimization takes most of a minute per new input: run it
// with -fuzzminimizetime 2s.
func FuzzWitnessSlots(f *testing.F) {
	a, _ := encodeWitnessSlot([]byte("origin\n5\nroot\nchain x\n\n— sig\n"))
	b, _ := encodeWitnessSlot([]byte("origin\n6\nroot\nchain y\n\n— sig\n"))
	f.Add(append(bytes.Clone(a), b...))
	f.Add(a[:100])
	f.Add([]byte("origin\n5\nroot\n"))
	f.Add(append([]byte("bare note\n"), make([]byte, witnessSlot)...))
	f.Add([]byte(witnessMagic + "3 00\nabc"))
	f.Fuzz(func(t *testing.T, in []byte) {
		notes, damaged := witnessSlots(in)
		if damaged < 0 || len(notes) > 2 {
			t.Fatalf("%d notes, %d damaged", len(notes), damaged)
		}
		for _, n := range notes {
			if n.slot < 0 || n.slot > 1 {
				t.Fatalf("slot %d", n.slot)
			}
			if s := in[n.slot*witnessSlot : min(len(in), (n.slot+1)*witnessSlot)]; bytes.HasPrefix(s, []byte(witnessMagic)) {
				enc, err := encodeWitnessSlot(n.note)
				if err != nil || !bytes.Equal(enc[:len(s)], s) {
					t.Fatalf("intact slot %d does not re-encode to itself", n.slot)
				}
			}
		}
		_ = isWitnessFile(in)
		_, _ = noteSize(in)
	})
}

// TestWitnessNoneYet: a log that never wrote has no checkpoint file
// (readers see none), and an empty one (a crash right after creating it)
// counts as none.
func TestWitnessNoneYet(t *testing.T) {
	l, opts := testLog(t, Options{})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(opts.KeyDir, CheckpointFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("checkpoint file after an Open without writes: %v", err)
	}
	writeWitnessFile(t, opts, nil)
	if tr, err := TrustedCheckpoints(opts.KeyDir); err != nil || tr != nil {
		t.Fatalf("empty checkpoint file: %q, %v", tr, err)
	}
	l2, err := Open(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l2, 2, KindGatePolicy)
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	if rep, err := verifyDB(t, opts, true); err != nil || rep.Size != 2 {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
}
