package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fluffy-agent/fluffy/internal/channel/matrix"
)

// TestPrintVerifications: the operator sees the emoji and numbers to
// compare, is told before answering when confirming re-pins a master key,
// and what the homeserver names (user, device) cannot drive the terminal.
func TestPrintVerifications(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	vs := []matrix.PendingVerification{
		{ID: "t1", Channel: "matrix", Principal: "@ana:example.org", Device: "DEV\x1b[2J", State: matrix.StateCompare,
			Emoji: []string{"🐶 Dog", "🔑 Key"}, Decimals: []int{1001, 2002, 3003}, Started: now.Add(-10 * time.Second), Expires: now.Add(time.Minute),
			MasterKey: "NEWKEY", PinnedKey: "OLDKEY"},
		{ID: "t2", Channel: "matrix", Principal: "@ana:example.org", Device: "D2", State: matrix.StateRequested, Started: now},
	}
	var b bytes.Buffer
	printVerifications(&b, vs, now)
	out := b.String()
	for _, want := range []string{"t1  @ana:example.org, device DEV", "emoji:   🐶 Dog  🔑 Key", "numbers: 1001 2002 3003",
		"master key NEWKEY differs from the pinned one (OLDKEY): confirming re-pins @ana:example.org to it",
		"fluffy matrix verify t1 --confirm (else --cancel); expires in 1m0s", "requested: no emoji yet"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("an escape sequence reaches the terminal:\n%q", out)
	}

	b.Reset()
	err := printVerifyAnswer(&b, matrix.VerifyAnswer{PendingVerification: vs[0], Outcome: matrix.OutcomeVerified, Repinned: true}, false)
	if err != nil || !strings.Contains(b.String(), "master key NEWKEY is now pinned for @ana:example.org in place of OLDKEY") {
		t.Errorf("the re-pin is not said: %v\n%s", err, b.String())
	}
	b.Reset()
	var ee *ExitError
	err = printVerifyAnswer(&b, matrix.VerifyAnswer{PendingVerification: vs[0], Outcome: matrix.OutcomeCancelled, Reason: "m.timeout: late"}, false)
	if !errors.As(err, &ee) || ee.Code != ExitFailure {
		t.Errorf("a verification that failed is not a failure: %v", err)
	}
	if err := printVerifyAnswer(&b, matrix.VerifyAnswer{PendingVerification: vs[0], Outcome: matrix.OutcomeCancelled}, true); err != nil {
		t.Errorf("the operator's own cancel: %v", err)
	}
}
