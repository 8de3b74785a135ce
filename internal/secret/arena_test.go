package secret

import (
	"encoding/base64"
	"testing"
)

// An arena's pieces are zeroed and gone at Wipe, and it hands out
// nothing after; small pieces share a mapping.
func TestArenaWipe(t *testing.T) {
	a := &Arena{}
	s := a.String([]byte("TOKEN="), []byte("s3cr3t-value"))
	if s != "TOKEN=s3cr3t-value" {
		t.Fatalf("%q", s)
	}
	for range 100 {
		if b := a.Bytes(100); len(b) != 100 {
			t.Fatal("no piece")
		}
	}
	big := a.Bytes(1 << 20)
	big[len(big)-1] = 1
	if n := len(a.maps); n != 2 {
		t.Fatalf("%d mappings for 101 small pieces and a large one", n)
	}
	if err := a.Wipe(); err != nil {
		t.Fatal(err)
	}
	if b := a.Bytes(8); b != nil || a.maps != nil {
		t.Fatal("a wiped arena handed out memory")
	}
	var none *Arena
	if none.Wipe() != nil || none.Bytes(1) != nil {
		t.Fatal("a nil arena handed out memory")
	}
}

// Redact replaces every form of a session's value (overlapping forms,
// such as a base64 and its core, once), and nothing of another session.
func TestRedact(t *testing.T) {
	b, err := New(Options{Key: make([]byte, 32), Backends: map[string]Backend{"env": Env{LookupEnv: func(string) (string, bool) { return "hunter2-hunter2", true }}}})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := ParseRef("secret://env/X")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Use(t.Context(), "s1", ref, func([]byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	in := "a hunter2-hunter2 b " + base64.StdEncoding.EncodeToString([]byte("hunter2-hunter2")) + " c hunter2-hunter2hunter2-hunter2 d"
	got := string(b.Redact("s1", []byte(in), "[R]"))
	if got != "a [R] b [R] c [R][R] d" {
		t.Fatalf("%q", got)
	}
	if got := string(b.Redact("other", []byte(in), "[R]")); got != in {
		t.Fatalf("another session's output changed: %q", got)
	}
}
