package audit_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
)

// These tests use only what docs/audit.md specifies (and the package's
// exported API to create logs): damage is done with raw SQL or by editing
// export files, and hashes are recomputed from the spec.

func newLog(t *testing.T, n int) (audit.Options, string) {
	t.Helper()
	dir := t.TempDir()
	opts := audit.Options{Path: filepath.Join(dir, "audit.db"), KeyDir: filepath.Join(dir, "keys"), CheckpointEvery: 10}
	l, err := audit.Open(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		kind := audit.KindExecStart
		if i%3 == 0 {
			kind = audit.KindGatePolicy
		}
		if _, err := l.Append(t.Context(), audit.Entry{Session: "s", Kind: kind, Actor: "agent",
			Payload: map[string]any{"argv": []string{"ls", "-l"}, "i": i, "note": "naïve \u2028 \"quoted\"\n"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	k, err := audit.LoadKey(opts.KeyDir)
	if err != nil {
		t.Fatal(err)
	}
	return opts, k.Verifier
}

func specChain(prev []byte, seq uint64, body []byte) []byte {
	h := sha256.New()
	h.Write([]byte("fluffy-audit-chain-v1\x00"))
	h.Write(prev)
	binary.Write(h, binary.BigEndian, seq)
	h.Write(body)
	return h.Sum(nil)
}

// TestRewrittenChain edits an entry and recomputes every later chain hash
// from the published formula, so the chain is self-consistent: only the
// signed checkpoints reveal it.
func TestRewrittenChain(t *testing.T) {
	opts, vkey := newLog(t, 35)
	db, err := sql.Open("sqlite", "file:"+opts.Path)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query(`SELECT seq, body FROM entries ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	type ent struct {
		seq  uint64
		body string
	}
	var ents []ent
	for rows.Next() {
		var e ent
		rows.Scan(&e.seq, &e.body)
		ents = append(ents, e)
	}
	rows.Close()
	prev := make([]byte, 32)
	for _, e := range ents {
		if e.seq == 23 {
			e.body = strings.Replace(e.body, `"ls"`, `"rm"`, 1)
		}
		prev = specChain(prev, e.seq, []byte(e.body))
		if _, err := db.Exec(`UPDATE entries SET body = ?, hash = ? WHERE seq = ?`, e.body, prev, e.seq); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	r, err := audit.OpenReader(t.Context(), opts.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Verify(t.Context(), audit.VerifyOptions{Verifier: vkey, Full: true})
	var de *audit.DamageError
	if !errors.As(err, &de) || de.Damage != audit.DamageRewritten || de.Seq > 23 {
		t.Fatalf("got %v, want a rewritten chain from 23 or before", err)
	}
}

func python(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed: the stand-alone export verifier (scripts/audit_verify.py) is not exercised")
	}
	return p
}

// TestExportVerifiers checks an export with VerifyExport and with the
// stand-alone Python verifier of docs/, intact and after each kind of
// damage to the export files.
func TestExportVerifiers(t *testing.T) {
	py := python(t)
	opts, vkey := newLog(t, 45)
	// Prune so the export starts at an anchor.
	l, err := audit.Open(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Prune(t.Context(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 12; i++ {
		l.Append(t.Context(), audit.Entry{Kind: audit.KindExecEnd, Actor: "kernel", Payload: map[string]int{"exit": i}})
	}
	l.Close()
	r, err := audit.OpenReader(t.Context(), opts.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	base := filepath.Join(t.TempDir(), "export")
	if _, err := r.Export(t.Context(), base, vkey); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadFile(filepath.Join(base, audit.ExportEntries))
	lines := strings.SplitAfter(string(entries), "\n")
	lines = lines[:len(lines)-1]
	cases := []struct {
		name string
		edit func(lines []string) []string
	}{
		{"intact", func(l []string) []string { return l }},
		{"edited", func(l []string) []string { l[3] = strings.Replace(l[3], `"exit":`, `"exit":1`, 1); return l }},
		{"deleted", func(l []string) []string { return append(l[:2:2], l[3:]...) }},
		{"reordered", func(l []string) []string { l[2], l[3] = l[3], l[2]; return l }},
		{"truncated", func(l []string) []string { return l[:len(l)-2] }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "x")
			os.MkdirAll(dir, 0o700)
			for _, f := range []string{audit.ExportCheckpoints, audit.ExportAnchor, audit.ExportKey} {
				b, _ := os.ReadFile(filepath.Join(base, f))
				os.WriteFile(filepath.Join(dir, f), b, 0o600)
			}
			edited := tc.edit(append([]string(nil), lines...))
			os.WriteFile(filepath.Join(dir, audit.ExportEntries), []byte(strings.Join(edited, "")), 0o600)
			_, goErr := audit.VerifyExport(context.Background(), dir, audit.VerifyOptions{Verifier: vkey})
			cmd := exec.Command(py, "../../scripts/audit_verify.py", dir, vkey)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			pyErr := cmd.Run()
			if tc.name == "intact" {
				if goErr != nil || pyErr != nil {
					t.Fatalf("intact export: go: %v; python: %v\n%s", goErr, pyErr, out.String())
				}
				if !strings.HasPrefix(out.String(), "OK ") {
					t.Fatalf("python: %s", out.String())
				}
				return
			}
			if !errors.Is(goErr, audit.ErrDamaged) {
				t.Errorf("go verifier accepted %s export: %v", tc.name, goErr)
			}
			if pyErr == nil || !strings.Contains(out.String(), "DAMAGED") {
				t.Errorf("python verifier accepted %s export: %s", tc.name, out.String())
			}
		})
	}
	// A forged key: the python verifier rejects signatures by another key.
	_, other := newLog(t, 1)
	cmd := exec.Command(py, "../../scripts/audit_verify.py", base, other)
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("python verifier accepted another key: %s", out)
	}
}

// TestForgedTail appends an entry with a correct chain hash (from the
// published formula) behind fluffy's back: no checkpoint signs it, so
// verify reports it and a writer refuses to adopt it.
func TestForgedTail(t *testing.T) {
	opts, vkey := newLog(t, 20)
	db, err := sql.Open("sqlite", "file:"+opts.Path)
	if err != nil {
		t.Fatal(err)
	}
	var last []byte
	if err := db.QueryRow(`SELECT hash FROM entries WHERE seq = 20`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	body := `{"actor":"agent","kind":"approval.decision","payload":{"decision":"allow"},"seq":21,"session":"s","time":"2026-11-22T00:00:00.000000000Z"}`
	if _, err := db.Exec(`INSERT INTO entries (seq, body, hash) VALUES (21, ?, ?)`, body, specChain(last, 21, []byte(body))); err != nil {
		t.Fatal(err)
	}
	db.Close()
	r, err := audit.OpenReader(t.Context(), opts.Path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Verify(t.Context(), audit.VerifyOptions{Verifier: vkey, Full: true})
	r.Close()
	var de *audit.DamageError
	if !errors.As(err, &de) || de.Damage != audit.DamageUnsigned || de.Seq != 21 {
		t.Fatalf("forged tail: %v", err)
	}
	if _, err := audit.Open(t.Context(), opts); !errors.Is(err, audit.ErrDamaged) {
		t.Fatalf("writer adopted a forged tail: %v", err)
	}
}

// TestExportCutStart removes the first entries of an honest export and
// rewrites anchor.json for the cut from the published formulas (the cut
// is at a signed checkpoint): both verifiers refuse it, since no
// audit.prune record of fluffy's names that anchor. Malformed export files
// are refused by the Python verifier with a message, not a traceback.
func TestExportCutStart(t *testing.T) {
	py := python(t)
	opts, vkey := newLog(t, 25)
	r, err := audit.OpenReader(t.Context(), opts.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	base := filepath.Join(t.TempDir(), "export")
	if _, err := r.Export(t.Context(), base, vkey); err != nil {
		t.Fatal(err)
	}
	pyVerify := func(dir string) (string, error) {
		out, err := exec.Command(py, "../../scripts/audit_verify.py", dir, vkey).CombinedOutput()
		return string(out), err
	}
	copyExport := func(t *testing.T) string {
		dir := filepath.Join(t.TempDir(), "x")
		os.MkdirAll(dir, 0o700)
		for _, f := range []string{audit.ExportEntries, audit.ExportCheckpoints, audit.ExportAnchor, audit.ExportKey} {
			b, _ := os.ReadFile(filepath.Join(base, f))
			os.WriteFile(filepath.Join(dir, f), b, 0o600)
		}
		return dir
	}
	t.Run("cut at a checkpoint", func(t *testing.T) {
		dir := copyExport(t)
		entries, _ := os.ReadFile(filepath.Join(dir, audit.ExportEntries))
		lines := strings.SplitAfter(string(entries), "\n")
		const cut = 10
		chain := make([]byte, 32)
		var stack [][]byte
		for i, line := range lines[:cut] {
			n := uint64(i) + 1
			chain = specChain(chain, n, []byte(strings.TrimSuffix(line, "\n")))
			leaf := sha256.Sum256(append([]byte{0}, chain...))
			stack = append(stack, leaf[:])
			for m := n - 1; m&1 == 1; m >>= 1 {
				node := sha256.Sum256(append(append([]byte{1}, stack[len(stack)-2]...), stack[len(stack)-1]...))
				stack = append(stack[:len(stack)-2], node[:])
			}
		}
		var a map[string]any
		b, _ := os.ReadFile(filepath.Join(dir, audit.ExportAnchor))
		json.Unmarshal(b, &a)
		a["size"], a["chain"], a["range"] = cut, chain, stack
		b, _ = json.Marshal(a)
		os.WriteFile(filepath.Join(dir, audit.ExportAnchor), b, 0o600)
		os.WriteFile(filepath.Join(dir, audit.ExportEntries), []byte(strings.Join(lines[cut:], "")), 0o600)
		_, err := audit.VerifyExport(t.Context(), dir, audit.VerifyOptions{Verifier: vkey})
		var de *audit.DamageError
		if !errors.As(err, &de) || de.Damage != audit.DamageAnchor || de.Seq != cut+1 {
			t.Errorf("go verifier: %v, want bad anchor at %d", err, cut+1)
		}
		if out, err := pyVerify(dir); err == nil || !strings.Contains(out, "DAMAGED: entries 1..10 are missing and no audit.prune entry") {
			t.Errorf("python verifier: %v: %s", err, out)
		}
	})
	anchor, _ := os.ReadFile(filepath.Join(base, audit.ExportAnchor))
	cps, _ := os.ReadFile(filepath.Join(base, audit.ExportCheckpoints))
	for _, tc := range []struct{ file, content string }{
		{audit.ExportAnchor, "not json"},
		{audit.ExportAnchor, `{"format":"fluffy-audit-export-v1","size":0}`},
		// A member twice, or in another case: encoding/json would let the
		// last one win, or read "Size" as "size".
		{audit.ExportAnchor, strings.Replace(string(anchor), `"size": 0`, `"size": 0, "size": 10`, 1)},
		{audit.ExportAnchor, strings.Replace(string(anchor), `"size": 0`, `"size": 0, "Size": 10`, 1)},
		{audit.ExportAnchor, strings.Replace(string(anchor), `"size": 0`, `"Size": 0`, 1)},
		{audit.ExportCheckpoints, `[{"size":1,"note":"x"}]`},
		{audit.ExportCheckpoints, `[{"size":1,"size":2,"note":"x"}]`},
		{audit.ExportCheckpoints, strings.Replace(string(cps), `"size"`, `"Size"`, 1)},
		{audit.ExportEntries, "{}\n"},
		{audit.ExportEntries, "[1]\n"},
		{audit.ExportEntries, `{"seq":true}` + "\n"},
	} {
		t.Run("malformed "+tc.file, func(t *testing.T) {
			dir := copyExport(t)
			os.WriteFile(filepath.Join(dir, tc.file), []byte(tc.content), 0o600)
			if _, err := audit.VerifyExport(t.Context(), dir, audit.VerifyOptions{Verifier: vkey}); err == nil {
				t.Errorf("go verifier accepted %s = %s", tc.file, tc.content)
			}
			out, err := pyVerify(dir)
			if err == nil || strings.Contains(out, "Traceback") || !strings.HasPrefix(out, "DAMAGED: ") {
				t.Errorf("python verifier on %s = %q: %v", tc.content, out, err)
			}
		})
	}
}
