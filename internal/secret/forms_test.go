package secret

import (
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
)

// TestFormsCatchEncodings: every common encoding of a value, alone or
// inside longer text at any alignment, contains one of its forms.
func TestFormsCatchEncodings(t *testing.T) {
	v := []byte("s3cr3t/value+with=odd?chars&more")
	forms := Forms(v)
	has := func(s string) bool {
		for _, f := range forms {
			if strings.Contains(s, f) {
				return true
			}
		}
		return false
	}
	for _, pre := range []string{"", "a", "ab", "abc", "Authorization: "} {
		plain := pre + string(v) + "\n"
		for name, enc := range map[string]string{
			"raw":        plain,
			"std":        base64.StdEncoding.EncodeToString([]byte(plain)),
			"raw std":    base64.RawStdEncoding.EncodeToString([]byte(plain)),
			"url":        base64.URLEncoding.EncodeToString([]byte(plain)),
			"raw url":    base64.RawURLEncoding.EncodeToString([]byte(plain)),
			"hex":        hex.EncodeToString([]byte(plain)),
			"HEX":        strings.ToUpper(hex.EncodeToString([]byte(plain))),
			"query":      url.QueryEscape(plain),
			"path":       url.PathEscape(plain),
			"std inline": "data=" + base64.StdEncoding.EncodeToString([]byte(plain)) + ";",
		} {
			if !has(enc) {
				t.Errorf("prefix %q, %s: %q contains no form", pre, name, enc)
			}
		}
	}
}

func TestFormsLongestFirst(t *testing.T) {
	f := Forms([]byte("0123456789abcdef"))
	for i := 1; i < len(f); i++ {
		if len(f[i]) > len(f[i-1]) {
			t.Fatalf("form %d (%q) is longer than form %d (%q)", i, f[i], i-1, f[i-1])
		}
	}
	if Forms(nil) != nil {
		t.Error("Forms(nil) is not nil")
	}
}

// TestPercentIsNetURL: the URL forms are net/url's escapings, byte for
// byte, for every byte value.
func TestPercentIsNetURL(t *testing.T) {
	var all []byte
	for c := 0; c < 256; c++ {
		all = append(all, byte(c))
	}
	for _, v := range [][]byte{all, []byte("a b/c?d=e&f+g@h:i;j,k$l"), []byte("plain")} {
		if got, want := string(percent(v, true)), url.QueryEscape(string(v)); got != want {
			t.Errorf("query: %q, want %q", got, want)
		}
		if got, want := string(percent(v, false)), url.PathEscape(string(v)); got != want {
			t.Errorf("path: %q, want %q", got, want)
		}
	}
}
