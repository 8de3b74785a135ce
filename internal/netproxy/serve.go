package netproxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// serveConn reads requests from one client connection until it closes, a
// request cannot keep the connection alive, or a limit ends it.
func (p *Proxy) serveConn(c net.Conn) {
	br := bufio.NewReaderSize(c, p.lim.MaxHeaderBytes)
	bw := bufio.NewWriter(c)
	for first := true; ; first = false {
		wait := p.lim.HeaderTimeout
		if !first {
			wait = p.lim.IdleTimeout
		}
		c.SetReadDeadline(time.Now().Add(wait))
		if _, err := br.Peek(1); err != nil {
			return // closed, idle or slow: nothing to answer
		}
		if !first {
			// A kept-alive connection's next request has begun: its
			// headers get their own time. (The first request's deadline
			// counts from the connection, not from its first byte.)
			c.SetReadDeadline(time.Now().Add(p.lim.HeaderTimeout))
		}
		start := time.Now()
		hosts, herr := peekHostHeaders(br)
		var req *http.Request
		var err error
		if herr == nil {
			req, err = http.ReadRequest(br)
		} else {
			err = herr
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// A slow client: cut off, nothing more to say.
				p.record(Record{Time: start, Method: "?", Decision: Denied, Rule: "limit:header-timeout",
					Reason: "request headers not received in time"})
				return
			}
			p.deny(bw, Record{Time: start, Method: "?"}, http.StatusBadRequest,
				&DeniedError{Rule: "bad-request", Reason: err.Error()})
			return
		}
		c.SetReadDeadline(time.Time{})
		if req.Method == http.MethodConnect {
			p.handleConnect(c, br, bw, req, hosts, start)
			return
		}
		if !p.handleHTTP(c, bw, req, hosts, start) {
			return
		}
	}
}

// peekHostHeaders returns the Host header values of the request waiting in
// br without consuming it. http.ReadRequest drops the Host header, and a
// proxy must see it to refuse a request whose Host disagrees with its
// target. It fails when the headers do not fit br's buffer.
func peekHostHeaders(br *bufio.Reader) ([]string, error) {
	n := 1
	from := 0 // bytes before this were searched already
	for {
		b, err := br.Peek(n)
		// The header block ends at the first empty line; textproto reads
		// CRLF and bare LF line ends alike, so a blank line is an LF
		// followed by an optional CR and an LF. Searching only the new
		// bytes keeps a client that trickles one byte at a time from
		// costing quadratic time.
		for i := from; i < len(b); i++ {
			if b[i] != '\n' {
				continue
			}
			j := i + 1
			if j < len(b) && b[j] == '\r' {
				j++
			}
			if j < len(b) && b[j] == '\n' {
				return parseHostHeaders(b[:j+1])
			}
		}
		if len(b) > 2 {
			from = len(b) - 2
		}
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return nil, errors.New("request headers too large")
			}
			return nil, err
		}
		if br.Buffered() > n {
			n = br.Buffered()
		} else {
			n++
		}
		if n > br.Size() {
			return nil, errors.New("request headers too large")
		}
	}
}

func parseHostHeaders(head []byte) ([]string, error) {
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
	if _, err := tp.ReadLine(); err != nil {
		return nil, err
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil, err
	}
	// Both framings at once is the classic request-smuggling shape; a
	// proxy must not guess which one the client meant.
	if len(h.Values("Transfer-Encoding")) > 0 && len(h.Values("Content-Length")) > 0 {
		return nil, errors.New("both Transfer-Encoding and Content-Length")
	}
	return h.Values("Host"), nil
}

// checkHost refuses a Host header that names another destination than the
// request target (a proxy must route on the target; a disagreement is an
// attempt to confuse something downstream).
func checkHost(hosts []string, t target) *DeniedError {
	if len(hosts) > 1 {
		return &DeniedError{Rule: "host-mismatch", Reason: "more than one Host header"}
	}
	if len(hosts) == 0 {
		return nil
	}
	ht, err := parseTarget(strings.TrimSpace(hosts[0]), t.defaultPort, false)
	if err != nil || ht.host != t.host || ht.port != t.port {
		return &DeniedError{Rule: "host-mismatch",
			Reason: fmt.Sprintf("Host header %q does not name the request target %s", hosts[0], t.hostPort())}
	}
	return nil
}

// deny answers a refused request and audits it.
func (p *Proxy) deny(bw *bufio.Writer, r Record, status int, d *DeniedError) {
	r.Decision = Denied
	r.Rule = d.Rule
	r.Reason = d.Reason
	r.Status = status
	// The refusal is recorded before it is answered.
	p.record(r)
	writeRefusal(bw, status, d)
}

// auditRefusal answers a request whose decision could not be recorded.
func auditRefusal(bw *bufio.Writer) {
	writeRefusal(bw, http.StatusServiceUnavailable, &DeniedError{Rule: "audit", Reason: "the egress audit log is unavailable"})
}

func writeRefusal(bw *bufio.Writer, status int, d *DeniedError) {
	body := fmt.Sprintf("fluffy egress proxy: refused by rule %q: %s\n", d.Rule, d.Reason)
	fmt.Fprintf(bw, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nX-Fluffy-Egress-Rule: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), d.Rule, len(body), body)
	bw.Flush()
}

// admit runs the checks shared by HTTP and CONNECT: audit health, target,
// Host header, allow-list, then Options.Decide. It returns the rule the
// dial checks addresses under and the name the audit records.
func (p *Proxy) admit(t target, hosts []string) (Rule, string, int, *DeniedError) {
	if err := p.auditFailure(); err != nil {
		return Rule{}, "", http.StatusServiceUnavailable, &DeniedError{Rule: "audit", Reason: "the egress audit log is unavailable"}
	}
	if d := checkHost(hosts, t); d != nil {
		return Rule{}, "", http.StatusBadRequest, d
	}
	if rule, ok := p.opts.Allow.match(t); ok {
		return rule, rule.String(), 0, nil
	}
	if p.opts.Decide == nil {
		return Rule{}, "", http.StatusForbidden, &DeniedError{Rule: "not-allowed",
			Reason: fmt.Sprintf("%s is not on this sandbox's allow-list", t.hostPort())}
	}
	v := p.opts.Decide(p.ctx, t.host, t.port)
	if v.Rule == "" {
		v.Rule = "not-allowed"
	}
	if !v.Allow {
		reason := v.Reason
		if reason == "" {
			reason = fmt.Sprintf("%s is not allowed", t.hostPort())
		}
		return Rule{}, "", http.StatusForbidden, &DeniedError{Rule: v.Rule, Reason: reason}
	}
	// The decision was about exactly this destination: an IP literal is
	// the exact address (see permit), a name keeps the address checks.
	rule := Rule{Host: t.host, IP: t.ip, Port: t.port}
	if t.ip.IsValid() {
		rule.Host = ""
	}
	return rule, v.Rule, 0, nil
}

// hop-by-hop headers, never forwarded either way.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func removeHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// dialInfo carries a checked request into the transport's dial.
type dialInfo struct {
	t    target
	rule Rule
	addr atomic.Pointer[string] // the address connected to
}

type dialKey struct{}

// handleHTTP forwards one absolute-form request. It reports whether the
// client connection may carry another request.
func (p *Proxy) handleHTTP(c net.Conn, bw *bufio.Writer, req *http.Request, hosts []string, start time.Time) bool {
	rec := Record{Time: start, Method: req.Method}
	if req.URL.Host == "" {
		rec.Host = req.Host
		p.deny(bw, rec, http.StatusBadRequest, &DeniedError{Rule: "origin-form",
			Reason: "this is a proxy: send absolute-form requests (GET http://host/path)"})
		return false
	}
	if req.URL.Scheme != "http" {
		rec.Host = req.URL.Host
		p.deny(bw, rec, http.StatusBadRequest, &DeniedError{Rule: "scheme",
			Reason: fmt.Sprintf("scheme %q: use CONNECT for https", req.URL.Scheme)})
		return false
	}
	t, err := parseTarget(req.URL.Host, 80, false)
	if err != nil {
		rec.Host = req.URL.Host
		p.deny(bw, rec, http.StatusBadRequest, &DeniedError{Rule: "bad-request", Reason: err.Error()})
		return false
	}
	rec.Host, rec.Port = t.host, t.port
	rule, ruleName, status, d := p.admit(t, hosts)
	if d != nil {
		p.deny(bw, rec, status, d)
		return false
	}
	rec.Rule = ruleName
	return p.relay(c, bw, req, t, rule, rec, "http")
}

// relay sends one admitted request to t (scheme http, or https for a
// request read inside a TLS connection the proxy terminated) with the
// secrets bound to t swapped in, and relays the answer. It reports
// whether the client connection may carry another request.
func (p *Proxy) relay(c net.Conn, bw *bufio.Writer, req *http.Request, t target, rule Rule, rec Record, scheme string) bool {
	if req.ContentLength > p.lim.MaxUpload {
		p.deny(bw, rec, http.StatusRequestEntityTooLarge, &DeniedError{Rule: "limit:upload",
			Reason: fmt.Sprintf("request body of %d bytes exceeds the %d-byte limit", req.ContentLength, p.lim.MaxUpload)})
		return false
	}
	up := &countReader{r: req.Body, limit: p.lim.MaxUpload}
	// The upstream sees the canonical target, never the client's spelling.
	u := *req.URL
	u.Scheme, u.Host = scheme, t.hostPortForHeader()
	out := &http.Request{
		Method:        req.Method,
		URL:           &u,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        req.Header.Clone(),
		Body:          io.NopCloser(up),
		ContentLength: req.ContentLength,
		Host:          t.hostPortForHeader(),
	}
	if req.ContentLength == 0 {
		out.Body = nil
	}
	removeHopHeaders(out.Header)
	continued := false
	if !p.swaps.empty() {
		var d *DeniedError
		if continued, d = p.swapRequest(c, bw, req, out, up, t, &rec); d != nil {
			p.deny(bw, rec, refusalStatus(d.Rule), d)
			return false
		}
	}
	rec.Decision = Allowed
	// The decision is on disk before a byte goes upstream.
	if err := p.open(&rec); err != nil {
		auditRefusal(bw)
		return false
	}

	ctx, cancel := context.WithTimeout(p.ctx, p.lim.MaxDuration)
	defer cancel()
	di := &dialInfo{t: t, rule: rule}
	ctx = context.WithValue(ctx, dialKey{}, di)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(ci httptrace.GotConnInfo) {
			s := ci.Conn.RemoteAddr().String()
			di.addr.Store(&s)
		},
	})

	if !continued && strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		bw.Flush()
	}
	out.Header.Del("Expect")
	out = out.WithContext(ctx)

	finish := func(status int, errText string) {
		rec.Status = status
		rec.Err = errText
		rec.BytesUp = up.n.Load()
		if a := di.addr.Load(); a != nil {
			rec.Addr = *a
		}
		p.record(rec)
	}

	// A client that trickles its body is cut off at the time limit.
	c.SetReadDeadline(time.Now().Add(p.lim.MaxDuration))
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		var de *DeniedError
		switch {
		case errors.As(err, &de):
			rec.BytesUp = up.n.Load()
			p.deny(bw, rec, http.StatusForbidden, de)
			return false
		case up.over.Load():
			d := &DeniedError{Rule: "limit:upload", Reason: fmt.Sprintf("request body exceeds the %d-byte limit", p.lim.MaxUpload)}
			writeRefusal(bw, http.StatusRequestEntityTooLarge, d)
			finish(http.StatusRequestEntityTooLarge, d.Reason)
			return false
		case isTimeout(err) || ctx.Err() != nil:
			writeRefusal(bw, http.StatusGatewayTimeout, &DeniedError{Rule: "limit:time", Reason: "the request did not complete in time (a slow upstream or a stalled upload)"})
			finish(http.StatusGatewayTimeout, "upstream timeout: "+err.Error())
			return false
		default:
			writeRefusal(bw, http.StatusBadGateway, &DeniedError{Rule: "upstream", Reason: "upstream failed: " + err.Error()})
			finish(http.StatusBadGateway, err.Error())
			return false
		}
	}
	defer resp.Body.Close()
	if resp.ContentLength > p.lim.MaxDownload && req.Method != http.MethodHead {
		d := &DeniedError{Rule: "limit:download",
			Reason: fmt.Sprintf("response of %d bytes exceeds the %d-byte limit", resp.ContentLength, p.lim.MaxDownload)}
		writeRefusal(bw, http.StatusBadGateway, d)
		finish(http.StatusBadGateway, d.Reason)
		return false
	}
	down := &countReader{r: resp.Body, limit: p.lim.MaxDownload}
	keep := !req.Close && up.eofOrEmpty(req)
	h := resp.Header.Clone()
	removeHopHeaders(h)
	fwd := &http.Response{
		Status:        resp.Status,
		StatusCode:    resp.StatusCode,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(down),
		ContentLength: resp.ContentLength,
		Request:       req,
		Close:         !keep,
	}
	if reds := p.swaps.redactions(t, rec.TLS); len(reds) > 0 {
		// A bound host may echo a value it was sent (an error message,
		// a debugging endpoint): the sandbox gets the placeholder back.
		redactHeader(h, reds)
		if req.Method != http.MethodHead && resp.ContentLength != 0 && bodyAllowed(resp.StatusCode) {
			fwd.Body, fwd.ContentLength = io.NopCloser(newRedactReader(down, reds)), -1
		}
	}
	if fwd.ContentLength < 0 && req.ProtoAtLeast(1, 1) && req.Method != http.MethodHead {
		fwd.TransferEncoding = []string{"chunked"}
	}
	// The client must keep reading: a stalled reader is cut off after the
	// idle timeout.
	c.SetWriteDeadline(time.Now().Add(p.lim.MaxDuration))
	werr := fwd.Write(bw)
	if werr == nil {
		werr = bw.Flush()
	}
	c.SetWriteDeadline(time.Time{})
	c.SetReadDeadline(time.Time{})
	rec.BytesDown = down.n.Load()
	if werr != nil {
		// Deliver what was relayed before the cut; the connection closes
		// without a terminating chunk, so the client sees the truncation.
		bw.Flush()
	}
	switch {
	case down.over.Load():
		finish(resp.StatusCode, fmt.Sprintf("download cut at the %d-byte limit", p.lim.MaxDownload))
		return false
	case werr != nil:
		finish(resp.StatusCode, "relaying response: "+werr.Error())
		return false
	}
	finish(resp.StatusCode, "")
	return keep && !resp.Close
}

// hostPortForHeader is the Host header value sent upstream: the port only
// when not the default.
func (t target) hostPortForHeader() string {
	if t.port == t.defaultPort {
		if t.ip.Is6() {
			return "[" + t.host + "]"
		}
		return t.host
	}
	return t.hostPort()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}

// errLimit is returned by a countReader past its limit.
var errLimit = errors.New("netproxy: byte limit exceeded")

// countReader counts bytes and fails past limit. n and over are read by
// other goroutines (the transport reads request bodies on its own).
type countReader struct {
	r     io.Reader
	limit int64
	n     atomic.Int64
	over  atomic.Bool
	eof   atomic.Bool
}

func (c *countReader) Read(b []byte) (int, error) {
	if c.r == nil {
		c.eof.Store(true)
		return 0, io.EOF
	}
	left := c.limit - c.n.Load()
	if left <= 0 {
		// Allow reading EOF exactly at the limit.
		var one [1]byte
		k, err := c.r.Read(one[:])
		if k > 0 {
			c.over.Store(true)
			return 0, errLimit
		}
		if err == io.EOF {
			c.eof.Store(true)
		}
		return 0, err
	}
	if int64(len(b)) > left+1 {
		b = b[:left+1]
	}
	k, err := c.r.Read(b)
	if int64(k) > left {
		c.n.Add(left)
		c.over.Store(true)
		return int(left), errLimit
	}
	c.n.Add(int64(k))
	if err == io.EOF {
		c.eof.Store(true)
	}
	return k, err
}

// eofOrEmpty reports whether the client's request body was read to its
// end, so the next bytes on the connection are the next request. Anything
// else must close the connection, or leftover body bytes would be read as
// a request (smuggling).
func (c *countReader) eofOrEmpty(req *http.Request) bool {
	if req.ContentLength == 0 || req.Body == nil || req.Body == http.NoBody {
		return true
	}
	return c.eof.Load()
}

// transportDial is the transport's only way out: it dials the target the
// handler checked, never anything else.
func (p *Proxy) transportDial(ctx context.Context, network, addr string) (net.Conn, error) {
	di, _ := ctx.Value(dialKey{}).(*dialInfo)
	if di == nil {
		return nil, &DeniedError{Rule: "internal", Reason: "dial without a checked request"}
	}
	if addr != di.t.hostPort() {
		return nil, &DeniedError{Rule: "internal", Reason: fmt.Sprintf("dial of %s for a request to %s", addr, di.t.hostPort())}
	}
	return p.dial(ctx, di.t, di.rule)
}

// permit decides whether ip may be connected to under rule: public
// addresses may, others only when the rule names that exact address.
// It returns the refused class otherwise.
func (p *Proxy) permit(ip netip.Addr, rule Rule) (string, bool) {
	ip = ip.WithZone("").Unmap()
	class := addressClass(ip)
	if class == "" {
		return "", true
	}
	if rule.IP.IsValid() && rule.IP.Unmap() == ip {
		return "", true
	}
	for _, pre := range p.opts.AllowAddrs {
		if pre.Contains(ip) {
			return "", true
		}
	}
	return class, false
}

// dial resolves t (unless it is an IP literal), keeps the addresses the
// rule permits, and connects to the first that answers. The dialer's
// Control hook checks the address of the socket actually being connected.
func (p *Proxy) dial(ctx context.Context, t target, rule Rule) (net.Conn, error) {
	var addrs []netip.Addr
	if t.ip.IsValid() {
		addrs = []netip.Addr{t.ip}
	} else {
		rctx, cancel := context.WithTimeout(ctx, p.lim.DialTimeout)
		found, err := p.resolver.LookupNetIP(rctx, "ip", t.host)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("netproxy: resolve %s: %w", t.host, err)
		}
		addrs = found
	}
	var ok []netip.Addr
	var refused []string
	firstClass := ""
	for _, a := range addrs {
		if class, fine := p.permit(a, rule); fine {
			ok = append(ok, a.WithZone("").Unmap())
		} else {
			refused = append(refused, a.String()+" ("+class+")")
			if firstClass == "" {
				firstClass = class
			}
		}
	}
	if len(ok) == 0 {
		if len(addrs) == 0 {
			return nil, fmt.Errorf("netproxy: resolve %s: no addresses", t.host)
		}
		return nil, &DeniedError{Rule: "address:" + firstClass,
			Reason: fmt.Sprintf("%s resolves only to refused addresses: %s (a rule naming the address itself, such as %s, allows it)",
				t.host, strings.Join(refused, ", "), netip.AddrPortFrom(addrs[0].Unmap(), uint16(t.port)))}
	}
	d := net.Dialer{Timeout: p.lim.DialTimeout, Control: p.control(rule, t.port)}
	var lastErr error
	for _, a := range ok {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(t.port)).String())
		if err == nil {
			return c, nil
		}
		var de *DeniedError
		if errors.As(err, &de) {
			return nil, de
		}
		lastErr = err
	}
	return nil, fmt.Errorf("netproxy: connect %s: %w", t.hostPort(), lastErr)
}

// control returns the dialer's Control hook: it runs on the socket about
// to connect, with the numeric address it will connect to, and refuses
// any address the rule does not permit or any other port.
func (p *Proxy) control(rule Rule, port int) func(network, address string, _ syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return &DeniedError{Rule: "internal", Reason: "unparsable dial address " + address}
		}
		if class, fine := p.permit(ap.Addr(), rule); !fine {
			return &DeniedError{Rule: "address:" + class, Reason: fmt.Sprintf("connect to %s (%s) refused", address, class)}
		}
		if int(ap.Port()) != port {
			return &DeniedError{Rule: "internal", Reason: fmt.Sprintf("connect to port %d for a request to port %d", ap.Port(), port)}
		}
		return nil
	}
}

// handleConnect checks a CONNECT request and, when allowed, relays bytes
// both ways until either side finishes or a limit ends the tunnel.
func (p *Proxy) handleConnect(c net.Conn, br *bufio.Reader, bw *bufio.Writer, req *http.Request, hosts []string, start time.Time) {
	rec := Record{Time: start, Method: http.MethodConnect, Host: req.RequestURI}
	if strings.HasPrefix(req.RequestURI, "/") {
		p.deny(bw, rec, http.StatusBadRequest, &DeniedError{Rule: "bad-request", Reason: "CONNECT needs host:port"})
		return
	}
	t, err := parseTarget(req.RequestURI, 443, true)
	if err != nil {
		p.deny(bw, rec, http.StatusBadRequest, &DeniedError{Rule: "bad-request", Reason: err.Error()})
		return
	}
	rec.Host, rec.Port = t.host, t.port
	rule, ruleName, status, d := p.admit(t, hosts)
	if d != nil {
		p.deny(bw, rec, status, d)
		return
	}
	rec.Decision, rec.Rule = Allowed, ruleName
	rec.TLS = p.ca != nil && p.swaps.terminates(t)
	// The decision is on disk before the upstream is connected.
	if err := p.open(&rec); err != nil {
		auditRefusal(bw)
		return
	}
	if rec.TLS {
		p.terminate(c, br, bw, t, rule, rec)
		return
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.lim.MaxDuration)
	defer cancel()
	up, err := p.dial(ctx, t, rule)
	if err != nil {
		var de *DeniedError
		if errors.As(err, &de) {
			p.deny(bw, rec, http.StatusForbidden, de)
			return
		}
		status := http.StatusBadGateway
		if isTimeout(err) {
			status = http.StatusGatewayTimeout
		}
		writeRefusal(bw, status, &DeniedError{Rule: "upstream", Reason: err.Error()})
		rec.Status, rec.Err = status, err.Error()
		p.record(rec)
		return
	}
	defer up.Close()
	rec.Status = http.StatusOK
	rec.Addr = up.RemoteAddr().String()
	bw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
	if err := bw.Flush(); err != nil {
		rec.Err = "client gone: " + err.Error()
		p.record(rec)
		return
	}
	stop := context.AfterFunc(ctx, func() {
		c.Close()
		up.Close()
	})
	defer stop()
	tn := &tunnel{idle: p.lim.IdleTimeout}
	tn.touch()
	done := make(chan error, 1)
	var nUp, nDown int64
	go func() {
		// Bytes the client pipelined behind CONNECT sit in br.
		var err error
		nUp, err = tn.pipe(up, c, io.MultiReader(io.LimitReader(br, int64(br.Buffered())), c), p.lim.MaxUpload)
		done <- err
	}()
	var errDown error
	nDown, errDown = tn.pipe(c, up, up, p.lim.MaxDownload)
	errUp := <-done
	rec.BytesUp, rec.BytesDown = nUp, nDown
	switch {
	case errors.Is(errUp, errLimit):
		rec.Err = fmt.Sprintf("upload cut at the %d-byte limit", p.lim.MaxUpload)
	case errors.Is(errDown, errLimit):
		rec.Err = fmt.Sprintf("download cut at the %d-byte limit", p.lim.MaxDownload)
	case ctx.Err() == context.DeadlineExceeded:
		rec.Err = "tunnel cut at the time limit"
	case ctx.Err() != nil:
		rec.Err = "tunnel cut: the proxy closed"
	case errors.Is(errUp, errIdle) || errors.Is(errDown, errIdle):
		rec.Err = "tunnel idle too long"
	}
	p.record(rec)
}

var errIdle = errors.New("netproxy: idle timeout")

// tunnel relays one CONNECT. last is the time of the last byte either way,
// so a one-way download does not trip the idle timer of the silent side.
type tunnel struct {
	idle time.Duration
	last atomic.Int64
}

func (t *tunnel) touch() { t.last.Store(time.Now().UnixNano()) }

// pipe copies src to dst (srcConn is src's connection, for deadlines)
// until EOF, an error, the byte limit or the idle timeout. On EOF it
// half-closes dst so the other direction can finish; on anything else it
// closes both ends.
func (t *tunnel) pipe(dst, srcConn net.Conn, src io.Reader, limit int64) (int64, error) {
	buf := make([]byte, 16<<10)
	var n int64
	fail := func(err error) (int64, error) {
		dst.Close()
		srcConn.Close()
		return n, err
	}
	for {
		srcConn.SetReadDeadline(time.Now().Add(t.idle))
		k, err := src.Read(buf)
		if k > 0 {
			t.touch()
			if n+int64(k) > limit {
				k = int(limit - n)
				if k > 0 {
					dst.Write(buf[:k])
					n += int64(k)
				}
				return fail(errLimit)
			}
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return fail(werr)
			}
			n += int64(k)
		}
		if err == nil {
			continue
		}
		if err == io.EOF {
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				cw.CloseWrite()
			} else {
				dst.Close()
			}
			return n, nil
		}
		if isTimeout(err) {
			if time.Since(time.Unix(0, t.last.Load())) < t.idle {
				continue // the other direction is busy
			}
			return fail(errIdle)
		}
		return fail(err)
	}
}
