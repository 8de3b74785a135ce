package docker

import (
	"os"
	"strings"
	"testing"
)

func TestParseStatStart(t *testing.T) {
	tail := " S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 424242 20 21\n"
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{"123 (sh)" + tail, "424242", true},
		{"123 (a) b) S (c)" + tail, "424242", true}, // a name with ") " inside
		{"123 (x y z)" + tail, "424242", true},
		{"123 sh" + tail, "", false},
		{"123 (sh) S 1 2", "", false},
		{"123 (sh) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 notanumber", "", false},
	} {
		got, ok := parseStatStart(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("parseStatStart(%q) = %q %v, want %q %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// FuzzParseStatStart: any stat line (a process names itself) either parses
// to a decimal start time or is refused, never panics.
func FuzzParseStatStart(f *testing.F) {
	f.Add("123 (sh) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 424242 20 21\n")
	f.Add("1 ()) ) S")
	f.Fuzz(func(t *testing.T, s string) {
		st, ok := parseStatStart(s)
		if ok && (st == "" || strings.Trim(st, "0123456789") != "") {
			t.Fatalf("start %q from %q", st, s)
		}
	})
}

// FuzzOwnerAlive: container labels come from the engine (anyone with
// access to it can set them); parsing one never panics and a malformed
// one is never "alive".
func FuzzOwnerAlive(f *testing.F) {
	f.Add("1:1")
	f.Add("999999999:1")
	f.Add("::")
	f.Fuzz(func(t *testing.T, label string) {
		if ownerAlive(label) && !strings.Contains(label, ":") {
			t.Fatalf("alive without a start time: %q", label)
		}
	})
}

// FuzzKeyed: cgroup counter files are read line by line; any content
// gives a number, never a panic.
func FuzzKeyed(f *testing.F) {
	f.Add("oom_kill 3\nmax 7\n")
	f.Add("max\n max 1")
	f.Fuzz(func(t *testing.T, content string) {
		p := t.TempDir() + "/events"
		if err := writeFile(p, content); err != nil {
			t.Fatalf("write the fuzzed counter file: %v", err)
		}
		_ = keyed(p, "max")
	})
}

func writeFile(p, s string) error { return os.WriteFile(p, []byte(s), 0o600) }
