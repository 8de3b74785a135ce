package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	scriptCmds["browse"] = browse
	scriptCmds["gencert"] = gencert
}

// gencert is "gencert CERT KEY": a self-signed certificate for
// 127.0.0.1 and localhost, PEM, valid for a day.
func gencert(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: gencert CERT KEY")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ts.Check(err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fluffy test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	ts.Check(err)
	kb, err := x509.MarshalECPrivateKey(key)
	ts.Check(err)
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	ts.Check(os.WriteFile(ts.MkAbs(args[1]), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600))
}

// browsers are the scripts' browsers: a cookie jar and the CSRF token of
// the last page each read.
var browsers sync.Map // *testscript.TestScript → *browser

type browser struct {
	c    *http.Client
	csrf string
}

var csrfMeta = regexp.MustCompile(`<meta name="csrf-token" content="([^"]*)">`)

// browse is a browser for the web console: "browse get URL|PATH",
// "browse post PATH [FIELD=VALUE...]" (from the console's own page:
// Origin set, the last page's CSRF token added), and "browse stream PATH
// N" (read N events of an SSE stream). A PATH goes to $WEB (host:port).
// stdout gets the status code on the first line, then the body.
func browse(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: browse get URL|PATH | browse post PATH [FIELD=VALUE...] | browse stream PATH N")
	}
	v, _ := browsers.LoadOrStore(ts, &browser{})
	b := v.(*browser)
	if b.c == nil {
		jar, _ := cookiejar.New(nil)
		b.c = &http.Client{Jar: jar, Timeout: 30 * time.Second, CheckRedirect: func(req *http.Request, via []*http.Request) error {
			// The login's cookie comes with its redirect.
			if req.Response != nil {
				printCookies(ts, req.Response)
			}
			if len(via) >= 10 {
				return errors.New("too many redirects")
			}
			return nil
		}}
		// $WEB_CA: the console serves HTTPS with that certificate.
		if ca := ts.Getenv("WEB_CA"); ca != "" {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM([]byte(ts.ReadFile(ca))) {
				ts.Fatalf("browse: no certificate in %s", ca)
			}
			b.c.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
		}
	}
	scheme := "http"
	if ts.Getenv("WEB_CA") != "" {
		scheme = "https"
	}
	base := scheme + "://" + ts.Getenv("WEB")
	target := args[1]
	if strings.HasPrefix(target, "/") {
		target = base + target
	}
	var req *http.Request
	var err error
	switch args[0] {
	case "get", "stream":
		req, err = http.NewRequest(http.MethodGet, target, nil)
	case "post":
		form := url.Values{"csrf": {b.csrf}}
		for _, kv := range args[2:] {
			k, val, _ := strings.Cut(kv, "=")
			form.Add(k, val)
		}
		req, err = http.NewRequest(http.MethodPost, target, strings.NewReader(form.Encode()))
		if err == nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", base)
		}
	default:
		ts.Fatalf("browse: unknown action %q", args[0])
	}
	ts.Check(err)
	res, err := b.c.Do(req)
	ts.Check(err)
	defer res.Body.Close()
	var body []byte
	if args[0] == "stream" {
		var n int
		if len(args) != 3 {
			ts.Fatalf("usage: browse stream PATH N")
		}
		_, _ = fmt.Sscan(args[2], &n)
		body = readEvents(res.Body, n)
	} else {
		body, err = io.ReadAll(res.Body)
		ts.Check(err)
	}
	if m := csrfMeta.FindSubmatch(body); m != nil {
		b.csrf = string(m[1])
	}
	fmt.Fprintf(ts.Stdout(), "%d\n%s", res.StatusCode, body)
	printCookies(ts, res)
}

// printCookies writes the cookies res sets to stderr, their values
// replaced: the attributes, as the browser was told them.
func printCookies(ts *testscript.TestScript, res *http.Response) {
	for _, c := range res.Cookies() {
		v := c.Value
		c.Value = "VALUE"
		fmt.Fprintf(ts.Stderr(), "set-cookie: %s\n", c.String())
		c.Value = v
	}
}

// readEvents reads n events (blocks ending in a blank line that name an
// event) from an SSE stream.
func readEvents(r io.Reader, n int) []byte {
	var out strings.Builder
	buf := make([]byte, 4096)
	var pending strings.Builder
	for got := 0; got < n; {
		k, err := r.Read(buf)
		pending.Write(buf[:k])
		for {
			s := pending.String()
			i := strings.Index(s, "\n\n")
			if i < 0 {
				break
			}
			block := s[:i+2]
			pending.Reset()
			pending.WriteString(s[i+2:])
			if strings.Contains(block, "event: ") {
				out.WriteString(block)
				got++
			}
		}
		if err != nil {
			break
		}
	}
	return []byte(out.String())
}
