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

	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
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
	// replace, and is called once per stream. Nil means none.
	Secrets func() []string
	// SecretBytes is Secrets in slices the sanitizer owns: it zeroes
	// them, and every copy it makes of them, when the stream is closed,
	// so no value outlives the stream on the heap. The secrets broker
	// plugs in here.
	SecretBytes func() [][]byte
	// Redaction replaces each secret; "" means DefaultRedaction.
	Redaction string
}

// Sanitizer cleans tool output for the model. Nothing is hidden from it
// and nothing reaches it raw that could hide text: every character
// termsafe.Hidden names (C0 and C1 controls but newline and tab, ESC and
// so every escape sequence, DEL, bidirectional overrides and isolates,
// zero-width and other invisible characters) and every byte of invalid
// UTF-8 is shown escaped the way internal/tui/termsafe shows it on a
// terminal (\x1b, \u202e, \xff), so a file named "a\u202eb" is told apart
// from "ab" and a colour sequence shows as text. CR LF becomes a newline,
// a lone CR is escaped (\r). Every secret value is replaced (also across
// write boundaries, and also when control characters were put inside it:
// then the whole output is withheld), the text is capped with a marker
// saying how much was cut, and binary output is summarised instead of
// shown. Safe for concurrent use; each Stream is not.
type Sanitizer struct {
	max         int
	tail        int
	secrets     func() []string
	secretBytes func() [][]byte
	label       string
	// streams recycles Sanitize's streams (a Stream is ~600 bytes before
	// any output): the fast path sanitizes every result.
	streams sync.Pool
}

// NewSanitizer returns a Sanitizer.
func NewSanitizer(o SanitizerOptions) *Sanitizer {
	s := &Sanitizer{max: o.MaxBytes, secrets: o.Secrets, secretBytes: o.SecretBytes, label: o.Redaction}
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
	// Stripped counts the control and invisible characters and invalid
	// bytes shown escaped (the name is the audit field's: they used to be
	// removed).
	Stripped int `json:"stripped,omitempty"`
	// Withheld is set when control characters split a secret value: the
	// output is not shown at all.
	Withheld bool `json:"withheld,omitempty"`
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
	if st.out.Cap()+cap(st.ring)+cap(st.red.pend)+cap(st.esc.buf)+cap(st.chk.buf)+cap(st.chkRed.pend)+cap(st.sniff) <= maxPooledStream {
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
		esc: escaper{buf: st.esc.buf[:0]}, red: redactor{pend: st.red.pend[:0]},
		chk: stripper{buf: st.chk.buf[:0]}, chkRed: redactor{pend: st.chkRed.pend[:0]}}
	if s == nil || (s.secrets == nil && s.secretBytes == nil) {
		return
	}
	var vals [][]byte
	if s.secrets != nil {
		for _, v := range s.secrets() {
			vals = append(vals, []byte(v))
		}
	}
	if s.secretBytes != nil {
		vals = append(vals, s.secretBytes()...)
		st.wipe = true
	}
	for _, v := range vals {
		// The model sees escaped text, so look for the escaped form;
		// the check looks for the stripped form in the output with its
		// control characters removed.
		var e escaper
		var esc []byte
		e.feed(v, func(b []byte) { esc = append(esc, b...) })
		e.flush(func(b []byte) { esc = append(esc, b...) })
		st.red.secrets = addSecret(st.red.secrets, esc)
		clear(e.buf[:cap(e.buf)]) // flush left it empty, not zeroed
		var c stripper
		var stripped []byte
		c.feed(v, func(b []byte) { stripped = append(stripped, b...) })
		c.flush(func(b []byte) { stripped = append(stripped, b...) })
		st.chkRed.secrets = addSecret(st.chkRed.secrets, stripped)
		clear(c.buf[:cap(c.buf)])
		if st.wipe {
			clear(v)
		}
	}
	st.red.index()
	st.chkRed.index()
}

// addSecret appends v unless it is empty or already there (compared as
// bytes: a map keyed by string would copy the value).
func addSecret(list [][]byte, v []byte) [][]byte {
	if len(v) == 0 {
		return list
	}
	for _, o := range list {
		if bytes.Equal(o, v) {
			clear(v)
			return list
		}
	}
	return append(list, v)
}

// wipeSecrets zeroes the stream's copies of secret values and what it
// held back as a possible start of one.
func (st *Stream) wipeSecrets() {
	for _, r := range []*redactor{&st.red, &st.chkRed} {
		for _, v := range r.secrets {
			clear(v)
		}
		clear(r.pend[:cap(r.pend)])
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
	esc     escaper  // what the model sees
	red     redactor // secrets in the escaped text
	// chk and chkRed look for secrets in the text with its control
	// characters removed: a secret they find more often than red was
	// split by controls, and the output is withheld. Unused without
	// secrets.
	chk    stripper
	chkRed redactor
	// wipe: the secrets came from SecretBytes, and Close zeroes every
	// copy.
	wipe    bool
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
	st.esc.feed(p, st.redact)
	if len(st.chkRed.secrets) > 0 {
		st.chk.feed(p, st.check)
	}
}

func (st *Stream) redact(b []byte) { st.red.feed(b, false, st.s.label, st.emit) }

func (st *Stream) check(b []byte) { st.chkRed.feed(b, false, "", nil) }

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
	r := st.close()
	if st.wipe {
		st.wipeSecrets()
	}
	return r
}

func (st *Stream) close() Sanitized {
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
	st.esc.flush(st.redact)
	st.red.feed(nil, true, st.s.label, st.emit)
	r.Redactions = st.red.count
	r.Stripped = st.esc.escaped
	if len(st.chkRed.secrets) > 0 {
		st.chk.flush(st.check)
		st.chkRed.feed(nil, true, "", nil)
		if st.chkRed.count > st.red.count {
			r.Withheld = true
			r.Text = fmt.Sprintf("[output withheld: %d bytes; control characters inside it split a secret value, which would reach the model unredacted]", st.total)
			st.result = r
			return r
		}
	}
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
// that could be the start of one until the next write settles it. With a
// nil emit it only counts.
type redactor struct {
	secrets [][]byte // longest first
	first   [256]bool
	pend    []byte
	count   int
}

// index sorts the secrets longest first and notes their first bytes.
func (r *redactor) index() {
	slices.SortFunc(r.secrets, func(a, b []byte) int { return len(b) - len(a) })
	for _, v := range r.secrets {
		r.first[v[0]] = true
	}
}

func (r *redactor) feed(b []byte, final bool, label string, emit func([]byte)) {
	if emit == nil {
		emit = func([]byte) {}
	}
	if len(r.secrets) == 0 {
		if len(b) > 0 {
			emit(b)
		}
		return
	}
	r.pend = append(r.pend, b...)
	p := r.pend
	start, i := 0, 0
	lab := []byte(label)
scan:
	for i < len(p) {
		if !r.first[p[i]] {
			i++
			continue
		}
		for _, s := range r.secrets {
			if bytes.HasPrefix(p[i:], s) {
				if i > start {
					emit(p[start:i])
				}
				emit(lab)
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
		emit(p[start:i])
	}
	r.pend = append(r.pend[:0], p[i:]...)
}

// escaper shows what termsafe.Hidden names, and invalid UTF-8, escaped
// as termsafe.String does, byte by byte with its state (a pending CR, a
// partial rune) kept across writes.
type escaper struct {
	utf     [4]byte
	utfN    int
	cr      bool
	escaped int
	buf     []byte
}

func (e *escaper) feed(p []byte, emit func([]byte)) {
	e.buf = slices.Grow(e.buf[:0], len(p))
	for i := 0; i < len(p); {
		if !e.cr && e.utfN == 0 {
			// Fast path: a run of printable ASCII is copied as is.
			j := i
			for j < len(p) && p[j] >= 0x20 && p[j] < 0x7f {
				j++
			}
			if j > i {
				e.buf = append(e.buf, p[i:j]...)
				i = j
				continue
			}
		}
		e.step(p[i])
		i++
	}
	if len(e.buf) > 0 {
		emit(e.buf)
	}
}

// flush ends the stream: a pending CR or partial rune is shown escaped.
func (e *escaper) flush(emit func([]byte)) {
	e.buf = e.buf[:0]
	e.settle()
	if len(e.buf) > 0 {
		emit(e.buf)
	}
}

// settle shows what is pending as escaped bytes.
func (e *escaper) settle() {
	if e.cr {
		e.cr = false
		e.show([]byte{'\r'})
	}
	for _, b := range e.utf[:e.utfN] {
		e.show([]byte{b})
	}
	e.utfN = 0
}

// show writes seq (one rune, or one byte that is not UTF-8) escaped.
func (e *escaper) show(seq []byte) {
	e.escaped++
	e.buf = append(e.buf, termsafe.String(string(seq))...)
}

func (e *escaper) step(b byte) {
	if e.cr {
		e.cr = false
		if b == '\n' {
			e.buf = append(e.buf, '\n') // CR LF is a line end
			return
		}
		e.show([]byte{'\r'})
	}
	if e.utfN > 0 {
		if b&0xc0 == 0x80 {
			e.utf[e.utfN] = b
			e.utfN++
			if e.utfN < utfLen(e.utf[0]) {
				return
			}
			seq := e.utf[:e.utfN]
			e.utfN = 0
			switch r, n := utf8.DecodeRune(seq); {
			case r == utf8.RuneError && n == 1: // overlong, a surrogate, out of range
				for _, c := range seq {
					e.show([]byte{c})
				}
			case termsafe.Hidden(r):
				e.show(seq)
			default:
				e.buf = append(e.buf, seq...)
			}
			return
		}
		e.settle()
	}
	switch {
	case b == '\n' || b == '\t':
		e.buf = append(e.buf, b)
	case b == '\r':
		e.cr = true
	case b < 0x20 || b == 0x7f:
		e.show([]byte{b})
	case b < 0x80:
		e.buf = append(e.buf, b)
	case utfLen(b) > 1:
		e.utf[0] = b
		e.utfN = 1
	default:
		e.show([]byte{b}) // a stray continuation byte or an invalid lead
	}
}

// stripper removes terminal control sequences and invisible characters,
// byte by byte, with its state kept across writes. Its output is never
// shown: it is the text a secret could hide in once the controls put
// inside it are taken out (see Stream.chk).
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
	case termsafe.Hidden(r):
		c.stripped++ // bidirectional, invisible and line-separator characters
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
