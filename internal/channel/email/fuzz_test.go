package email

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzReceive feeds raw messages from an allowed sender through
// everything after SMTP: header checks, the MIME walk, attachment
// storage, the Inbound built. Whatever the bytes, nothing panics, every
// stored file is a safe name in its message's directory, and a message
// not delivered leaves no directory behind.
func FuzzReceive(f *testing.F) {
	for _, seed := range []string{
		plainMail,
		"From: me@example.org\n\nhello\n",
		"From: me@example.org\nContent-Type: multipart/mixed; boundary=x\n\n--x\nContent-Disposition: attachment; filename=\"../../a\"\n\nA\n--x--\n",
		"From: me@example.org\nContent-Type: multipart/alternative; boundary=x\n\n--x\nContent-Type: text/html\n\n<p>a</p>\n--x\nContent-Type: text/plain; charset=koi8-r\n\n\xc1\n--x--\n",
		"From: me@example.org\nContent-Type: multipart/mixed; boundary=x\n\n--x\nContent-Type: message/rfc822\n\nFrom: a@b\n\nc\n--x\n",
		"From: =?utf-8?b?bWU=?= <me@example.org>\nReferences: <a@b> <c@d>\nSubject: =?x-unknown?q?x?=\n\nz\n",
	} {
		f.Add([]byte(strings.ReplaceAll(seed, "\n", "\r\n")))
	}
	state := f.TempDir()
	c, err := New(testConfig(), Options{StateDir: state})
	if err != nil {
		f.Fatal(err)
	}
	attachDir := filepath.Join(state, "attachments")
	f.Fuzz(func(t *testing.T, raw []byte) {
		s := newSink()
		err := c.receive(context.Background(), s, envelope{from: person, remote: "127.0.0.1:1"}, bytes.NewReader(raw))
		got, refused := s.got()
		defer func() {
			ents, _ := os.ReadDir(attachDir)
			for _, e := range ents {
				os.RemoveAll(filepath.Join(attachDir, e.Name()))
			}
		}()
		if len(got)+len(refused) != 1 {
			t.Fatalf("delivered %d and refused %d (err %v): want exactly one of them", len(got), len(refused), err)
		}
		if len(got) == 0 {
			if ents, _ := os.ReadDir(attachDir); len(ents) != 0 {
				t.Errorf("a refused message left %d directories", len(ents))
			}
			return
		}
		in := got[0]
		for _, a := range in.Attachments {
			checkAttachment(t, state, a)
		}
		if !utf8.ValidString(in.Text) {
			t.Errorf("text is not UTF-8: %q", in.Text)
		}
		for _, s := range []string{in.Source, in.Conversation.Room, in.Conversation.Principal} {
			if !utf8.ValidString(s) || strings.ContainsFunc(s, unicode.IsControl) || s == "" {
				t.Errorf("label %q is empty, not UTF-8 or holds a control character", s)
			}
		}
	})
}
