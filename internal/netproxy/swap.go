package netproxy

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// PlaceholderPrefix begins every placeholder a Swap names.
const PlaceholderPrefix = "fluffy-secret-"

// Swap is a secret the proxy swaps in on the way out: the sandbox holds
// Placeholder, never Value, and the proxy replaces the one with the other
// only in requests to Hosts. A request that carries the placeholder to
// any other destination is refused, so the value can reach no one else.
type Swap struct {
	// Placeholder is PlaceholderPrefix followed by letters and digits. It
	// is replaced where it stands as a whole: a placeholder directly
	// followed by another letter or digit is another word.
	Placeholder string
	// Value is the secret. The proxy keeps a copy of its own until
	// Close, which zeroes it; it never copies it into a record, a log or
	// an answer to the sandbox.
	Value []byte
	// Hosts are the destinations the value may go to, as allow-list
	// rules (see Rule): "api.example.com" is port 80 for HTTP and 443
	// for HTTPS. Binding a host does not allow it: the allow-list or the
	// policy still decides whether a request may go there at all.
	Hosts []string
	// TLS lets the proxy terminate HTTPS to Hosts with the sandbox's own
	// certificate authority (see Proxy.CACert) and swap inside. Without
	// it a CONNECT to them stays an opaque tunnel and only plain HTTP
	// requests are swapped.
	TLS bool
	// Name names the secret in audit records and refusals (its
	// reference, say); empty means the placeholder.
	Name string
}

// ErrBadSwap is wrapped by every error about an Options.Swaps entry.
var ErrBadSwap = errors.New("netproxy: bad secret swap")

// boundSwap is a checked Swap.
type boundSwap struct {
	name  string
	value []byte
	hosts AllowList
	tls   bool
}

// swapSet is a proxy's swaps by placeholder; the zero value swaps nothing.
type swapSet struct {
	by map[string]*boundSwap
}

func newSwapSet(swaps []Swap) (swapSet, error) {
	s := swapSet{by: map[string]*boundSwap{}}
	for i, sw := range swaps {
		bad := func(why string) error { return fmt.Errorf("%w %d: %s", ErrBadSwap, i, why) }
		rest, ok := strings.CutPrefix(sw.Placeholder, PlaceholderPrefix)
		if !ok || rest == "" || strings.IndexFunc(rest, func(r rune) bool { return r > 0x7f || !isWordByte(byte(r)) }) >= 0 {
			return swapSet{}, bad(fmt.Sprintf("placeholder %q is not %s followed by letters and digits", sw.Placeholder, PlaceholderPrefix))
		}
		if len(sw.Value) == 0 {
			return swapSet{}, bad("empty value")
		}
		if bytes.Contains(sw.Value, []byte(PlaceholderPrefix)) {
			return swapSet{}, bad("the value contains a placeholder")
		}
		if len(sw.Hosts) == 0 {
			return swapSet{}, bad("bound to no host")
		}
		al, err := ParseAllowList(sw.Hosts)
		if err != nil {
			return swapSet{}, bad(err.Error())
		}
		if _, dup := s.by[sw.Placeholder]; dup {
			return swapSet{}, bad("placeholder used twice")
		}
		name := sw.Name
		if name == "" {
			name = sw.Placeholder
		}
		s.by[sw.Placeholder] = &boundSwap{name: name, value: bytes.Clone(sw.Value), hosts: al, tls: sw.TLS}
	}
	return s, nil
}

func (s swapSet) empty() bool { return len(s.by) == 0 }

// wipe zeroes the proxy's copies of the values (Close calls it once no
// request is left).
func (s swapSet) wipe() {
	for _, b := range s.by {
		clear(b.value)
	}
}

// terminates reports whether the proxy terminates TLS for a CONNECT to t:
// some swap that opted in is bound to it.
func (s swapSet) terminates(t target) bool {
	for _, b := range s.by {
		if _, ok := b.hosts.match(t); ok && b.tls {
			return true
		}
	}
	return false
}

// tlsRules are the host rules of the swaps that opted in to TLS.
func (s swapSet) tlsRules() []Rule {
	var rules []Rule
	for _, b := range s.by {
		if b.tls {
			rules = append(rules, b.hosts.rules...)
		}
	}
	return rules
}

func isWordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// scanPlaceholders calls fn with the bounds of each placeholder-shaped
// word in b, left to right: PlaceholderPrefix followed by the longest run
// of letters and digits (at least one).
func scanPlaceholders(b []byte, fn func(i, j int)) {
	prefix := []byte(PlaceholderPrefix)
	for off := 0; ; {
		k := bytes.Index(b[off:], prefix)
		if k < 0 {
			return
		}
		i := off + k
		j := i + len(prefix)
		for j < len(b) && isWordByte(b[j]) {
			j++
		}
		if j > i+len(prefix) {
			fn(i, j)
		}
		off = j
	}
}

// swapping is one request's swaps: the destination they are checked
// against and the names of the secrets swapped in so far.
type swapping struct {
	set swapSet
	t   target
	// tls: the request was read inside a TLS connection the proxy
	// terminated, where only swaps that opted in to TLS are swapped (the
	// others' placeholders pass as they would through a tunnel).
	tls  bool
	used []string
}

// in returns b with every placeholder bound to the destination replaced
// by enc(value) (nil enc: the raw value). A placeholder of a secret bound
// elsewhere refuses the request. b itself is returned when it holds no
// placeholder.
func (sw *swapping) in(b []byte, enc func([]byte) []byte) ([]byte, *DeniedError) {
	var out []byte
	last := 0
	var denied *DeniedError
	scanPlaceholders(b, func(i, j int) {
		if denied != nil {
			return
		}
		bs, ok := sw.set.by[string(b[i:j])]
		if !ok {
			return // looks like a placeholder, names no secret: plain text
		}
		if _, bound := bs.hosts.match(sw.t); !bound {
			denied = &DeniedError{Rule: "secret:unbound", Reason: fmt.Sprintf(
				"the request carries the placeholder of secret %s, which may be sent only to %s, not to %s",
				bs.name, strings.Join(ruleStrings(bs.hosts), ", "), sw.t.hostPort())}
			return
		}
		if sw.tls && !bs.tls {
			return
		}
		v := bs.value
		if enc != nil {
			v = enc(v)
		}
		out = append(append(out, b[last:i]...), v...)
		last = j
		if !slices.Contains(sw.used, bs.name) {
			sw.used = append(sw.used, bs.name)
		}
	})
	if denied != nil {
		return nil, denied
	}
	if out == nil {
		return b, nil
	}
	return append(out, b[last:]...), nil
}

func (sw *swapping) inString(s string, enc func([]byte) []byte) (string, *DeniedError) {
	if !strings.Contains(s, PlaceholderPrefix) {
		return s, nil
	}
	b, d := sw.in([]byte(s), enc)
	return string(b), d
}

func ruleStrings(al AllowList) []string {
	var s []string
	for _, r := range al.rules {
		s = append(s, r.String())
	}
	return s
}

// header swaps h in place: every value, and the credentials inside a
// Basic Authorization header. A value that would put a control character
// into a header is refused (it would split the header).
func (sw *swapping) header(h http.Header) *DeniedError {
	for k, vs := range h {
		for i, v := range vs {
			orig := v
			if k == "Authorization" {
				var d *DeniedError
				if v, d = sw.basicAuth(v); d != nil {
					return d
				}
			}
			v, d := sw.inString(v, nil)
			if d != nil {
				return d
			}
			if v != orig && strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) {
				return &DeniedError{Rule: "secret:value", Reason: fmt.Sprintf("a secret's value cannot go into header %s: it holds a control character", k)}
			}
			vs[i] = v
		}
	}
	return nil
}

// basicAuth swaps inside "Basic base64(user:password)".
func (sw *swapping) basicAuth(v string) (string, *DeniedError) {
	scheme, cred, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return v, nil
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil || !bytes.Contains(raw, []byte(PlaceholderPrefix)) {
		return v, nil
	}
	out, d := sw.in(raw, nil)
	if d != nil {
		return "", d
	}
	return scheme + " " + base64.StdEncoding.EncodeToString(out), nil
}

// url swaps in u's path (each value path-escaped) and query
// (query-escaped). User information in the request target is never sent
// upstream (the proxy writes the origin-form path).
func (sw *swapping) url(u *url.URL) *DeniedError {
	if p := u.EscapedPath(); strings.Contains(p, PlaceholderPrefix) {
		np, d := sw.inString(p, func(v []byte) []byte { return []byte(url.PathEscape(string(v))) })
		if d != nil {
			return d
		}
		dec, err := url.PathUnescape(np)
		if err != nil {
			return &DeniedError{Rule: "bad-request", Reason: "path: " + err.Error()}
		}
		u.Path, u.RawPath = dec, np
	}
	q, d := sw.inString(u.RawQuery, func(v []byte) []byte { return []byte(url.QueryEscape(string(v))) })
	if d != nil {
		return d
	}
	u.RawQuery = q
	return nil
}

// swapRequest swaps the secrets bound to t into out: its URL, its headers,
// and a body of up to Limits.SwapBody bytes, which it reads from up (a
// longer body goes as sent, refused only when its first SwapBody bytes
// carry a placeholder bound elsewhere). rec gets the names of the secrets
// swapped in. continued reports that the client was told 100 Continue
// (the body is read before the request goes upstream).
func (p *Proxy) swapRequest(c net.Conn, bw *bufio.Writer, req, out *http.Request, up *countReader, t target, rec *Record) (continued bool, d *DeniedError) {
	sw := &swapping{set: p.swaps, t: t, tls: rec.TLS}
	if d := sw.url(out.URL); d != nil {
		return false, d
	}
	if d := sw.header(out.Header); d != nil {
		return false, d
	}
	if len(p.swaps.redactions(t, rec.TLS)) > 0 {
		// An answer the proxy cannot read could carry a value back.
		out.Header.Del("Accept-Encoding")
	}
	if out.Body != nil && req.ContentLength <= p.lim.SwapBody {
		if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
			bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
			bw.Flush()
			continued = true
		}
		c.SetReadDeadline(time.Now().Add(p.lim.MaxDuration))
		head, err := io.ReadAll(io.LimitReader(up, p.lim.SwapBody+1))
		switch {
		case up.over.Load():
			return continued, &DeniedError{Rule: "limit:upload", Reason: fmt.Sprintf("request body exceeds the %d-byte limit", p.lim.MaxUpload)}
		case err != nil:
			return continued, &DeniedError{Rule: "bad-request", Reason: "reading the request body: " + err.Error()}
		case int64(len(head)) <= p.lim.SwapBody:
			body, d := sw.in(head, nil)
			if d != nil {
				return continued, d
			}
			out.Body, out.ContentLength, out.TransferEncoding = io.NopCloser(bytes.NewReader(body)), int64(len(body)), nil
			if len(body) == 0 {
				out.Body = nil
			}
		default:
			check := &swapping{set: p.swaps, t: t, tls: rec.TLS}
			if _, d := check.in(head, nil); d != nil {
				return continued, d
			}
			out.Body = io.NopCloser(io.MultiReader(bytes.NewReader(head), up))
		}
	}
	rec.Secrets = sw.used
	return continued, nil
}

// refusalStatus is the HTTP status of a refusal by rule before anything
// went upstream.
func refusalStatus(rule string) int {
	switch rule {
	case "bad-request":
		return http.StatusBadRequest
	case "limit:upload":
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusForbidden
}

// redaction is a value to hide from answers, and what stands for it.
type redaction struct {
	value, placeholder []byte
}

// redactions are the values of the swaps bound to t (with TLS when the
// answer comes inside a TLS connection the proxy terminated): what an
// answer from t must not carry back to the sandbox.
func (s swapSet) redactions(t target, tls bool) []redaction {
	var out []redaction
	for ph, b := range s.by {
		if _, ok := b.hosts.match(t); ok && (b.tls || !tls) {
			out = append(out, redaction{value: b.value, placeholder: []byte(ph)})
		}
	}
	return out
}

// redactHeader replaces every value in h by its placeholder.
func redactHeader(h http.Header, reds []redaction) {
	for _, vs := range h {
		for i, v := range vs {
			for _, r := range reds {
				if strings.Contains(v, string(r.value)) {
					v = strings.ReplaceAll(v, string(r.value), string(r.placeholder))
				}
			}
			vs[i] = v
		}
	}
}

// bodyAllowed reports whether a response with status may have a body.
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// redactReader streams r with every value replaced by its placeholder.
// It holds back the last bytes read until it knows they do not begin a
// value, so a value split across reads is still found.
type redactReader struct {
	r      io.Reader
	reds   []redaction
	keep   int    // longest value less one: bytes held back
	in     []byte // read, not yet looked at to the end
	out    []byte // ready for the reader
	err    error  // r's error, once it returned one
	chunk  []byte
	marker [256]bool // first bytes of the values
}

func newRedactReader(r io.Reader, reds []redaction) *redactReader {
	z := &redactReader{r: r, reds: reds, chunk: make([]byte, 4<<10)}
	for _, d := range reds {
		z.keep = max(z.keep, len(d.value)-1)
		z.marker[d.value[0]] = true
	}
	return z
}

func (z *redactReader) Read(p []byte) (int, error) {
	for len(z.out) == 0 {
		if z.err != nil {
			return 0, z.err
		}
		n, err := z.r.Read(z.chunk)
		z.in = append(z.in, z.chunk[:n]...)
		if err != nil {
			z.err = err
		}
		z.scan(err != nil)
	}
	n := copy(p, z.out)
	z.out = z.out[n:]
	return n, nil
}

// scan moves what is known to be free of a value's beginning from in to
// out, replacing values; at the end (final) it moves everything.
func (z *redactReader) scan(final bool) {
	limit := len(z.in) - z.keep
	if final {
		limit = len(z.in)
	}
	i := 0
	for i < limit {
		if z.marker[z.in[i]] {
			if r, ok := z.match(z.in[i:]); ok {
				z.out = append(z.out, r.placeholder...)
				i += len(r.value)
				continue
			}
		}
		z.out = append(z.out, z.in[i])
		i++
	}
	z.in = append(z.in[:0], z.in[i:]...)
}

func (z *redactReader) match(b []byte) (redaction, bool) {
	for _, r := range z.reds {
		if bytes.HasPrefix(b, r.value) {
			return r, true
		}
	}
	return redaction{}, false
}
