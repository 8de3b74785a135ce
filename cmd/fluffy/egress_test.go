package main

import (
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

// scriptCmds are extra testscript commands.
var scriptCmds = map[string]func(ts *testscript.TestScript, neg bool, args []string){
	"egress-servers": egressServers,
}

// egressServers starts an HTTP and an HTTPS test server on the host's
// 127.0.0.1 for the rest of the script and sets HTTP_URL, HTTP_HOSTPORT,
// HTTP_PORT, HTTPS_URL, HTTPS_HOSTPORT; ca.pem (in the current directory) is the HTTPS server's
// certificate, for the sandbox to trust. Paths: / answers "hello from the
// host"; /big sends 1 MiB with a Content-Length; /stream sends 1 MiB
// without one; /slow answers after 10 s.
func egressServers(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: egress-servers")
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Content-Length", fmt.Sprint(1<<20))
			w.Write(make([]byte, 1<<20))
		case "/stream":
			for range 64 {
				w.Write(make([]byte, 16<<10))
				w.(http.Flusher).Flush()
			}
		case "/slow":
			select {
			case <-time.After(10 * time.Second):
			case <-r.Context().Done():
			}
		default:
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "hello from the host (%s %s, %d bytes)\n", r.Method, r.Host, len(b))
		}
	})
	plain := httptest.NewServer(h)
	tls := httptest.NewTLSServer(h)
	ts.Defer(plain.Close)
	ts.Defer(tls.Close)
	u, _ := url.Parse(plain.URL)
	ts.Setenv("HTTP_URL", plain.URL)
	ts.Setenv("HTTP_HOSTPORT", u.Host)
	ts.Setenv("HTTP_PORT", u.Port())
	u, _ = url.Parse(tls.URL)
	ts.Setenv("HTTPS_URL", tls.URL)
	ts.Setenv("HTTPS_HOSTPORT", u.Host)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tls.Certificate().Raw})
	if err := os.WriteFile(ts.MkAbs("ca.pem"), ca, 0o644); err != nil {
		ts.Fatalf("%v", err)
	}
}
