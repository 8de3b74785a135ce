//go:build goolm

package matrix

import (
	"testing"

	"maunium.net/go/mautrix/id"
)

func TestSplitRoom(t *testing.T) {
	for _, tc := range []struct {
		room   string
		id     id.RoomID
		thread id.EventID
	}{
		{"!abc:example.org", "!abc:example.org", ""},
		{"!abc:example.org/$root/with+slash", "!abc:example.org", "$root/with+slash"},
	} {
		r, th := splitRoom(tc.room)
		if r != tc.id || th != tc.thread || joinRoom(r, th) != tc.room {
			t.Errorf("splitRoom(%q) = %q, %q", tc.room, r, th)
		}
	}
}

func TestStepOf(t *testing.T) {
	for key, want := range map[string]int{"1️⃣": 1, "1⃣": 1, "3️⃣": 3, "🔟": 10, "✅": 0, "1": 0, "": 0} {
		if got := stepOf(key); got != want {
			t.Errorf("stepOf(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestDescribeAnswer(t *testing.T) {
	who := id.UserID("@ana:example.org")
	for _, tc := range []struct {
		text  string
		steps int
		want  string
	}{
		{"/approve", 3, "approved by @ana:example.org, steps 1, 2, 3"},
		{"/approve 1,3 only", 3, "approved by @ana:example.org, steps 1, 3 (denied: 2)"},
		{"/deny", 2, "denied by @ana:example.org"},
		{"/deny 2 too broad", 2, "answered by @ana:example.org: denied step 2; still open: 1"},
		{"/approve 1", 1, "approved by @ana:example.org, step 1"},
	} {
		if got := describeAnswer(tc.text, tc.steps, who); got != tc.want {
			t.Errorf("describeAnswer(%q, %d) = %q, want %q", tc.text, tc.steps, got, tc.want)
		}
	}
}

func TestStripReplyFallback(t *testing.T) {
	if got := stripReplyFallback("> <@bot:x> Approval request\n> more\n\n/approve 1-2 only"); got != "/approve 1-2 only" {
		t.Errorf("got %q", got)
	}
	if got := stripReplyFallback("/deny"); got != "/deny" {
		t.Errorf("got %q", got)
	}
}
