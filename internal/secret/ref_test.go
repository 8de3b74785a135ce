package secret

import (
	"errors"
	"strings"
	"testing"
)

func TestParseRef(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Ref
		str  string
	}{
		{"secret://env/TOKEN", Ref{"env", "TOKEN"}, "secret://env/TOKEN"},
		{"env:TOKEN", Ref{"env", "TOKEN"}, "secret://env/TOKEN"},
		{"file:/run/k", Ref{"file", "/run/k"}, "secret://file/run/k"},
		{"secret://file/run/k", Ref{"file", "/run/k"}, "secret://file/run/k"},
		{"secret://file//run/../run/k", Ref{"file", "/run/k"}, "secret://file/run/k"},
		{"file:~/k", Ref{"file", "~/k"}, "file:~/k"},
		{"file:deploy.key", Ref{"file", "deploy.key"}, "file:deploy.key"},
		{"secret://file/~/k", Ref{"file", "~/k"}, "file:~/k"},
		{"secret://age/github-token", Ref{"age", "github-token"}, "secret://age/github-token"},
		{"secret://bitwarden/My Item/api key", Ref{"bitwarden", "My Item/api key"}, "secret://bitwarden/My Item/api key"},
	} {
		got, err := ParseRef(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseRef(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
			continue
		}
		if got.String() != c.str {
			t.Errorf("%q.String() = %q, want %q", c.in, got.String(), c.str)
		}
	}
}

func TestParseRefErrors(t *testing.T) {
	for _, in := range []string{"", "secret://env", "secret://ENV/X", "secret://env/", "env:", "secret://env/a\nb", "ghp_abcdefabcdefabcdef"} {
		_, err := ParseRef(in)
		if !errors.Is(err, ErrRef) {
			t.Errorf("ParseRef(%q) = %v, want ErrRef", in, err)
		}
	}
	// A value pasted where its reference belongs is never echoed.
	_, err := ParseRef("ghp_abcdefabcdefabcdef")
	if strings.Contains(err.Error(), "ghp_") {
		t.Errorf("the error shows the value: %v", err)
	}
}
