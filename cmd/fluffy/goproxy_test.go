package main

import (
	"net"
	"net/http"
	"net/http/httptest"

	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	scriptCmds["goproxy-serve"] = goProxyServe
}

// goProxyServe DIR serves the file-system module proxy DIR (see
// gomodproxy) over HTTP for the rest of the script, as a stand-in for a
// module proxy host, and sets GOPROXY_URL and GOPROXY_HOSTPORT; a second
// server, OTHER_URL and OTHER_HOSTPORT, stands for a host nobody named.
// Both listen on one of the machine's own non-loopback IPv4 addresses:
// the go command never sends a request for a loopback address through a
// proxy, so a sandbox reaches a module proxy on its host only by such an
// address (named exactly, an IP literal is allowed to be private). It
// fails on a machine that has none.
func goProxyServe(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: goproxy-serve DIR")
	}
	ip := localIPv4()
	if ip == "" {
		ts.Fatalf("no non-loopback IPv4 address to serve the stand-in module proxy on")
	}
	serve := func(h http.Handler, name string) {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		ts.Check(err)
		s := httptest.NewUnstartedServer(h)
		s.Listener.Close()
		s.Listener = ln
		s.Start()
		ts.Defer(s.Close)
		ts.Setenv(name+"_URL", s.URL)
		ts.Setenv(name+"_HOSTPORT", ln.Addr().String())
	}
	serve(http.FileServer(http.Dir(ts.MkAbs(args[0]))), "GOPROXY")
	serve(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("the other host\n")) }), "OTHER")
}

// localIPv4 is one of the machine's non-loopback IPv4 addresses, or "".
func localIPv4() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}
