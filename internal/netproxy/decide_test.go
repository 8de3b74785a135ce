package netproxy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestDecide: a request no Allow rule matches is put to Options.Decide,
// whose verdict is final: allowed requests reach the upstream and are
// recorded under the verdict's rule; refusals are 403s naming the rule
// and carrying the reason; an allowed name resolving to loopback is still
// refused (only an exact IP literal may be loopback).
func TestDecide(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello")
	}))
	defer up.Close()
	p := port(t, up.URL)
	var mu sync.Mutex
	var asked []string
	decide := func(_ context.Context, host string, port int) Verdict {
		mu.Lock()
		asked = append(asked, fmt.Sprintf("%s:%d", host, port))
		mu.Unlock()
		switch host {
		case "127.0.0.1", "loop.example.com":
			return Verdict{Allow: true, Rule: "local-api"}
		case "listed.example.com":
			return Verdict{Allow: false, Rule: "should-not-be-asked"}
		}
		return Verdict{Rule: "no-net", Reason: "ask for it with request_approval"}
	}
	res := fakeResolver{"loop.example.com": {"127.0.0.1"}, "listed.example.com": {"127.0.0.1"}}
	e := startProxy(t, Options{Resolver: res, Decide: decide}, "listed.example.com:1")

	resp, body := e.raw(t, "GET http://127.0.0.1:"+p+"/ HTTP/1.1\r\nHost: 127.0.0.1:"+p+"\r\n\r\n")
	if resp.StatusCode != 200 || body != "hello" {
		t.Fatalf("allowed literal: %d %q", resp.StatusCode, body)
	}
	resp, body = e.raw(t, "GET http://other.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n")
	if resp.StatusCode != 403 || resp.Header.Get("X-Fluffy-Egress-Rule") != "no-net" || !strings.Contains(body, "request_approval") {
		t.Fatalf("refused: %d %s %q", resp.StatusCode, resp.Header.Get("X-Fluffy-Egress-Rule"), body)
	}
	resp, _ = e.raw(t, "GET http://loop.example.com:"+p+"/ HTTP/1.1\r\nHost: loop.example.com:"+p+"\r\n\r\n")
	if resp.StatusCode != 403 || resp.Header.Get("X-Fluffy-Egress-Rule") != "address:loopback" {
		t.Fatalf("allowed name resolving to loopback: %d %s", resp.StatusCode, resp.Header.Get("X-Fluffy-Egress-Rule"))
	}
	// An Allow rule decides without asking.
	resp, _ = e.raw(t, "GET http://listed.example.com:1/ HTTP/1.1\r\nHost: listed.example.com:1\r\n\r\n")
	if resp.StatusCode != 403 || resp.Header.Get("X-Fluffy-Egress-Rule") != "address:loopback" {
		t.Fatalf("allow-listed: %d %s", resp.StatusCode, resp.Header.Get("X-Fluffy-Egress-Rule"))
	}
	// The records are matched by host: an allowed request's record is
	// written after its answer, so it may follow the next request's.
	recs := e.rec.wait(t, 4)
	byHost := map[string]Record{}
	for _, r := range recs {
		byHost[r.Host] = r
	}
	if r := byHost["127.0.0.1"]; r.Rule != "local-api" || r.Decision != Allowed {
		t.Fatalf("allowed literal recorded as %+v (all: %+v)", r, recs)
	}
	if r := byHost["other.test"]; r.Rule != "no-net" || r.Decision != Denied {
		t.Fatalf("refusal recorded as %+v (all: %+v)", r, recs)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"127.0.0.1:" + p, "other.test:80", "loop.example.com:" + p}
	if strings.Join(asked, " ") != strings.Join(want, " ") {
		t.Fatalf("asked %v, want %v", asked, want)
	}
}
