package tool

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"net/http"
	"slices"
	"sync"
	"unicode/utf8"
)

// DefaultMaxOutput is the output cap when SanitizerOptions.MaxBytes is 0.
const DefaultMaxOutput = 64 << 10

// DefaultRedaction replaces each secret occurrence.
const DefaultRedaction = "[REDACTED]"

const (
	sniffBytes   = 8000 // the binary test looks at this much, as git does
	maxStringSeq = 4096 // an OSC/DCS string longer than this ends
)

// SanitizerOptions configure a Sanitizer.
type SanitizerOptions struct {
	// MaxBytes caps the text kept (the truncation marker comes on top);
	// 0 means DefaultMaxOutput.
	MaxBytes int
	// TailBytes is how much of the end is kept when output is cut: the
	// end of a command's output (the failing test, the error) matters
	// most. 0 means a quarter of MaxBytes; negative means head only.
	TailBytes int
	// Secrets is the redaction hook: it returns the secret values to
	// replace, and is called once per stream. Nil means none. The secrets
	// broker plugs in here.
	Secrets func() []string
	// Redaction replaces each secret; "" means DefaultRedaction.
	Redaction string
}

// Sanitizer cleans tool output for the model: terminal control sequences
// (CSI, OSC, DCS, SOS, PM, APC, other escapes, C0 and C1 controls except
// newline and tab) are removed, invalid UTF-8 becomes U+FFFD, carriage
// returns become newlines, every secret value is replaced (also across
// write boundaries), the text is capped with a marker saying how much was
// cut, and binary output is summarised instead of shown. Safe for
// concurrent use; each Stream is not.
type Sanitizer struct {
	max     int
	tail    int
	secrets func() []string
	label   string
	// streams recycles Sanitize's streams (a Stream is ~600 bytes before
	// any output): the fast path sanitizes every result.
	streams sync.Pool
}

// NewSanitizer returns a Sanitizer.
func NewSanitizer(o SanitizerOptions) *Sanitizer {
	s := &Sanitizer{max: o.MaxBytes, secrets: o.Secrets, label: o.Redaction}
	if s.max <= 0 {
		s.max = DefaultMaxOutput
	}
	switch {
	case o.TailBytes < 0:
		s.tail = 0
	case o.TailBytes == 0:
		s.tail = s.max / 4
	default:
		s.tail = min(o.TailBytes, s.max)
	}
	if s.label == "" {
		s.label = DefaultRedaction
	}
	return s
}

// Sanitized is a cleaned output.
type Sanitized struct {
	Text string `json:"text"`
	// Binary is set when the output was summarised, not shown.
	Binary bool `json:"binary,omitempty"`
	// InputBytes is the raw output's size.
	InputBytes int64 `json:"input_bytes"`
	// CutBytes is how much cleaned text the cap removed.
	CutBytes int64 `json:"cut_bytes,omitempty"`
	// Redactions counts the secret occurrences replaced.
	Redactions int `json:"redactions,omitempty"`
	// Stripped counts the control sequences and characters removed.
	Stripped int `json:"stripped,omitempty"`
}

// maxPooledStream: streams whose buffers grew past this are dropped, not
// pooled.
const maxPooledStream = 64 << 10

// Sanitize cleans a complete output.
func (s *Sanitizer) Sanitize(b []byte) Sanitized {
	st, _ := s.streams.Get().(*Stream)
	if st == nil {
		st = new(Stream)
	}
	st.init(s)
	_, _ = st.Write(b)
	r := st.Close()
	if st.out.Cap()+cap(st.ring)+cap(st.red.pend)+cap(st.strip.buf)+cap(st.sniff) <= maxPooledStream {
		st.init(nil)
		s.streams.Put(st)
	}
	return r
}

// Stream cleans an output written in pieces.
func (s *Sanitizer) Stream() *Stream {
	st := &Stream{}
	st.init(s)
	return st
}

// init makes st a new stream of s, keeping only the capacity of its
// buffers (nothing the result aliases: Close copies the text out).
func (st *Stream) init(s *Sanitizer) {
	out := st.out
	out.Reset()
	*st = Stream{s: s, out: out, sniff: st.sniff[:0], ring: st.ring[:0],
		strip: stripper{buf: st.strip.buf[:0]}, red: redactor{pend: st.red.pend[:0]}}
	if s != nil && s.secrets != nil {
		seen := map[string]bool{}
		for _, v := range s.secrets() {
			// The model sees cleaned text, so look for the cleaned form.
			var c stripper
			var buf []byte
			c.feed([]byte(v), func(b []byte) { buf = append(buf, b...) })
			c.flush(func(b []byte) { buf = append(buf, b...) })
			if len(buf) > 0 && !seen[string(buf)] {
				seen[string(buf)] = true
				st.red.secrets = append(st.red.secrets, buf)
			}
		}
		slices.SortFunc(st.red.secrets, func(a, b []byte) int { return len(b) - len(a) })
		for _, v := range st.red.secrets {
			st.red.first[v[0]] = true
		}
	}
}

// Stream is one output being cleaned. Write never fails.
type Stream struct {
	s       *Sanitizer
	total   int64
	sniff   []byte
	decided bool
	binary  bool
	sum     hash.Hash
	strip   stripper
	red     redactor
	out     bytes.Buffer
	emitted int64
	full    bool   // the head is full: the rest goes to the tail ring
	ring    []byte // the last bytes emitted after the head, up to 2×tail
	closed  bool
	result  Sanitized
}

// Write consumes the next piece of output.
func (st *Stream) Write(p []byte) (int, error) {
	if st.closed {
		return 0, fmt.Errorf("tool: write to a closed sanitizer stream")
	}
	st.total += int64(len(p))
	if !st.decided {
		need := sniffBytes - len(st.sniff)
		if len(p) < need {
			st.sniff = append(st.sniff, p...)
			return len(p), nil
		}
		st.sniff = append(st.sniff, p[:need]...)
		st.decide()
		st.process(p[need:])
		return len(p), nil
	}
	st.process(p)
	return len(p), nil
}

func (st *Stream) decide() {
	st.decided = true
	st.binary = looksBinary(st.sniff)
	if st.binary {
		st.sum = sha256.New()
	}
	st.process(st.sniff)
}

func (st *Stream) process(p []byte) {
	if st.binary {
		st.sum.Write(p)
		return
	}
	st.strip.feed(p, st.redact)
}

func (st *Stream) redact(b []byte) { st.red.feed(b, false, st) }

// emit is the redactor's output: the first max bytes are kept; beyond
// them only the last tail bytes are, in a ring.
func (st *Stream) emit(b []byte) {
	st.emitted += int64(len(b))
	if !st.full {
		room := st.s.max - st.out.Len()
		if len(b) <= room {
			st.out.Write(b)
			return
		}
		st.out.Write(b[:room])
		b = b[room:]
		st.full = true
	}
	t := st.s.tail
	if t == 0 {
		return
	}
	if len(b) >= t {
		st.ring = append(st.ring[:0], b[len(b)-t:]...)
		return
	}
	st.ring = append(st.ring, b...)
	if len(st.ring) > 2*t {
		st.ring = append(st.ring[:0], st.ring[len(st.ring)-t:]...)
	}
}

// cut returns the shown head and tail of an output longer than max.
func (st *Stream) cut() (head, tail []byte) {
	all := st.out.Bytes()
	t := st.s.tail
	// The tail is the last t bytes of everything emitted: the ring,
	// preceded by the end of the head when the ring is short.
	tail = st.ring
	if len(tail) > t {
		tail = tail[len(tail)-t:]
	}
	headLen := st.s.max - t
	if short := t - len(tail); short > 0 {
		tail = append(append([]byte(nil), all[len(all)-short:]...), tail...)
	}
	head = all[:headLen]
	// Drop a rune the cut split in two.
	i := len(head) - 1
	for i >= 0 && !utf8.RuneStart(head[i]) {
		i--
	}
	if i >= 0 && !utf8.FullRune(head[i:]) {
		head = head[:i]
	}
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	return head, tail
}

// Close finishes the stream and returns the result. Further calls return
// the same result.
func (st *Stream) Close() Sanitized {
	if st.closed {
		return st.result
	}
	if !st.decided {
		st.decide()
	}
	st.closed = true
	r := Sanitized{InputBytes: st.total, Binary: st.binary}
	if st.binary {
		kind := http.DetectContentType(st.sniff)
		r.Text = fmt.Sprintf("[binary output not shown: %d bytes, %s, sha256 %s]", st.total, kind, hex.EncodeToString(st.sum.Sum(nil))[:16])
		st.result = r
		return r
	}
	st.strip.flush(st.redact)
	st.red.feed(nil, true, st)
	r.Redactions = st.red.count
	r.Stripped = st.strip.stripped
	text := st.out.String()
	if st.full {
		head, tail := st.cut()
		r.CutBytes = st.emitted - int64(len(head)+len(tail))
		text = fmt.Sprintf("%s\n[output truncated: %d bytes cut; showing the first %d and the last %d bytes]\n%s", head, r.CutBytes, len(head), len(tail), tail)
	}
	r.Text = text
	st.result = r
	return r
}

// looksBinary: a NUL byte, or mostly bytes that are neither text nor
// terminal controls.
func looksBinary(b []byte) bool {
	if bytes.IndexByte(b, 0) >= 0 {
		return true
	}
	bad := 0
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n == 1 {
			bad++
		}
		b = b[n:]
	}
	return bad*10 > len(b)+bad && bad > 8
}

// redactor replaces secrets in the cleaned stream, holding back a tail
// that could be the start of one until the next write settles it.
type redactor struct {
	secrets [][]byte // longest first
	first   [256]bool
	pend    []byte
	count   int
}

func (r *redactor) feed(b []byte, final bool, st *Stream) {
	if len(r.secrets) == 0 {
		if len(b) > 0 {
			st.emit(b)
		}
		return
	}
	r.pend = append(r.pend, b...)
	p := r.pend
	start, i := 0, 0
	label := []byte(st.s.label)
scan:
	for i < len(p) {
		if !r.first[p[i]] {
			i++
			continue
		}
		for _, s := range r.secrets {
			if bytes.HasPrefix(p[i:], s) {
				if i > start {
					st.emit(p[start:i])
				}
				st.emit(label)
				r.count++
				i += len(s)
				start = i
				continue scan
			}
			if !final && len(p)-i < len(s) && bytes.HasPrefix(s, p[i:]) {
				break scan // might be a secret: wait for more
			}
		}
		i++
	}
	if i > start {
		st.emit(p[start:i])
	}
	r.pend = append(r.pend[:0], p[i:]...)
}

// stripper removes terminal control sequences, byte by byte, with its
// state kept across writes.
type stripper struct {
	state    int
	strLen   int
	utf      [4]byte
	utfN     int
	cr       bool
	stripped int
	buf      []byte
}

const (
	sGround   = iota
	sEsc      // after ESC
	sEscInter // ESC + intermediates, waiting for the final byte
	sCSI      // control sequence: parameters, intermediates, final
	sStr      // OSC, DCS, SOS, PM, APC: until BEL or ST
	sStrEsc   // ESC inside a string
)

func (c *stripper) out(b ...byte) { c.buf = append(c.buf, b...) }

// replacement is U+FFFD, which stands for invalid UTF-8.
var replacement = []byte("\uFFFD")

func (c *stripper) feed(p []byte, emit func([]byte)) {
	c.buf = slices.Grow(c.buf[:0], len(p))
	for i := 0; i < len(p); {
		if c.state == sGround && !c.cr && c.utfN == 0 {
			// Fast path: a run of printable ASCII is copied as is.
			j := i
			for j < len(p) && p[j] >= 0x20 && p[j] < 0x7f {
				j++
			}
			if j > i {
				c.buf = append(c.buf, p[i:j]...)
				i = j
				continue
			}
		}
		c.step(p[i])
		i++
	}
	if len(c.buf) > 0 {
		emit(c.buf)
	}
}

// flush ends the stream: a pending carriage return or partial rune is
// settled, an unterminated sequence dropped.
func (c *stripper) flush(emit func([]byte)) {
	c.buf = c.buf[:0]
	if c.cr {
		c.out('\n')
		c.cr = false
	}
	if c.utfN > 0 {
		c.out(replacement...)
		c.utfN = 0
	}
	if c.state != sGround {
		c.stripped++
		c.state = sGround
	}
	if len(c.buf) > 0 {
		emit(c.buf)
	}
}

func (c *stripper) step(b byte) {
	switch c.state {
	case sEsc:
		switch {
		case b == '[':
			c.state = sCSI
		case b == ']' || b == 'P' || b == 'X' || b == '^' || b == '_':
			c.state, c.strLen = sStr, 0
		case b >= 0x20 && b <= 0x2f:
			c.state = sEscInter
		case b >= 0x30 && b <= 0x7e:
			c.state = sGround // two-byte escape
		default:
			c.state = sGround
			c.ground(b)
		}
		return
	case sEscInter:
		switch {
		case b >= 0x20 && b <= 0x2f:
		case b >= 0x30 && b <= 0x7e:
			c.state = sGround
		default:
			c.state = sGround
			c.ground(b)
		}
		return
	case sCSI:
		switch {
		case b >= 0x20 && b <= 0x3f:
		case b >= 0x40 && b <= 0x7e:
			c.state = sGround
		default: // aborted
			c.state = sGround
			c.ground(b)
		}
		return
	case sStr:
		c.strLen++
		switch {
		case b == 0x07:
			c.state = sGround
		case b == 0x1b:
			c.state = sStrEsc
		case b == 0x9c && c.utfN == 0:
			c.state = sGround
		case c.strLen > maxStringSeq:
			c.state = sGround
		}
		return
	case sStrEsc:
		if b == '\\' {
			c.state = sGround
			return
		}
		c.state = sEsc
		c.step(b)
		return
	}
	c.ground(b)
}

func (c *stripper) ground(b byte) {
	if c.cr {
		c.cr = false
		c.out('\n')
		if b == '\n' {
			return
		}
	}
	if c.utfN > 0 {
		if b&0xc0 == 0x80 {
			c.utf[c.utfN] = b
			c.utfN++
			if need := utfLen(c.utf[0]); c.utfN < need {
				return
			}
			c.rune(c.utf[:c.utfN])
			c.utfN = 0
			return
		}
		c.out(replacement...)
		c.utfN = 0
	}
	switch {
	case b == '\n' || b == '\t':
		c.out(b)
	case b == '\r':
		c.cr = true
	case b == 0x1b:
		c.state = sEsc
		c.stripped++
	case b < 0x20 || b == 0x7f:
		c.stripped++
	case b < 0x80:
		c.out(b)
	case utfLen(b) > 1:
		c.utf[0] = b
		c.utfN = 1
	default:
		c.out(replacement...) // a stray continuation byte or an invalid lead
	}
}

// rune handles one complete multi-byte sequence.
func (c *stripper) rune(seq []byte) {
	r, _ := utf8.DecodeRune(seq)
	switch {
	case r == utf8.RuneError:
		c.out(replacement...)
	case r == 0x9b:
		c.state = sCSI
		c.stripped++
	case r == 0x9d || r == 0x90 || r == 0x98 || r == 0x9e || r == 0x9f:
		c.state, c.strLen = sStr, 0
		c.stripped++
	case r >= 0x80 && r <= 0x9f:
		c.stripped++
	case r == 0x2028 || r == 0x2029 || r == 0x200e || r == 0x200f || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069):
		c.stripped++ // bidirectional and line-separator controls
	default:
		c.out(seq...)
	}
}

func utfLen(b byte) int {
	switch {
	case b&0xe0 == 0xc0 && b >= 0xc2:
		return 2
	case b&0xf0 == 0xe0:
		return 3
	case b&0xf8 == 0xf0 && b <= 0xf4:
		return 4
	}
	return 1
}
