package builtin

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fluffy-agent/fluffy/internal/tool"
	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

// Names in tool results. A file name is the workspace's, so it may hold
// anything but NUL and slash: a newline would start a line of the listing
// its author controls, a bidirectional override or a zero-width character
// would make two names look alike. A name that holds any of these, or a
// quote or backslash, is shown as a Go string literal, the way git quotes
// such paths (git.status, git.diff), with every such character escaped
// as internal/tui/termsafe escapes it ("bidi\u202etxt.md", "a\nb",
// "\xff.txt"); every other name is shown as it is. A quoted name given
// back as a path argument names the same file (nameArg), so the model can
// address each file it was shown, however alike two names look.

// showName returns name as the tools show it: raw when plain, quoted
// otherwise.
func showName(name string) string {
	if plainName(name) {
		return name
	}
	return quoteName(name)
}

var quoteEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`)

// quoteName writes name as a Go string literal whose escapes are
// termsafe's; strconv.Unquote gives name back.
func quoteName(name string) string {
	return `"` + termsafe.Line(quoteEscaper.Replace(name)) + `"`
}

// plainName reports whether name can be shown raw: printable, visible,
// valid UTF-8, without quotes or backslashes (which would make it read
// as a quoted name or an escape).
func plainName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); {
		c := name[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f || c == '"' || c == '\\' {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(name[i:])
		if r == utf8.RuneError && n == 1 || termsafe.Hidden(r) {
			return false
		}
		i += n
	}
	return true
}

// nameArg decodes a path argument: one in double quotes is a quoted name
// as showName writes it (or git quotes it) and stands for the name it
// decodes to; any other is the name itself.
func nameArg(raw string) (string, error) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return raw, nil
	}
	s, err := strconv.Unquote(raw)
	if err != nil {
		return "", fmt.Errorf("%w %s: a path in double quotes is a quoted name, as the tools show names with unusual characters (Go string syntax: \\u202e, \\x1b, \\n, \\\\, \\\"), and this one does not decode (%v); copy the name exactly as it was shown",
			tool.ErrPathInvalid, termsafe.Line(raw), err)
	}
	return s, nil
}
