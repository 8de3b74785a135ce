package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	scriptCmds["http-get"] = httpGet
	scriptCmds["http-post"] = httpPost
	scriptCmds["env-from-stdout"] = envFromStdout
}

// envFromStdout is "env-from-stdout VAR REGEXP": set VAR to the first
// group of REGEXP's first match in the last command's stdout.
func envFromStdout(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: env-from-stdout VAR REGEXP")
	}
	m := regexp.MustCompile(args[1]).FindStringSubmatch(ts.ReadFile("stdout"))
	if len(m) < 2 {
		ts.Fatalf("env-from-stdout: no match for %q in stdout", args[1])
	}
	ts.Setenv(args[0], m[1])
}

// httpPost is "http-post ADDR PATH HEADERS BODY": POST the file BODY to
// PATH on ADDR (host:port) with the headers in the file HEADERS (lines
// "Name: value", as 'fluffy hook sign' prints them); stdout gets the
// status code on the first line, then the body.
func httpPost(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 4 {
		ts.Fatalf("usage: http-post ADDR PATH HEADERS BODY")
	}
	req, err := http.NewRequest(http.MethodPost, "http://"+args[0]+args[1], strings.NewReader(ts.ReadFile(args[3])))
	ts.Check(err)
	for _, l := range strings.Split(strings.TrimSpace(ts.ReadFile(args[2])), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			ts.Fatalf("http-post: header line %q has no colon", l)
		}
		req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	c := &http.Client{Timeout: 30 * time.Second}
	res, err := c.Do(req)
	ts.Check(err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	ts.Check(err)
	fmt.Fprintf(ts.Stdout(), "%d\n%s", res.StatusCode, b)
}

// httpGet is "http-get [-want CODE] ADDR PATH": GET PATH from ADDR (host:port, or
// unix:/path as serve.health takes it), waiting up to 30s for the server
// to listen; stdout gets the status code on the first line, then the
// body.
func httpGet(ts *testscript.TestScript, neg bool, args []string) {
	// -want CODE asks again until the answer has that status (a daemon
	// just started answers /readyz 503 until its channels connect).
	want := 0
	if len(args) == 4 && args[0] == "-want" {
		n, err := strconv.Atoi(args[1])
		if err != nil {
			ts.Fatalf("http-get: -want %q: %v", args[1], err)
		}
		want, args = n, args[2:]
	}
	if len(args) != 2 {
		ts.Fatalf("usage: http-get [-want CODE] ADDR PATH")
	}
	addr, path := args[0], args[1]
	network, host := "tcp", addr
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		network, host = "unix", p
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, host)
		}}}
	var res *http.Response
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; {
		res, err = c.Get("http://fluffy" + path)
		if time.Now().After(deadline) || (err == nil && (want == 0 || res.StatusCode == want)) {
			break
		}
		if err == nil {
			res.Body.Close()
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		if neg {
			return
		}
		ts.Fatalf("http-get: %v", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		ts.Fatalf("http-get: %v", err)
	}
	fmt.Fprintf(ts.Stdout(), "%d\n%s", res.StatusCode, b)
	if neg {
		ts.Fatalf("http-get: got an answer, want none")
	}
}
