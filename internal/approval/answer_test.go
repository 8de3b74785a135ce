package approval

import (
	"errors"
	"strings"
	"testing"
)

// verdicts renders an answer compactly: A approved once, S approved for the
// session, D denied, P pending.
func verdicts(a Answer) string {
	var b strings.Builder
	for _, d := range a.Steps {
		switch {
		case d.Verdict == Approved && d.Scope == ScopeSession:
			b.WriteByte('S')
		case d.Verdict == Approved:
			b.WriteByte('A')
		case d.Verdict == Denied:
			b.WriteByte('D')
		default:
			b.WriteByte('P')
		}
	}
	return b.String()
}

func TestParseAnswer(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"/approve", 3, "AAA"},
		{"/approve all", 3, "AAA"},
		{"  /APPROVE   ALL  ", 2, "AA"},
		{"/approve 1-3", 5, "AAAPP"},
		{"/approve 1,4", 5, "APPAP"},
		{"/approve 1-2,4", 5, "AAPAP"},
		{"/approve 1-3 only", 5, "AAADD"},
		{"/approve 2 for session", 3, "PSP"},
		{"/approve 2 for this session", 3, "PSP"},
		{"/approve 1-2 only for session", 3, "SSD"},
		{"/approve all for session", 2, "SS"},
		{"/deny 2 too broad", 3, "PDP"},
		{"/deny", 3, "DDD"},
		{"/deny all not now", 2, "DD"},
		{"/deny not now", 2, "DD"},
		{"/approve 1-3\n/deny 4 no", 4, "AAAD"},
		{"/deny 2 risky\r\n/approve all", 3, "ADA"},
		{"/approve 1\n\n/deny all", 3, "ADD"},
		{"/approve 1", 1, "A"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			a, err := ParseAnswer(tt.in, tt.n)
			if err != nil {
				t.Fatalf("ParseAnswer(%q, %d): %v", tt.in, tt.n, err)
			}
			if got := verdicts(a); got != tt.want {
				t.Errorf("ParseAnswer(%q, %d) = %s, want %s", tt.in, tt.n, got, tt.want)
			}
		})
	}
}

func TestReasons(t *testing.T) {
	a, err := ParseAnswer("/deny 2   too   broad, use a narrower path\n/approve all", 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Steps[1].Reason; got != "too broad, use a narrower path" {
		t.Errorf("reason = %q", got)
	}
	if !a.Approved(1) || a.Approved(2) || !a.Approved(3) || a.Approved(0) || a.Approved(4) {
		t.Errorf("Approved() disagrees with %s", verdicts(a))
	}
	a, _ = ParseAnswer("/deny not today", 2)
	if a.Steps[0].Reason != "not today" || a.Steps[1].Reason != "not today" {
		t.Errorf("deny-all reason: %+v", a.Steps)
	}
	a, _ = ParseAnswer("/approve 1 only", 2)
	if a.Steps[1].Reason == "" {
		t.Error("steps denied by 'only' carry no reason for the agent")
	}
}

func TestParseAnswerErrors(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		line int
		col  int
		msg  string
	}{
		{"", 3, 1, 1, "empty answer"},
		{"  \n \n", 3, 1, 1, "empty answer"},
		{"yes", 3, 1, 1, `expected /approve or /deny, got "yes"`},
		{"/approve 4", 3, 1, 10, "there is no step 4: steps run from 1 to 3"},
		{"/approve 0", 1, 1, 10, "there is no step 0: the only step is 1"},
		{"/approve 3-1", 3, 1, 10, "runs backwards; write 1-3"},
		{"/approve 1-", 3, 1, 12, `"" is not a step number`},
		{"/approve 1,,2", 3, 1, 12, "empty step"},
		{"/approve 1,1", 3, 1, 12, "step 1 is named twice"},
		{"/approve x", 3, 1, 10, `"x" is not a step number`},
		{"/deny 2x oops", 3, 1, 7, `"2x" is not a step number`},
		{"/approve -1", 3, 1, 10, `"" is not a step number`},
		{"/approve 99999999999999", 3, 1, 10, "is not a step number"},
		{"/approve 1 please", 3, 1, 12, `unexpected "please" after /approve`},
		{"/approve 1 for ever", 3, 1, 12, `expected "for session"`},
		{"/approve all only", 3, 1, 14, `unexpected "only"`},
		{"/approve 1\n/deny 1 no", 3, 2, 1, "step 1 was already decided on line 1"},
		{"/approve\n/deny all", 3, 2, 1, "line 1 already decided every remaining step"},
		{"/approve 1\x1b[2J", 3, 1, 11, "control character"},
		{"/deny 1 a\x00b", 3, 1, 10, "control character"},
		{strings.Repeat("/approve 1\n", 1000), 3, 1, 1, "the limit is 4096"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := ParseAnswer(tt.in, tt.n)
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("ParseAnswer(%q) error = %v, want *SyntaxError", tt.in, err)
			}
			if se.Line != tt.line || se.Col != tt.col || !strings.Contains(se.Msg, tt.msg) {
				t.Errorf("got line %d col %d %q, want line %d col %d containing %q", se.Line, se.Col, se.Msg, tt.line, tt.col, tt.msg)
			}
			if !strings.Contains(err.Error(), "/approve 1-3 only") {
				t.Error("a syntax error should teach the answer language")
			}
		})
	}
	if _, err := ParseAnswer("/approve", 0); err == nil {
		t.Error("a question with no steps accepted")
	}
}

// FuzzParseAnswer checks the parser's contract on arbitrary input: it never
// panics, an accepted answer decides exactly n steps, and no step is
// approved unless the text contains an /approve command at all.
func FuzzParseAnswer(f *testing.F) {
	for _, s := range []string{"/approve", "/approve 1-3 only", "/deny 2 too broad", "/approve 1,4\n/deny all x", "/approve 2 for this session", "/deny 1-", "/approve 9"} {
		f.Add(s, 4)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		n = 1 + (n%10+10)%10
		a, err := ParseAnswer(s, n)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("non-syntax error %v", err)
			}
			return
		}
		if len(a.Steps) != n {
			t.Fatalf("%d decisions for %d steps", len(a.Steps), n)
		}
		hasApprove := strings.Contains(strings.ToLower(s), "/approve")
		for i, d := range a.Steps {
			switch d.Verdict {
			case Approved:
				if !hasApprove {
					t.Fatalf("step %d approved by %q", i+1, s)
				}
			case Denied, Pending:
			default:
				t.Fatalf("step %d has verdict %q", i+1, d.Verdict)
			}
		}
		again, err := ParseAnswer(s, n)
		if err != nil || verdicts(again) != verdicts(a) {
			t.Fatal("parsing is not deterministic")
		}
	})
}
