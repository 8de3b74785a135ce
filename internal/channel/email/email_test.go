package email

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/smtp"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"

	"github.com/fluffy-agent/fluffy/internal/channel"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/units"
)

const (
	rcpt   = "assistant@example.org"
	person = "me@example.org"
)

// sink records what the channel hands the daemon.
type sink struct {
	mu        sync.Mutex
	delivered []channel.Inbound
	refused   []channel.Refusal
	ready     chan struct{}
	// deliverErr, when set, is what Deliver returns.
	deliverErr error
}

func newSink() *sink { return &sink{ready: make(chan struct{}, 1)} }

func (s *sink) Deliver(_ context.Context, in channel.Inbound) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deliverErr != nil {
		return "", s.deliverErr
	}
	s.delivered = append(s.delivered, in)
	return fmt.Sprintf("s%d", len(s.delivered)), nil
}

func (s *sink) Answer(context.Context, channel.Answer) error { return errors.New("not used") }

func (s *sink) Ready(name string, ready bool, _ error) {
	if ready && name == Name {
		s.ready <- struct{}{}
	}
}

func (s *sink) Record(_ context.Context, r channel.Refusal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refused = append(s.refused, r)
	return nil
}

func (s *sink) got() ([]channel.Inbound, []channel.Refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]channel.Inbound(nil), s.delivered...), append([]channel.Refusal(nil), s.refused...)
}

func testConfig() config.Email {
	return config.Email{
		Listen:         "127.0.0.1:0",
		Address:        rcpt,
		AllowedSenders: []string{person, "other@Example.NET"},
		MaxSize:        64 << 10,
	}
}

// start runs a channel on a free loopback port until the test ends and
// returns its address and its state directory.
func start(t *testing.T, cfg config.Email, s *sink) (addr, state string) {
	t.Helper()
	state = t.TempDir()
	c, err := New(cfg, Options{StateDir: state, Clock: func() time.Time { return time.Date(2026, 11, 27, 18, 0, 0, 0, time.UTC) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, s) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-s.ready:
	case err := <-done:
		t.Fatalf("Run returned before it was ready: %v", err)
	}
	return c.Addr().String(), state
}

// send sends raw with Go's SMTP client and returns the server's answer to
// the whole transaction (nil: accepted).
func send(t *testing.T, addr, from string, to []string, raw string) error {
	t.Helper()
	return smtp.SendMail(addr, nil, from, to, []byte(strings.ReplaceAll(raw, "\n", "\r\n")))
}

const plainMail = `From: Me <me@example.org>
To: assistant@example.org
Subject: the report
Message-ID: <m1@example.org>
Date: Fri, 27 Nov 2026 18:00:00 +0000
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="b1"

--b1
Content-Type: text/plain; charset=utf-8

Please summarise the attached figures.
--b1
Content-Type: text/csv
Content-Disposition: attachment; filename="figures.csv"

a,b
1,2
--b1--
`

func TestAllowedSenderDelivered(t *testing.T) {
	s := newSink()
	addr, state := start(t, testConfig(), s)
	if err := send(t, addr, person, []string{rcpt}, plainMail); err != nil {
		t.Fatal(err)
	}
	got, refused := s.got()
	if len(got) != 1 || len(refused) != 0 {
		t.Fatalf("delivered %d, refused %v; want one delivery", len(got), refused)
	}
	in := got[0]
	want := channel.Conversation{Channel: Name, Room: "m1@example.org", Principal: person}
	if in.Conversation != want {
		t.Errorf("conversation %+v, want %+v", in.Conversation, want)
	}
	if !in.Untrusted || in.Source != "email from me@example.org: the report" {
		t.Errorf("untrusted %v, source %q", in.Untrusted, in.Source)
	}
	if !strings.Contains(in.Text, "Please summarise the attached figures.") || !strings.Contains(in.Text, "Subject: the report") {
		t.Errorf("text %q", in.Text)
	}
	if in.Meta["envelope_from"] != person || in.Meta["message_id"] != "m1@example.org" {
		t.Errorf("meta %v", in.Meta)
	}
	if len(in.Attachments) != 1 {
		t.Fatalf("attachments %+v", in.Attachments)
	}
	a := in.Attachments[0]
	checkAttachment(t, state, a)
	if b, _ := os.ReadFile(a.Path); a.Name != "figures.csv" || a.Type != "text/csv" || strings.ReplaceAll(string(b), "\r\n", "\n") != "a,b\n1,2" {
		t.Errorf("attachment %+v holds %q", a, b)
	}
}

// checkAttachment checks a stored file is where the channel may write,
// named safely, and private.
func checkAttachment(t *testing.T, state string, a channel.Attachment) {
	t.Helper()
	rel, err := filepath.Rel(filepath.Join(state, "attachments"), a.Path)
	if err != nil || strings.HasPrefix(rel, "..") || strings.Count(rel, string(filepath.Separator)) != 1 {
		t.Errorf("attachment %q is not in a message directory under the state directory", a.Path)
	}
	if a.Name != filepath.Base(a.Path) || a.Name == "" || a.Name[0] == '.' || a.Name[0] == '-' || len(a.Name) > maxNameLen || strings.ContainsAny(a.Name, "/\\\x00") {
		t.Errorf("unsafe name %q", a.Name)
	}
	fi, err := os.Lstat(a.Path)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v, want a regular file 0600", a.Path, fi.Mode())
	}
	if fi.Size() != a.Size {
		t.Errorf("%s: size %d, listed %d", a.Path, fi.Size(), a.Size)
	}
}

// messageDirs lists the per-message directories the channel left.
func messageDirs(t *testing.T, state string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(state, "attachments"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestPythonSmtplib(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 is needed (scripts/deps.sh installs it)")
	}
	s := newSink()
	addr, state := start(t, testConfig(), s)
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.CommandContext(t.Context(), py, "testdata/send.py", host, port, person, rcpt)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("send.py: %v\n%s", err, out)
	}
	got, refused := s.got()
	if len(got) != 1 || len(refused) != 0 {
		t.Fatalf("delivered %d, refused %v", len(got), refused)
	}
	in := got[0]
	if !strings.Contains(in.Text, "Sent by smtplib.") || in.Conversation.Principal != person {
		t.Errorf("inbound %+v", in)
	}
	if len(in.Attachments) != 1 || in.Attachments[0].Name != "notes.txt" {
		t.Fatalf("attachments %+v", in.Attachments)
	}
	checkAttachment(t, state, in.Attachments[0])
}

func TestOtherSenderDropped(t *testing.T) {
	s := newSink()
	addr, state := start(t, testConfig(), s)
	mail := strings.ReplaceAll(plainMail, "Me <me@example.org>", "stranger@evil.test")
	// Accepted as far as the sender can tell: nothing says who is
	// allowed.
	if err := send(t, addr, "stranger@evil.test", []string{rcpt}, mail); err != nil {
		t.Fatal(err)
	}
	got, refused := s.got()
	if len(got) != 0 || len(refused) != 1 {
		t.Fatalf("delivered %d, refused %+v; want one refusal", len(got), refused)
	}
	if r := refused[0]; r.Reason != ReasonSenderNotAllowed || r.Principal != "stranger@evil.test" || r.Channel != Name || r.Remote == "" {
		t.Errorf("refusal %+v", r)
	}
	if d := messageDirs(t, state); len(d) != 0 {
		t.Errorf("attachments stored for a dropped message: %v", d)
	}

	// An allowed header From does not make up for the envelope.
	if err := send(t, addr, "stranger@evil.test", []string{rcpt}, plainMail); err != nil {
		t.Fatal(err)
	}
	if got, refused := s.got(); len(got) != 0 || len(refused) != 2 || refused[1].Reason != ReasonSenderNotAllowed {
		t.Fatalf("allowed header From, other envelope: delivered %d, refused %+v", len(got), refused)
	}
}

func TestSpoofedHeaderFromDropped(t *testing.T) {
	for name, from := range map[string]string{
		"other":    "Me <boss@evil.test>",
		"list":     "me@example.org, boss@evil.test",
		"missing":  "",
		"local":    "ME@example.org", // local parts compare exactly
		"garbage":  "<<>>",
		"null env": "me@example.org", // with the null envelope sender below
	} {
		t.Run(name, func(t *testing.T) {
			s := newSink()
			addr, state := start(t, testConfig(), s)
			mail := strings.ReplaceAll(plainMail, "From: Me <me@example.org>\n", "From: "+from+"\n")
			if from == "" {
				mail = strings.ReplaceAll(plainMail, "From: Me <me@example.org>\n", "")
			}
			env := person
			if name == "null env" {
				env = ""
			}
			if err := send(t, addr, env, []string{rcpt}, mail); err != nil {
				t.Fatal(err)
			}
			got, refused := s.got()
			if len(got) != 0 || len(refused) != 1 || refused[0].Reason != ReasonSenderNotAllowed {
				t.Fatalf("delivered %d, refused %+v; want one sender_not_allowed", len(got), refused)
			}
			if d := messageDirs(t, state); len(d) != 0 {
				t.Errorf("attachments stored for a dropped message: %v", d)
			}
		})
	}
}

func TestSenderDomainCaseInsensitive(t *testing.T) {
	s := newSink()
	addr, _ := start(t, testConfig(), s)
	mail := strings.ReplaceAll(plainMail, "Me <me@example.org>", "other@EXAMPLE.net")
	if err := send(t, addr, "other@example.NET", []string{rcpt}, mail); err != nil {
		t.Fatal(err)
	}
	got, refused := s.got()
	if len(got) != 1 || len(refused) != 0 {
		t.Fatalf("delivered %d, refused %+v", len(got), refused)
	}
	if p := got[0].Conversation.Principal; p != "other@example.net" {
		t.Errorf("principal %q, want the domain lower-cased", p)
	}
}

// dial opens a raw SMTP conversation, past the greeting and EHLO, and
// returns the EHLO reply's lines.
func dial(t *testing.T, addr string) (*textproto.Conn, string) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := textproto.NewConn(nc)
	t.Cleanup(func() { c.Close() })
	if _, _, err := c.ReadResponse(220); err != nil {
		t.Fatal(err)
	}
	id, err := c.Cmd("EHLO client.test")
	if err != nil {
		t.Fatal(err)
	}
	c.StartResponse(id)
	defer c.EndResponse(id)
	_, msg, err := c.ReadResponse(250)
	if err != nil {
		t.Fatal(err)
	}
	return c, msg
}

// cmd sends one command and returns the reply's code.
func cmd(t *testing.T, c *textproto.Conn, format string, args ...any) int {
	t.Helper()
	id, err := c.Cmd(format, args...)
	if err != nil {
		t.Fatal(err)
	}
	c.StartResponse(id)
	defer c.EndResponse(id)
	code, _, _ := c.ReadResponse(0)
	return code
}

func TestNotARelay(t *testing.T) {
	s := newSink()
	addr, _ := start(t, testConfig(), s)
	c, ehlo := dial(t, addr)
	if strings.Contains(ehlo, "AUTH") {
		t.Errorf("EHLO offers AUTH:\n%s", ehlo)
	}
	if !strings.Contains(ehlo, fmt.Sprintf("SIZE %d", 64<<10)) {
		t.Errorf("EHLO does not announce the size limit:\n%s", ehlo)
	}
	if code := cmd(t, c, "AUTH PLAIN AG1lAHNlY3JldA=="); code < 500 {
		t.Errorf("AUTH answered %d, want a refusal", code)
	}
	if code := cmd(t, c, "MAIL FROM:<%s>", person); code != 250 {
		t.Fatalf("MAIL: %d", code)
	}
	for _, to := range []string{"someone@elsewhere.test", "root@example.org", "assistant@example.org.evil.test", "assistant@example.org@elsewhere.test"} {
		if code := cmd(t, c, "RCPT TO:<%s>", to); code != 550 {
			t.Errorf("RCPT TO:<%s> answered %d, want 550", to, code)
		}
	}
	if code := cmd(t, c, "RCPT TO:<assistant@EXAMPLE.org>"); code != 250 {
		t.Errorf("RCPT TO the address (domain in capitals) answered %d", code)
	}
}

func TestOversizedRefused(t *testing.T) {
	s := newSink()
	cfg := testConfig()
	cfg.MaxSize = units.Size(4 << 10)
	addr, state := start(t, cfg, s)

	// Announced too large: refused at MAIL, before any data.
	c, _ := dial(t, addr)
	if code := cmd(t, c, "MAIL FROM:<%s> SIZE=%d", person, 1<<20); code != 552 {
		t.Errorf("MAIL with SIZE over the limit answered %d, want 552", code)
	}

	// Not announced: refused once the data passes the limit.
	big := strings.Replace(plainMail, "a,b\n", "a,b\n"+strings.Repeat("0123456789abcdef\n", 512), 1)
	err := send(t, addr, person, []string{rcpt}, big)
	var tpe *textproto.Error
	if !errors.As(err, &tpe) || tpe.Code != 552 {
		t.Fatalf("oversized message: %v, want 552", err)
	}
	got, refused := s.got()
	if len(got) != 0 || len(refused) != 1 || refused[0].Reason != ReasonTooLarge {
		t.Fatalf("delivered %d, refused %+v; want one too_large", len(got), refused)
	}
	if d := messageDirs(t, state); len(d) != 0 {
		t.Errorf("an oversized message left %v", d)
	}
}

func TestAttachmentNames(t *testing.T) {
	s := newSink()
	addr, state := start(t, testConfig(), s)
	long := strings.Repeat("x", 300) + ".pdf"
	names := []string{
		`filename="../../etc/passwd"`,
		`filename="..\\..\\windows\\system.ini"`,
		`filename=".bashrc"`,
		`filename=".."`,
		`filename="-rf"`,
		`filename="` + long + `"`,
		`filename*=utf-8''a%00b.txt`,
		`filename*=utf-8''%E2%80%AEfdp.exe`, // right-to-left override
		`filename="same.txt"`,
		`filename="same.txt"`,
		`filename=""`,
	}
	var b strings.Builder
	b.WriteString("From: me@example.org\nTo: assistant@example.org\nSubject: names\nMIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"b\"\n\n--b\nContent-Type: text/plain\n\nsee attached\n")
	for i, n := range names {
		fmt.Fprintf(&b, "--b\nContent-Type: application/octet-stream\nContent-Disposition: attachment; %s\n\npart %d\n", n, i)
	}
	b.WriteString("--b--\n")
	if err := send(t, addr, person, []string{rcpt}, b.String()); err != nil {
		t.Fatal(err)
	}
	got, _ := s.got()
	if len(got) != 1 {
		t.Fatalf("delivered %d", len(got))
	}
	atts := got[0].Attachments
	if len(atts) != len(names) {
		t.Fatalf("%d attachments for %d parts: %+v", len(atts), len(names), atts)
	}
	seen := map[string]bool{}
	for i, a := range atts {
		checkAttachment(t, state, a)
		if seen[a.Name] {
			t.Errorf("two attachments named %q", a.Name)
		}
		seen[a.Name] = true
		if b, _ := os.ReadFile(a.Path); strings.TrimSpace(string(b)) != fmt.Sprintf("part %d", i) {
			t.Errorf("%s holds %q, want part %d", a.Name, b, i)
		}
	}
	want := []string{"passwd", "system.ini", "bashrc", "attachment-4.bin", "rf", strings.Repeat("x", maxNameLen-4) + ".pdf", "a_b.txt", "fdp.exe", "same.txt", "same-2.txt", "attachment-11.bin"}
	for i, a := range atts {
		if a.Name != want[i] {
			t.Errorf("attachment %d (%s) stored as %q, want %q", i, names[i], a.Name, want[i])
		}
	}
	// Nothing but the message's directory under the state directory.
	err := filepath.WalkDir(state, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && filepath.Dir(filepath.Dir(p)) != filepath.Join(state, "attachments") {
			t.Errorf("a file outside a message directory: %s", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestMalformedMIMERefused(t *testing.T) {
	// Well formed, but nested one level deeper than the channel reads.
	deep := "From: me@example.org\nSubject: deep\nMIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"b0\"\n\n"
	for i := range maxDepth {
		deep += fmt.Sprintf("--b%d\nContent-Type: multipart/mixed; boundary=\"b%d\"\n\n", i, i+1)
	}
	deep += fmt.Sprintf("--b%d\nContent-Type: text/plain\n\ndown here\n", maxDepth)
	for i := maxDepth; i >= 0; i-- {
		deep += fmt.Sprintf("--b%d--\n", i)
	}
	for name, mail := range map[string]string{
		"unterminated": "From: me@example.org\nSubject: x\nMIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"b\"\n\n--b\nContent-Type: text/plain\n\nhalf a message\n",
		"too deep":     deep,
		"bad header":   "From: me@example.org\nthis line is no header\n\nbody\n",
		"bad base64":   "From: me@example.org\nSubject: x\nMIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"b\"\n\n--b\nContent-Type: application/pdf\nContent-Disposition: attachment; filename=x.pdf\nContent-Transfer-Encoding: base64\n\n!!!not base64!!!\n--b--\n",
	} {
		t.Run(name, func(t *testing.T) {
			s := newSink()
			addr, state := start(t, testConfig(), s)
			err := send(t, addr, person, []string{rcpt}, mail)
			var tpe *textproto.Error
			if !errors.As(err, &tpe) || tpe.Code != 554 {
				t.Fatalf("malformed message: %v, want 554", err)
			}
			got, refused := s.got()
			if len(got) != 0 || len(refused) != 1 || refused[0].Reason != ReasonMalformed {
				t.Fatalf("delivered %d, refused %+v; want one malformed", len(got), refused)
			}
			if d := messageDirs(t, state); len(d) != 0 {
				t.Errorf("a malformed message left %v", d)
			}
		})
	}
}

func TestHTMLOnlyAndCharset(t *testing.T) {
	s := newSink()
	addr, state := start(t, testConfig(), s)
	mail := "From: me@example.org\nSubject: =?iso-8859-1?q?Gr=FC=DFe?=\nMIME-Version: 1.0\nContent-Type: multipart/alternative; boundary=\"b\"\n\n" +
		"--b\nContent-Type: text/html; charset=iso-8859-1\nContent-Transfer-Encoding: quoted-printable\n\n" +
		"<html><head><style>p{}</style></head><body><p>Gr=FC=DFe,</p><p>the <b>plan</b></p><script>alert(1)</script></body></html>\n--b--\n"
	if err := send(t, addr, person, []string{rcpt}, mail); err != nil {
		t.Fatal(err)
	}
	got, _ := s.got()
	if len(got) != 1 {
		t.Fatalf("delivered %d", len(got))
	}
	in := got[0]
	if !strings.Contains(in.Text, "Grüße,\n\nthe plan") || strings.Contains(in.Text, "alert") || strings.Contains(in.Text, "p{}") || strings.Contains(in.Text, "<") {
		t.Errorf("text %q", in.Text)
	}
	if in.Source != "email from me@example.org: Grüße" {
		t.Errorf("source %q", in.Source)
	}
	if d := messageDirs(t, state); len(d) != 0 {
		t.Errorf("a message without attachments left %v", d)
	}
}

func TestThreadRoom(t *testing.T) {
	s := newSink()
	addr, _ := start(t, testConfig(), s)
	reply := strings.Replace(plainMail, "Message-ID: <m1@example.org>\n", "Message-ID: <m3@example.org>\nIn-Reply-To: <m2@example.org>\nReferences: <root@example.org>\n <m2@example.org>\n", 1)
	answer := strings.Replace(plainMail, "Message-ID: <m1@example.org>\n", "Message-ID: <m4@example.org>\nIn-Reply-To: <m2@example.org>\n", 1)
	none := strings.Replace(plainMail, "Message-ID: <m1@example.org>\n", "", 1)
	for _, m := range []string{reply, answer, none, none} {
		if err := send(t, addr, person, []string{rcpt}, m); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := s.got()
	if len(got) != 4 {
		t.Fatalf("delivered %d", len(got))
	}
	if r := got[0].Conversation.Room; r != "root@example.org" {
		t.Errorf("reply's room %q, want the References root", r)
	}
	if r := got[1].Conversation.Room; r != "m2@example.org" {
		t.Errorf("answer's room %q, want In-Reply-To", r)
	}
	if r2, r3 := got[2].Conversation.Room, got[3].Conversation.Room; r2 == "" || r2 == r3 {
		t.Errorf("messages without ids share room %q/%q", r2, r3)
	}
}

func TestAuthenticationResults(t *testing.T) {
	mail := strings.Replace(plainMail, "From: ",
		"Authentication-Results: evil.test; spf=pass smtp.mailfrom=me@example.org; dkim=pass header.d=example.org\n"+
			"Authentication-Results: mx.example.org;\n spf=softfail smtp.mailfrom=me@example.org;\n dkim=pass header.d=example.org;\n dmarc=fail header.from=example.org\n"+
			"Authentication-Results: mx.example.org; spf=pass smtp.mailfrom=me@example.org; dmarc=pass\n"+
			"From: ", 1)
	for _, tc := range []struct {
		authServ string
		want     map[string]string
	}{
		{"", map[string]string{"spf": "", "dkim": "", "dmarc": ""}},
		{"MX.example.org", map[string]string{"spf": "softfail", "dkim": "pass (example.org)", "dmarc": "fail", "authserv_id": "MX.example.org"}},
	} {
		t.Run("authserv_id="+tc.authServ, func(t *testing.T) {
			s := newSink()
			cfg := testConfig()
			cfg.AuthServID = tc.authServ
			addr, _ := start(t, cfg, s)
			if err := send(t, addr, person, []string{rcpt}, mail); err != nil {
				t.Fatal(err)
			}
			got, _ := s.got()
			if len(got) != 1 {
				t.Fatalf("delivered %d", len(got))
			}
			for k, v := range tc.want {
				if got[0].Meta[k] != v {
					t.Errorf("meta[%s] = %q, want %q (meta %v)", k, got[0].Meta[k], v, got[0].Meta)
				}
			}
		})
	}
}

func TestDeliverFailure(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int // 0: accepted
	}{
		{fmt.Errorf("router: %w", channel.ErrNotAllowed), 0},
		{errors.New("store is closed"), 451},
	} {
		t.Run(fmt.Sprint(tc.err), func(t *testing.T) {
			s := newSink()
			s.deliverErr = tc.err
			addr, state := start(t, testConfig(), s)
			err := send(t, addr, person, []string{rcpt}, plainMail)
			var tpe *textproto.Error
			switch {
			case tc.code == 0 && err != nil:
				t.Errorf("answered %v, want accepted", err)
			case tc.code != 0 && (!errors.As(err, &tpe) || tpe.Code != tc.code):
				t.Errorf("answered %v, want %d", err, tc.code)
			}
			if d := messageDirs(t, state); len(d) != 0 {
				t.Errorf("an undelivered message left %v", d)
			}
		})
	}
}

func TestRunStopsAndSendsNothing(t *testing.T) {
	c, err := New(testConfig(), Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Send(t.Context(), channel.Conversation{}, channel.Outbound{}); !errors.Is(err, channel.ErrCannotSend) {
		t.Errorf("Send: %v", err)
	}
	s := newSink()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, s) }()
	<-s.ready
	// A connection left open does not keep Run from returning.
	nc, err := net.Dial("tcp", c.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := bufio.NewReader(nc).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancel: %v", err)
	}
	if _, err := net.Dial("tcp", c.Addr().String()); err == nil {
		t.Error("still listening after Run returned")
	}
}

func TestRunListenFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := testConfig()
	cfg.Listen = ln.Addr().String()
	c, err := New(cfg, Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(t.Context(), newSink()); err == nil {
		t.Error("Run on a taken port returned nil")
	}
}

func TestListenDefaultsToLoopback(t *testing.T) {
	cfg := testConfig()
	cfg.Listen = ":0"
	c, err := New(cfg, Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s := newSink()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, s) }()
	<-s.ready
	addr := c.Addr().(*net.TCPAddr)
	cancel()
	<-done
	if !addr.IP.IsLoopback() {
		t.Errorf("listen %q bound %v, want loopback", cfg.Listen, addr)
	}
}

// TestReceiveEnforcesSize holds the limit without the SMTP server's: the
// channel counts what it reads itself.
func TestReceiveEnforcesSize(t *testing.T) {
	cfg := testConfig()
	cfg.MaxSize = units.Size(len(plainMail) - 1)
	state := t.TempDir()
	c, err := New(cfg, Options{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	s := newSink()
	err = c.receive(t.Context(), s, envelope{from: person}, strings.NewReader(plainMail))
	if !errors.Is(err, gosmtp.ErrDataTooLarge) {
		t.Errorf("receive: %v, want ErrDataTooLarge", err)
	}
	got, refused := s.got()
	if len(got) != 0 || len(refused) != 1 || refused[0].Reason != ReasonTooLarge {
		t.Errorf("delivered %d, refused %+v; want one too_large", len(got), refused)
	}
	if d := messageDirs(t, state); len(d) != 0 {
		t.Errorf("an oversized message left %v", d)
	}
	cfg.MaxSize = units.Size(len(plainMail))
	if c, err = New(cfg, Options{StateDir: state}); err != nil {
		t.Fatal(err)
	}
	if err := c.receive(t.Context(), s, envelope{from: person}, strings.NewReader(plainMail)); err != nil {
		t.Errorf("a message of exactly max_size: %v", err)
	}
}

// TestChunking sends with BDAT (CHUNKING, which go-smtp offers) rather
// than DATA: the same checks apply.
func TestChunking(t *testing.T) {
	s := newSink()
	addr, _ := start(t, testConfig(), s)
	c, ehlo := dial(t, addr)
	if !strings.Contains(ehlo, "CHUNKING") {
		t.Skip("CHUNKING not offered")
	}
	raw := strings.ReplaceAll(plainMail, "\n", "\r\n")
	for i, from := range []string{person, "stranger@evil.test"} {
		if code := cmd(t, c, "MAIL FROM:<%s>", from); code != 250 {
			t.Fatalf("MAIL: %d", code)
		}
		if code := cmd(t, c, "RCPT TO:<%s>", rcpt); code != 250 {
			t.Fatalf("RCPT: %d", code)
		}
		half := len(raw) / 2
		if err := c.PrintfLine("BDAT %d", half); err != nil {
			t.Fatal(err)
		}
		c.W.WriteString(raw[:half])
		c.W.Flush()
		if _, _, err := c.ReadResponse(250); err != nil {
			t.Fatalf("first chunk: %v", err)
		}
		if err := c.PrintfLine("BDAT %d LAST", len(raw)-half); err != nil {
			t.Fatal(err)
		}
		c.W.WriteString(raw[half:])
		c.W.Flush()
		if _, _, err := c.ReadResponse(250); err != nil {
			t.Fatalf("last chunk: %v", err)
		}
		got, refused := s.got()
		if len(got) != 1 || len(refused) != i {
			t.Fatalf("after message %d: delivered %d, refused %+v", i+1, len(got), refused)
		}
	}
}

// cancelSink ends the channel's context as soon as it is ready: Run
// closes the server before its Serve goroutine may have started.
type cancelSink struct {
	*sink
	cancel context.CancelFunc
}

func (s cancelSink) Ready(name string, ready bool, why error) {
	s.cancel()
	s.sink.Ready(name, ready, why)
}

func TestRunStopsRightAfterReady(t *testing.T) {
	c, err := New(testConfig(), Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx, cancelSink{newSink(), cancel}) }()
		// A liveness bound, not a timing assertion: Run hung in Accept
		// before it closed its listener itself.
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return after its context ended")
		}
	}
}
