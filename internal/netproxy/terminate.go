package netproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// terminate serves a CONNECT to a host a TLS swap is bound to: instead of
// a tunnel, the proxy completes the sandbox's TLS handshake with a
// certificate of its own CA for t, reads each request inside, and sends
// it to t over a TLS connection of its own (verifying the server's
// certificate) with the bound secrets swapped in. Each inner request is
// audited as a request of its own (TLS set); rec, the CONNECT's, gets the
// totals of the connection when it ends.
func (p *Proxy) terminate(c net.Conn, br *bufio.Reader, bw *bufio.Writer, t target, rule Rule, rec Record) {
	ctx, cancel := context.WithTimeout(p.ctx, p.lim.MaxDuration)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	leaf, err := p.ca.leaf(t.host)
	if err != nil {
		writeRefusal(bw, http.StatusBadGateway, &DeniedError{Rule: "tls", Reason: err.Error()})
		rec.Status, rec.Err = http.StatusBadGateway, err.Error()
		p.record(rec)
		return
	}
	rec.Status = http.StatusOK
	bw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
	if err := bw.Flush(); err != nil {
		rec.Err = "client gone: " + err.Error()
		p.record(rec)
		return
	}
	// Bytes the client pipelined behind CONNECT sit in br.
	cc := &countConn{Conn: c, r: br}
	tc := tls.Server(cc, &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"},
	})
	defer func() {
		rec.BytesUp, rec.BytesDown = cc.in.Load(), cc.out.Load()
		p.record(rec)
	}()
	c.SetDeadline(time.Now().Add(p.lim.HeaderTimeout))
	if err := tc.HandshakeContext(ctx); err != nil {
		rec.Err = "TLS handshake with the sandbox: " + err.Error()
		return
	}
	c.SetDeadline(time.Time{})
	tbr := bufio.NewReaderSize(tc, p.lim.MaxHeaderBytes)
	tbw := bufio.NewWriter(tc)
	for first := true; ; first = false {
		wait := p.lim.HeaderTimeout
		if !first {
			wait = p.lim.IdleTimeout
		}
		c.SetReadDeadline(time.Now().Add(wait))
		if _, err := tbr.Peek(1); err != nil {
			break
		}
		c.SetReadDeadline(time.Now().Add(p.lim.HeaderTimeout))
		start := time.Now()
		in := Record{Time: start, Method: "?", Host: t.host, Port: t.port, TLS: true}
		hosts, err := peekHostHeaders(tbr)
		var req *http.Request
		if err == nil {
			req, err = http.ReadRequest(tbr)
		}
		if err != nil {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				p.deny(tbw, in, http.StatusBadRequest, &DeniedError{Rule: "bad-request", Reason: err.Error()})
			}
			break
		}
		c.SetReadDeadline(time.Time{})
		in.Method = req.Method
		if req.URL.Host != "" || req.Method == http.MethodConnect {
			p.deny(tbw, in, http.StatusBadRequest, &DeniedError{Rule: "bad-request",
				Reason: "inside a TLS connection to " + t.hostPort() + " send origin-form requests (GET /path)"})
			break
		}
		if d := checkHost(hosts, t); d != nil {
			p.deny(tbw, in, http.StatusBadRequest, d)
			break
		}
		if err := p.auditFailure(); err != nil {
			auditRefusal(tbw)
			break
		}
		in.Rule = rec.Rule
		if !p.relay(tc, tbw, req, t, rule, in, "https") {
			break
		}
	}
	tc.Close()
}

// countConn reads through r (a buffered reader on Conn) and counts the
// bytes each way.
type countConn struct {
	net.Conn
	r       *bufio.Reader
	in, out atomic.Int64
}

func (c *countConn) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.in.Add(int64(n))
	return n, err
}

func (c *countConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.out.Add(int64(n))
	return n, err
}
