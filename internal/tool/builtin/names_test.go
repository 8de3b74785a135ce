package builtin

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fluffy-agent/fluffy/internal/tool"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

func TestShowName(t *testing.T) {
	cases := []struct{ name, want string }{
		{"main.go", "main.go"},
		{"héllo wörld ✓ 日本.md", "héllo wörld ✓ 日本.md"},
		{"bidi\u202etxt.md", `"bidi\u202etxt.md"`},
		{`bidi\u202etxt.md`, `"bidi\\u202etxt.md"`}, // the same letters, a real backslash
		{"zero\u200bwidth", `"zero\u200bwidth"`},
		{"new\nline.md", `"new\nline.md"`},
		{"tab\there", `"tab\there"`},
		{"esc\x1b[31m", `"esc\x1b[31m"`},
		{"\xff.txt", `"\xff.txt"`},
		{`"quoted"`, `"\"quoted\""`},
		{"filler\u3164", `"filler\u3164"`},
		{"", `""`},
	}
	seen := map[string]string{}
	for _, c := range cases {
		got := showName(c.name)
		if got != c.want {
			t.Errorf("showName(%q) = %s, want %s", c.name, got, c.want)
		}
		if back, err := nameArg(got); err != nil || back != c.name {
			t.Errorf("nameArg(%s) = %q, %v; want %q", got, back, err, c.name)
		}
		if prev, ok := seen[got]; ok {
			t.Errorf("%q and %q both show as %s", prev, c.name, got)
		}
		seen[got] = c.name
	}
	if _, err := nameArg(`"bad \q escape"`); !errors.Is(err, tool.ErrPathInvalid) || !strings.Contains(err.Error(), "copy the name exactly") {
		t.Errorf("nameArg of a bad literal = %v", err)
	}
}

// FuzzShowName: every name is shown on one line, as valid UTF-8 with
// nothing a reader cannot see, and names the same file given back.
func FuzzShowName(f *testing.F) {
	for _, s := range []string{"a", "bidi\u202etxt.md", `"x"`, "a\nb", "\xff", `\`, "a:1:b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got := showName(name)
		if !utf8.ValidString(got) || strings.ContainsAny(got, "\n\r\t") || termsafe.Line(got) != got {
			t.Fatalf("showName(%q) = %q: not one visible line", name, got)
		}
		back, err := nameArg(got)
		if err != nil || back != name {
			t.Fatalf("nameArg(showName(%q)) = %q, %v", name, back, err)
		}
		if q := quoteName(name); !strings.HasPrefix(q, `"`) {
			t.Fatalf("quoteName(%q) = %q", name, q)
		}
	})
}
