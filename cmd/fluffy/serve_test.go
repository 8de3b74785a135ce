package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	scriptCmds["http-get"] = httpGet
}

// httpGet is "http-get ADDR PATH": GET PATH from ADDR (host:port, or
// unix:/path as serve.health takes it), waiting up to 30s for the server
// to listen; stdout gets the status code on the first line, then the
// body.
func httpGet(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: http-get ADDR PATH")
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
		if err == nil || time.Now().After(deadline) {
			break
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
