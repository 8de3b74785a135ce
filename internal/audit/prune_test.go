package audit

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// prunedLog writes 30 entries, prunes the first 20 and returns the log's
// options, the anchor checkpoint and the audit.prune entry's bytes.
func prunedLog(t *testing.T) (Options, Checkpoint, []byte) {
	t.Helper()
	clock := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	l, opts := testLog(t, Options{CheckpointEvery: 10, Now: now})
	appendN(t, l, 20, KindGatePolicy)
	clock = clock.Add(time.Hour)
	appendN(t, l, 10, KindGatePolicy)
	res, err := l.Prune(t.Context(), clock.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if res.Anchor != 20 || res.Seq != 31 {
		t.Fatalf("prune: %+v", res)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := OpenReader(t.Context(), opts.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var body []byte
	if err := r.db.QueryRowContext(t.Context(), `SELECT body FROM entries WHERE seq = 31`).Scan(&body); err != nil {
		t.Fatal(err)
	}
	var note string
	if err := r.db.QueryRowContext(t.Context(), `SELECT note FROM checkpoints WHERE size = 20`).Scan(&note); err != nil {
		t.Fatal(err)
	}
	cp, err := ParseCheckpoint([]byte(note), l.Key().Verifier)
	if err != nil {
		t.Fatal(err)
	}
	return opts, cp, body
}

// TestIsPruneRecord: only the entry Prune writes is a prune record; the
// kind, actor and payload are read as fields, never found in the text.
func TestIsPruneRecord(t *testing.T) {
	_, cp, body := prunedLog(t)
	e, err := ParseEntry(body)
	if err != nil {
		t.Fatal(err)
	}
	var payload map[string]any
	if err := json.Unmarshal(e.Payload.(json.RawMessage), &payload); err != nil {
		t.Fatal(err)
	}
	// reencode returns body with edit applied to a copy of its entry.
	reencode := func(edit func(e *Entry, p map[string]any)) []byte {
		e2 := e
		p := map[string]any{}
		for k, v := range payload {
			p[k] = v
		}
		edit(&e2, p)
		e2.Payload = p
		b, err := e2.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	other := cp
	other.Size = 19
	cases := []struct {
		name string
		body []byte
		cp   Checkpoint
		want bool
	}{
		{"the record Prune wrote", body, cp, true},
		{"another anchor", body, other, false},
		{"no anchor checkpoint", body, Checkpoint{}, false},
		{"kind nested in the payload of a note", reencode(func(e *Entry, p map[string]any) {
			e.Kind, e.Actor = KindUserNote, ActorUser
			p["note"] = map[string]any{"kind": "audit.prune"}
		}), cp, false},
		{"kind and actor nested in a payload of another kind", reencode(func(e *Entry, p map[string]any) {
			e.Kind = KindGatePolicy
			p["kind"], p["actor"] = "audit.prune", "kernel"
		}), cp, false},
		{"actor user", reencode(func(e *Entry, p map[string]any) { e.Actor = ActorUser }), cp, false},
		{"actor cli", reencode(func(e *Entry, p map[string]any) { e.Actor = "cli" }), cp, false},
		{"in a session", reencode(func(e *Entry, p map[string]any) { e.Session = "s1" }), cp, false},
		{"anchor as a string", reencode(func(e *Entry, p map[string]any) { p["anchor"] = "20" }), cp, false},
		{"anchor not an integer", reencode(func(e *Entry, p map[string]any) { p["anchor"] = 20.5 }), cp, false},
		{"anchor true", reencode(func(e *Entry, p map[string]any) { p["anchor"] = true }), cp, false},
		{"anchor spelled Anchor", reencode(func(e *Entry, p map[string]any) { p["Anchor"] = p["anchor"]; delete(p, "anchor") }), cp, false},
		{"anchor nested", reencode(func(e *Entry, p map[string]any) { p["x"] = map[string]any{"anchor": 20}; delete(p, "anchor") }), cp, false},
		{"another root", reencode(func(e *Entry, p map[string]any) { p["root"] = b64(make([]byte, 32)) }), cp, false},
		{"no chain", reencode(func(e *Entry, p map[string]any) { delete(p, "chain") }), cp, false},
		{"not canonical", bytes.Replace(body, []byte(`,"kind"`), []byte(`, "kind"`), 1), cp, false},
		{"duplicate kind", bytes.Replace(body, []byte(`"kind":"audit.prune"`), []byte(`"kind":"user.note","kind":"audit.prune"`), 1), cp, false},
		{"not JSON", []byte(`"kind":"audit.prune","actor":"kernel","anchor":20`), cp, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsPruneRecord(tc.body, tc.cp); got != tc.want {
				t.Fatalf("IsPruneRecord(%s) = %v, want %v", tc.body, got, tc.want)
			}
		})
	}
}

// FuzzIsPruneRecord: whatever the bytes, a prune record is an entry that
// parses strictly, of kind audit.prune by fluffy's actor, whose payload's
// own anchor member is the anchor.
func FuzzIsPruneRecord(f *testing.F) {
	cp := Checkpoint{Size: 20, Root: make([]byte, 32), Chain: make([]byte, 32)}
	rec := `{"actor":"kernel","kind":"audit.prune","payload":{"anchor":20,"chain":"` + b64(cp.Chain) + `","root":"` + b64(cp.Root) + `"},"seq":31,"session":"","time":"2026-11-01T01:00:00.000000000Z"}`
	f.Add([]byte(rec))
	f.Add([]byte(`{"actor":"user","kind":"user.note","payload":{"anchor":20,"note":{"kind":"audit.prune"}},"seq":8,"session":"","time":"2026-11-01T01:00:00.000000000Z"}`))
	f.Add([]byte(`{"actor":"kernel","kind":"audit.prune","payload":{"anchor":2e1},"seq":31,"session":"","time":"2026-11-01T01:00:00.000000000Z"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if !IsPruneRecord(body, cp) {
			return
		}
		e, err := ParseEntry(body)
		if err != nil || e.Kind != KindAuditPrune || e.Actor != ActorKernel || e.Session != "" {
			t.Fatalf("accepted %q: %+v %v", body, e, err)
		}
		var p struct {
			Anchor json.Number `json:"anchor"`
		}
		dec := json.NewDecoder(bytes.NewReader(e.Payload.(json.RawMessage)))
		dec.UseNumber()
		if err := dec.Decode(&p); err != nil || p.Anchor != "20" || !strings.Contains(string(e.Payload.(json.RawMessage)), `"anchor":20`) {
			t.Fatalf("accepted %q with anchor %q", body, p.Anchor)
		}
	})
}

// TestAppendRefusesLogOnlyKinds: no caller of Append can write what only
// the log writes (a prune record, a checkpoint record).
func TestAppendRefusesLogOnlyKinds(t *testing.T) {
	l, _ := testLog(t, Options{})
	for _, k := range []Kind{KindAuditPrune, "audit.checkpoint", "audit.anything"} {
		if _, err := l.Append(t.Context(), Entry{Kind: k, Actor: ActorKernel, Payload: map[string]int{"anchor": 1}}); !errors.Is(err, ErrReservedKind) {
			t.Errorf("Append(%s) = %v, want ErrReservedKind", k, err)
		}
	}
	if _, err := l.Append(t.Context(), Entry{Kind: KindUserNote, Actor: ActorUser}); err != nil {
		t.Fatal(err)
	}
}

// TestIncrementalVerifyNewAnchor: the default (incremental) check starts
// past the anchor only when a passing check read that anchor's prune
// record; an anchor it has not seen makes it start there.
func TestIncrementalVerifyNewAnchor(t *testing.T) {
	t.Run("honest prune", func(t *testing.T) {
		opts, _, _ := prunedLog(t)
		rep, err := verifyDB(t, opts, false)
		if err != nil || rep.From != 21 {
			t.Fatalf("first check after the prune: %+v, %v (want it to start at the anchor, 21)", rep, err)
		}
		b, _ := os.ReadFile(filepath.Join(opts.KeyDir, VerifiedFile))
		if string(b) != "31 20\n" {
			t.Fatalf("%s holds %q", VerifiedFile, b)
		}
		if rep, err = verifyDB(t, opts, false); err != nil || rep.From != 32 {
			t.Fatalf("next check: %+v, %v (want nothing new)", rep, err)
		}
		// The format an older fluffy wrote: the anchor it saw is unknown.
		os.WriteFile(filepath.Join(opts.KeyDir, VerifiedFile), []byte("31\n"), 0o600)
		if rep, err = verifyDB(t, opts, false); err != nil || rep.From != 21 {
			t.Fatalf("check after an old-format state: %+v, %v (want it to start at the anchor)", rep, err)
		}
	})
	t.Run("start deleted after a check passed", func(t *testing.T) {
		l, opts := testLog(t, Options{CheckpointEvery: 10})
		appendN(t, l, 30, KindGatePolicy)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := verifyDB(t, opts, false); err != nil {
			t.Fatal(err)
		}
		db, err := sql.Open("sqlite", "file:"+opts.Path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`DELETE FROM entries WHERE seq <= 10; INSERT INTO meta VALUES ('anchor', '10')`); err != nil {
			t.Fatal(err)
		}
		db.Close()
		_, err = verifyDB(t, opts, false)
		var de *DamageError
		if !errors.As(err, &de) || de.Damage != DamageAnchor || de.Seq != 11 {
			t.Fatalf("incremental check of a log whose start was deleted: %v", err)
		}
	})
}

// TestTrustedAtStart: a checkpoint kept outside the database at the size
// where the incremental check starts is compared too (two signed states
// of one size mean the log was rebuilt with the key).
func TestTrustedAtStart(t *testing.T) {
	l, opts := testLog(t, Options{CheckpointEvery: 10})
	appendN(t, l, 30, KindGatePolicy)
	key := l.Key()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := verifyDB(t, opts, false); err != nil {
		t.Fatal(err)
	}
	fork, err := signCheckpoint(key.Signer, 30, make([]byte, 32), make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	r, err := OpenReader(t.Context(), opts.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Verify(t.Context(), VerifyOptions{Verifier: key.Verifier, Trusted: [][]byte{fork.Note}, StateDir: opts.KeyDir})
	var de *DamageError
	if !errors.As(err, &de) || de.Damage != DamageRewritten || de.Seq != 30 {
		t.Fatalf("a different signed state at the start: %v", err)
	}
}
