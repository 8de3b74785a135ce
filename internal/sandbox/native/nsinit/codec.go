package nsinit

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The parent and the init exchange Config and Status in a
// compact binary form rather than JSON: no reflection and no base64 of the
// seccomp program in the init's critical path, and no encoding/json in
// the init binary. A message is framed as a 4-byte big-endian length and
// the body; in the body, integers are varints, strings and byte slices a
// length and the bytes, lists a count and the elements, booleans one
// byte (0 or 1). Fields come in the order of the struct definitions;
// Protocol, first in Config, changes with the layout. Decoding checks
// every length against what is left, refuses trailing bytes and never
// allocates more than the message holds (FuzzDecode).

// MaxMessage bounds a framed message (a Config holds argv, env and the
// seccomp program; a Status the trace marks).
const MaxMessage = 4 << 20

// ErrMalformed is returned for a message that does not decode.
var ErrMalformed = errors.New("malformed message")

type encoder struct{ b []byte }

func (e *encoder) uint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) int(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) bool(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}
func (e *encoder) bytes(p []byte) { e.uint(uint64(len(p))); e.b = append(e.b, p...) }
func (e *encoder) str(s string)   { e.uint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *encoder) strs(ss []string) {
	e.uint(uint64(len(ss)))
	for _, s := range ss {
		e.str(s)
	}
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() { d.err = ErrMalformed; d.b = nil }

func (d *decoder) uint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) small() int {
	v := d.uint()
	if v > 1<<31 {
		d.fail()
		return 0
	}
	return int(v)
}

func (d *decoder) bool() bool {
	if d.err != nil {
		return false
	}
	if len(d.b) == 0 || d.b[0] > 1 {
		d.fail()
		return false
	}
	v := d.b[0] == 1
	d.b = d.b[1:]
	return v
}

// count reads a list length; each element takes at least min bytes, so a
// count larger than what is left is malformed (no huge allocations).
func (d *decoder) count(min int) int {
	n := d.uint()
	if d.err == nil && n > uint64(len(d.b)/min) {
		d.fail()
		return 0
	}
	return int(n)
}

func (d *decoder) bytes() []byte {
	n := d.uint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	if n == 0 {
		return nil
	}
	p := append([]byte(nil), d.b[:n]...)
	d.b = d.b[n:]
	return p
}

func (d *decoder) str() string {
	n := d.uint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.fail()
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) strs() []string {
	n := d.count(1)
	if n == 0 {
		return nil
	}
	ss := make([]string, n)
	for i := range ss {
		ss[i] = d.str()
	}
	return ss
}

// done reports the decoder's error, or ErrMalformed if bytes are left.
func (d *decoder) done() error {
	if d.err == nil && len(d.b) > 0 {
		d.err = ErrMalformed
	}
	return d.err
}

// AppendBinary appends c's encoding (without framing).
func (c *Config) AppendBinary(b []byte) []byte {
	b = c.appendHead(b)
	e := encoder{b}
	e.strs(c.Env)
	return c.appendTail(e.b)
}

// Framed returns c framed for the init's pipe (Frame of AppendBinary) in
// memory from alloc when it gives the frame's length, else on the heap.
// The environment, which may hold a secret's value, is encoded straight
// into that memory: only the fields before and after it pass through the
// heap (the caller's alloc is sandbox.Spec.Scratch, outside it).
func (c *Config) Framed(alloc func(n int) []byte) []byte {
	head, tail := c.appendHead(nil), c.appendTail(nil)
	n := len(head) + strsLen(c.Env) + len(tail)
	var b []byte
	if alloc != nil {
		b = alloc(4 + n)
	}
	if len(b) != 4+n {
		b = make([]byte, 4+n)
	}
	// Every append below stays within b's length: none reallocates.
	b = binary.BigEndian.AppendUint32(b[:0], uint32(n))
	b = append(b, head...)
	e := encoder{b}
	e.strs(c.Env)
	return append(e.b, tail...)
}

// strsLen is the length of e.strs(ss).
func strsLen(ss []string) int {
	n := uvarintLen(uint64(len(ss)))
	for _, s := range ss {
		n += uvarintLen(uint64(len(s))) + len(s)
	}
	return n
}

func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// appendHead appends the fields before the environment.
func (c *Config) appendHead(b []byte) []byte {
	e := encoder{b}
	e.uint(uint64(c.Protocol))
	e.strs(c.Argv)
	return e.b
}

// appendTail appends the fields after the environment.
func (c *Config) appendTail(b []byte) []byte {
	e := encoder{b}
	e.str(c.Dir)
	e.str(c.Workspace)
	e.str(c.Upper)
	e.str(c.Work)
	e.bool(c.LowerFD)
	e.bool(c.WorkspaceRO)
	e.uint(uint64(len(c.Mounts)))
	for _, m := range c.Mounts {
		e.str(m.Source)
		e.str(m.Target)
		e.bool(m.Writable)
	}
	e.int(c.TmpSize)
	e.bytes(c.Seccomp)
	e.int(int64(c.Landlock))
	e.bool(c.LandlockNet)
	e.uint(uint64(len(c.Rlimits)))
	for _, r := range c.Rlimits {
		e.int(int64(r.Resource))
		e.uint(r.Value)
	}
	e.str(c.ProxySocket)
	e.str(c.ProxyListen)
	e.bool(c.ProxyFD)
	e.bool(c.Probe)
	e.bool(c.Trace)
	e.int(c.UpperSize)
	e.bool(c.OverlayRO)
	return e.b
}

// DecodeConfig decodes a Config body. A body from a parent of another
// protocol is reported as such (its layout may differ from here on).
func DecodeConfig(b []byte) (Config, error) {
	d := decoder{b: b}
	var c Config
	c.Protocol = d.small()
	if d.err == nil && c.Protocol != Protocol {
		return c, fmt.Errorf("this sandbox init speaks protocol %d, fluffy sent %d: install fluffy and fluffy-sandbox-init from the same build", Protocol, c.Protocol)
	}
	c.Argv = d.strs()
	c.Env = d.strs()
	c.Dir = d.str()
	c.Workspace = d.str()
	c.Upper = d.str()
	c.Work = d.str()
	c.LowerFD = d.bool()
	c.WorkspaceRO = d.bool()
	if n := d.count(3); n > 0 {
		c.Mounts = make([]MountSpec, n)
		for i := range c.Mounts {
			c.Mounts[i] = MountSpec{Source: d.str(), Target: d.str(), Writable: d.bool()}
		}
	}
	c.TmpSize = d.int()
	c.Seccomp = d.bytes()
	c.Landlock = int(int32(d.int()))
	c.LandlockNet = d.bool()
	if n := d.count(2); n > 0 {
		c.Rlimits = make([]Rlimit, n)
		for i := range c.Rlimits {
			c.Rlimits[i] = Rlimit{Resource: int(int32(d.int())), Value: d.uint()}
		}
	}
	c.ProxySocket = d.str()
	c.ProxyListen = d.str()
	c.ProxyFD = d.bool()
	c.Probe = d.bool()
	c.Trace = d.bool()
	c.UpperSize = d.int()
	c.OverlayRO = d.bool()
	if err := d.done(); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return c, nil
}

// AppendBinary appends s's encoding (without framing).
func (s *Status) AppendBinary(b []byte) []byte {
	e := encoder{b}
	e.str(s.Stage)
	e.str(s.Error)
	e.bool(s.Started)
	e.int(int64(s.ExitCode))
	e.int(int64(s.Signal))
	e.bool(s.TmpFull)
	e.int(s.SetupNanos)
	e.uint(uint64(len(s.Marks)))
	for _, m := range s.Marks {
		e.str(m.Stage)
		e.int(m.At)
	}
	e.int(s.CommandCPU[0])
	e.int(s.CommandCPU[1])
	e.bool(s.UpperFull)
	e.bool(s.UpperWritten)
	return e.b
}

// DecodeStatus decodes a Status body.
func DecodeStatus(b []byte) (Status, error) {
	d := decoder{b: b}
	var s Status
	s.Stage = d.str()
	s.Error = d.str()
	s.Started = d.bool()
	s.ExitCode = int(int32(d.int()))
	s.Signal = int(int32(d.int()))
	s.TmpFull = d.bool()
	s.SetupNanos = d.int()
	if n := d.count(2); n > 0 {
		s.Marks = make([]Mark, n)
		for i := range s.Marks {
			s.Marks[i] = Mark{Stage: d.str(), At: d.int()}
		}
	}
	s.CommandCPU = [2]int64{d.int(), d.int()}
	s.UpperFull = d.bool()
	s.UpperWritten = d.bool()
	if err := d.done(); err != nil {
		return Status{}, fmt.Errorf("status: %w", err)
	}
	return s, nil
}

// Frame returns body framed for a stream: its length, then itself.
func Frame(body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body))), body...)
}

// ReadFrame reads one framed message of at most MaxMessage bytes.
func ReadFrame(r *bufio.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxMessage {
		return nil, fmt.Errorf("%w: a message of %d bytes", ErrMalformed, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}
