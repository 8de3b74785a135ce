//go:build goolm

package matrix

import (
	"testing"
	"time"

	"maunium.net/go/mautrix/id"

	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/units"
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

// TestVerifyTimeout: the account's verify_timeout sets how long a
// verification waits; Options.VerifyTimeout (tests) overrides it.
func TestVerifyTimeout(t *testing.T) {
	cfg := config.Matrix{Homeserver: "https://matrix.example.org", UserID: "@bot:example.org", TokenEnv: "T",
		Principals: []string{"@ana:example.org"}, VerifyTimeout: units.Duration(2 * time.Minute)}
	lookup := func(string) (string, bool) { return "x", true }
	for _, tc := range []struct {
		cfg, opt, want time.Duration
	}{{2 * time.Minute, 0, 2 * time.Minute}, {0, 0, DefaultVerifyTimeout}, {2 * time.Minute, time.Second, time.Second}} {
		cfg.VerifyTimeout = units.Duration(tc.cfg)
		c, err := New(cfg, Options{StateDir: t.TempDir(), LookupEnv: lookup, VerifyTimeout: tc.opt})
		if err != nil {
			t.Fatal(err)
		}
		if c.verify.timeout != tc.want {
			t.Errorf("verify_timeout %s, option %s: waits %s, want %s", tc.cfg, tc.opt, c.verify.timeout, tc.want)
		}
	}
}
