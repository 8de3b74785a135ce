package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	scriptCmds["browse"] = browse
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
		b.c = &http.Client{Jar: jar, Timeout: 30 * time.Second}
	}
	base := "http://" + ts.Getenv("WEB")
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
