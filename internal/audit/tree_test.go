package audit

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// A sub-agent's entry carries its parent and root; a top-level entry
// encodes exactly as before (no parent or root member at all).
func TestEntryTree(t *testing.T) {
	at := time.Date(2026, 11, 27, 1, 2, 3, 4, time.UTC)
	top := Entry{Seq: 1, Time: at, Session: "s1", Kind: KindSessionCreate, Actor: "kernel"}
	b, err := top.Encode()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"actor":"kernel","kind":"session.create","payload":{},"seq":1,"session":"s1","time":"2026-11-27T01:02:03.000000004Z"}`
	if string(b) != want {
		t.Fatalf("top-level entry\n got %s\nwant %s", b, want)
	}
	child := top
	child.Session, child.Parent, child.Root = "s3", "s2", "s1"
	b, err = child.Encode()
	if err != nil {
		t.Fatal(err)
	}
	want = `{"actor":"kernel","kind":"session.create","parent":"s2","payload":{},"root":"s1","seq":1,"session":"s3","time":"2026-11-27T01:02:03.000000004Z"}`
	if string(b) != want {
		t.Fatalf("child entry\n got %s\nwant %s", b, want)
	}
	got, err := ParseEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Parent != "s2" || got.Root != "s1" || got.Session != "s3" {
		t.Fatalf("parsed %+v", got)
	}
	// An empty parent spelled out is not the canonical form.
	bad := bytes.Replace([]byte(want), []byte(`"parent":"s2"`), []byte(`"parent":""`), 1)
	if _, err := ParseEntry(bad); !errors.Is(err, ErrNotCanonical) {
		t.Fatalf("empty parent member: %v, want ErrNotCanonical", err)
	}
}
