package webhook

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/txtar"
)

type vector struct {
	name, scheme, secret, header string
	t                            int64
	body                         []byte
}

// loadVectors reads testdata/vectors.txtar (computed with openssl, see
// its comment).
func loadVectors(t *testing.T) []vector {
	t.Helper()
	a, err := txtar.ParseFile("testdata/vectors.txtar")
	if err != nil {
		t.Fatal(err)
	}
	bodies := map[string][]byte{}
	for _, f := range a.Files {
		if name, ok := strings.CutSuffix(f.Name, ".body"); ok {
			bodies[name] = bytes.TrimSuffix(f.Data, []byte("\n"))
		}
	}
	var vs []vector
	for _, f := range a.Files {
		name, ok := strings.CutSuffix(f.Name, ".case")
		if !ok {
			continue
		}
		v := vector{name: name, body: bodies[name]}
		for line := range strings.Lines(string(f.Data)) {
			k, val, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
			switch k {
			case "scheme":
				v.scheme = val
			case "secret":
				v.secret = val
			case "header":
				v.header = val
			case "t":
				v.t, err = strconv.ParseInt(val, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		vs = append(vs, v)
	}
	if len(vs) < 5 {
		t.Fatalf("only %d vectors", len(vs))
	}
	return vs
}

// TestSignatureVectors checks the signers and verifiers against
// signatures computed by openssl, GitHub's published example among them.
func TestSignatureVectors(t *testing.T) {
	for _, v := range loadVectors(t) {
		t.Run(v.name, func(t *testing.T) {
			switch v.scheme {
			case SchemeGitHub:
				if got := SignGitHub([]byte(v.secret), v.body); got != v.header {
					t.Errorf("SignGitHub = %s, want %s", got, v.header)
				}
				if _, err := VerifyGitHub([]byte(v.secret), v.body, v.header); err != nil {
					t.Errorf("VerifyGitHub: %v", err)
				}
			case SchemeFluffy:
				at := time.Unix(v.t, 0)
				if got := SignFluffy([]byte(v.secret), v.body, at); got != v.header {
					t.Errorf("SignFluffy = %s, want %s", got, v.header)
				}
				if _, err := VerifyFluffy([]byte(v.secret), v.body, v.header, at.Add(time.Minute), 5*time.Minute); err != nil {
					t.Errorf("VerifyFluffy: %v", err)
				}
			default:
				t.Fatalf("scheme %q", v.scheme)
			}
		})
	}
}

func TestVerify(t *testing.T) {
	secret := []byte("s3cr3t-0123456789abcdef")
	body := []byte(`{"a":1}`)
	now := time.Unix(1767225600, 0)
	window := 5 * time.Minute
	gh := SignGitHub(secret, body)
	fl := SignFluffy(secret, body, now)
	tests := []struct {
		name   string
		scheme string
		secret []byte
		body   []byte
		header string
		now    time.Time
		want   error
	}{
		{"github valid", SchemeGitHub, secret, body, gh, now, nil},
		{"github tampered body", SchemeGitHub, secret, []byte(`{"a":2}`), gh, now, ErrBadSignature},
		{"github body with a trailing newline", SchemeGitHub, secret, append(body, '\n'), gh, now, ErrBadSignature},
		{"github wrong secret", SchemeGitHub, []byte("other-secret-0123456789"), body, gh, now, ErrBadSignature},
		{"github missing header", SchemeGitHub, secret, body, "", now, ErrNoSignature},
		{"github sha1 form", SchemeGitHub, secret, body, "sha1=" + gh[7:47], now, ErrMalformedSignature},
		{"github upper-case hex", SchemeGitHub, secret, body, "sha256=" + strings.ToUpper(gh[7:]), now, ErrMalformedSignature},
		{"github short hex", SchemeGitHub, secret, body, gh[:len(gh)-2], now, ErrMalformedSignature},
		{"github trailing space", SchemeGitHub, secret, body, gh + " ", now, ErrMalformedSignature},
		{"github bare hex", SchemeGitHub, secret, body, gh[7:], now, ErrMalformedSignature},
		{"github one digit flipped", SchemeGitHub, secret, body, flipLast(gh), now, ErrBadSignature},
		{"fluffy valid", SchemeFluffy, secret, body, fl, now, nil},
		{"fluffy valid at the window's edge", SchemeFluffy, secret, body, fl, now.Add(window), nil},
		{"fluffy old timestamp", SchemeFluffy, secret, body, fl, now.Add(window + time.Second), ErrStale},
		{"fluffy future timestamp", SchemeFluffy, secret, body, fl, now.Add(-window - time.Second), ErrStale},
		{"fluffy old and badly signed", SchemeFluffy, []byte("other-secret-0123456789"), body, fl, now.Add(time.Hour), ErrBadSignature},
		{"fluffy tampered body", SchemeFluffy, secret, []byte(`{"a":2}`), fl, now, ErrBadSignature},
		{"fluffy wrong secret", SchemeFluffy, []byte("other-secret-0123456789"), body, fl, now, ErrBadSignature},
		{"fluffy timestamp moved", SchemeFluffy, secret, body, strings.Replace(fl, "t=1767225600", "t=1767225601", 1), now, ErrBadSignature},
		{"fluffy missing header", SchemeFluffy, secret, body, "", now, ErrNoSignature},
		{"fluffy github form", SchemeFluffy, secret, body, gh, now, ErrMalformedSignature},
		{"fluffy keys swapped", SchemeFluffy, secret, body, "v1=" + fl[strings.Index(fl, "v1=")+3:] + ",t=1767225600", now, ErrMalformedSignature},
		{"fluffy space after comma", SchemeFluffy, secret, body, strings.Replace(fl, ",", ", ", 1), now, ErrMalformedSignature},
		{"fluffy leading zero", SchemeFluffy, secret, body, strings.Replace(fl, "t=", "t=0", 1), now, ErrMalformedSignature},
		{"fluffy negative", SchemeFluffy, secret, body, strings.Replace(fl, "t=", "t=-", 1), now, ErrMalformedSignature},
		{"fluffy second v1", SchemeFluffy, secret, body, fl + ",v1=" + fl[strings.Index(fl, "v1=")+3:], now, ErrMalformedSignature},
		{"fluffy no timestamp", SchemeFluffy, secret, body, fl[strings.Index(fl, "v1="):], now, ErrMalformedSignature},
		{"fluffy timestamp overflow", SchemeFluffy, secret, body, "t=99999999999999999999," + fl[strings.Index(fl, "v1="):], now, ErrMalformedSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.scheme == SchemeGitHub {
				_, err = VerifyGitHub(tt.secret, tt.body, tt.header)
			} else {
				_, err = VerifyFluffy(tt.secret, tt.body, tt.header, tt.now, window)
			}
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func flipLast(s string) string {
	c := s[len(s)-1]
	if c == '0' {
		c = '1'
	} else {
		c = '0'
	}
	return s[:len(s)-1] + string(c)
}

// FuzzParseFluffySignature checks that the parser never panics and takes
// only the canonical form: what it accepts formats back to the very same
// header, so no signature has two spellings.
func FuzzParseFluffySignature(f *testing.F) {
	f.Add(SignFluffy([]byte("k"), []byte("{}"), time.Unix(1767225600, 0)))
	f.Add("t=0,v1=" + strings.Repeat("ab", 32))
	f.Add("t=1,v1=" + strings.Repeat("AB", 32))
	f.Add("v1=00,t=1")
	f.Add("t=1,v1=00,v1=00")
	f.Add("")
	f.Fuzz(func(t *testing.T, h string) {
		s, err := ParseFluffySignature(h)
		if err != nil {
			if !errors.Is(err, ErrMalformedSignature) {
				t.Fatalf("error %v does not match ErrMalformedSignature", err)
			}
			return
		}
		if got := FormatFluffySignature(s); got != h {
			t.Fatalf("accepted %q, which formats as %q", h, got)
		}
	})
}

// FuzzParseGitHubSignature checks the same for X-Hub-Signature-256.
func FuzzParseGitHubSignature(f *testing.F) {
	f.Add(SignGitHub([]byte("k"), []byte("{}")))
	f.Add("sha256=" + strings.Repeat("AB", 32))
	f.Add("sha1=00")
	f.Fuzz(func(t *testing.T, h string) {
		m, err := ParseGitHubSignature(h)
		if err != nil {
			if !errors.Is(err, ErrMalformedSignature) {
				t.Fatalf("error %v does not match ErrMalformedSignature", err)
			}
			return
		}
		if got := "sha256=" + hex.EncodeToString(m); got != h {
			t.Fatalf("accepted %q, which formats as %q", h, got)
		}
	})
}

func BenchmarkVerify(b *testing.B) {
	secret := []byte("s3cr3t-0123456789abcdef")
	now := time.Unix(1767225600, 0)
	for _, size := range []int{1 << 10, 64 << 10, 1 << 20} {
		body := bytes.Repeat([]byte("x"), size)
		gh := SignGitHub(secret, body)
		fl := SignFluffy(secret, body, now)
		b.Run("github/"+strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, err := VerifyGitHub(secret, body, gh); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("fluffy/"+strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, err := VerifyFluffy(secret, body, fl, now, time.Minute); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
