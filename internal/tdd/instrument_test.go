package tdd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/operation"
)

func wsPath(ws, rel string) operation.Path {
	return operation.Path{Abs: filepath.Join(ws, rel), InWorkspace: true}
}

// TestInstrumentationReverted: in debug mode the agent instruments an
// existing file and creates a new one; when the user leaves debug mode,
// both are put back as they were.
func TestInstrumentationReverted(t *testing.T) {
	ctx := context.Background()
	ws := t.TempDir()
	orig := []byte("package calc\n\nfunc Sub(a, b int) int { return a + b }\n")
	if err := os.WriteFile(filepath.Join(ws, "calc.go"), orig, 0o640); err != nil {
		t.Fatal(err)
	}
	_, j := openJournal(t, t.TempDir())
	m := mustMachine(t, Options{})
	sess, err := Resume(ctx, j, m, "dbg", Debug)
	if err != nil {
		t.Fatal(err)
	}
	// Undeclared source edits are refused in debug mode.
	op := operation.Operation{Action: operation.Write, Paths: []operation.Path{wsPath(ws, "calc.go")}, Session: operation.Session{Workspace: ws}}
	if d := sess.Allowed(op); d.Allow || d.Code != CodeDebugSource {
		t.Fatalf("undeclared edit: %+v", d)
	}
	if _, err := sess.Instrument(ctx, ws, []operation.Path{wsPath(ws, "calc.go"), wsPath(ws, "trace.go")}); err != nil {
		t.Fatal(err)
	}
	op.Paths = append(op.Paths, wsPath(ws, "trace.go"))
	d := sess.Allowed(op)
	if !d.Allow || d.Code != CodeInstrumentation {
		t.Fatalf("instrumented edit: %+v", d)
	}
	// The agent edits both (as the tool would, after the gate).
	os.WriteFile(filepath.Join(ws, "calc.go"), []byte("package calc\n// debug print\n"), 0o640)
	os.WriteFile(filepath.Join(ws, "trace.go"), []byte("package calc\n"), 0o644)
	if _, err := sess.Apply(ctx, m.WriteEvent(ptr(sess.Status()), op)); err != nil {
		t.Fatal(err)
	}
	// Declaring again keeps the first original.
	if _, err := sess.Instrument(ctx, ws, []operation.Path{wsPath(ws, "calc.go")}); err != nil {
		t.Fatal(err)
	}
	tr, err := sess.SwitchMode(ctx, Strict, Actor{Kind: ActorUser, ID: "alice", Via: "cli"}, "found it")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Revert) != 2 {
		t.Fatalf("revert list %v", tr.Revert)
	}
	restored, err := sess.RevertInstrumentation(ctx)
	if err != nil || len(restored) != 2 {
		t.Fatalf("revert: %v %v", restored, err)
	}
	got, err := os.ReadFile(filepath.Join(ws, "calc.go"))
	if err != nil || string(got) != string(orig) {
		t.Fatalf("calc.go = %q, %v", got, err)
	}
	if fi, _ := os.Stat(filepath.Join(ws, "calc.go")); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v", fi.Mode())
	}
	if _, err := os.Stat(filepath.Join(ws, "trace.go")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("trace.go still exists: %v", err)
	}
	// Nothing left to revert.
	if again, err := sess.RevertInstrumentation(ctx); err != nil || len(again) != 0 {
		t.Fatalf("second revert: %v %v", again, err)
	}
}

func ptr(s Status) *Status { return &s }

// TestRevertIgnoresPlantedSymlink: a symlink put in place of an
// instrumented file during debugging is replaced, and the file outside
// the workspace it pointed to is untouched.
func TestRevertIgnoresPlantedSymlink(t *testing.T) {
	ctx := context.Background()
	ws, outside := t.TempDir(), t.TempDir()
	victim := filepath.Join(outside, "victim")
	os.WriteFile(victim, []byte("keep me"), 0o600)
	os.WriteFile(filepath.Join(ws, "calc.go"), []byte("orig"), 0o644)
	_, j := openJournal(t, t.TempDir())
	sess, err := Resume(ctx, j, mustMachine(t, Options{}), "dbg", Debug)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Instrument(ctx, ws, []operation.Path{wsPath(ws, "calc.go")}); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(ws, "calc.go"))
	if err := os.Symlink(victim, filepath.Join(ws, "calc.go")); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.RevertInstrumentation(ctx); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep me" {
		t.Fatalf("victim outside the workspace changed: %q", b)
	}
	fi, err := os.Lstat(filepath.Join(ws, "calc.go"))
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("calc.go not restored as a file: %v %v", fi, err)
	}
}

func TestInstrumentRefusedOutsideDebug(t *testing.T) {
	ctx := context.Background()
	ws := t.TempDir()
	_, j := openJournal(t, t.TempDir())
	sess, err := Resume(ctx, j, mustMachine(t, Options{}), "s", Strict)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Instrument(ctx, ws, []operation.Path{wsPath(ws, "calc.go")}); !errors.Is(err, ErrGuard) {
		t.Fatalf("instrument in strict: %v", err)
	}
	var n int
	j.db.QueryRowContext(ctx, `SELECT count(*) FROM tdd_instrumentation`).Scan(&n)
	if n != 0 {
		t.Fatalf("%d snapshots saved for a refused declaration", n)
	}
}
