package sandboxd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"
)

// The wire format, version 1. One frame is one SOCK_SEQPACKET message: a
// type byte, then the type's fields, big-endian, nothing after them.
//
// Client to server:
//
//	0x01 request       version u16, total u32, chunk: the first bytes of
//	                   the encoded Request (total bytes in all); carries
//	                   the client's fds 1 and 2 and its proof of reach,
//	                   the server's /proc/PID/environ opened read-only
//	                   (SCM_RIGHTS, in that order). Always the
//	                   first frame; the version is at the same place in
//	                   every future version.
//	0x02 request-more  chunk: the next bytes of the Request, until total
//	0x03 stdin         data: 1..MaxChunk bytes of standard input, only in
//	                   answer to a want
//	0x04 stdin-eof     standard input ended (or could not be read)
//	0x05 signal        signo u8: SIGINT, SIGTERM or SIGHUP
//
// Server to client:
//
//	0x81 started       the handler is about to run: from here on the
//	                   command's outcome is unknown if the call breaks
//	0x82 want          n u32 (1..MaxChunk): read up to n bytes of stdin
//	0x83 reply         code i32, flags u8 (bit 0: hand over); the last frame
//	0x84 refused       version u16 (the server's), message: why the request
//	                   was not run (another version, a malformed request,
//	                   a client of another identity); the last frame. Its
//	                   layout stays the same in every future version, so
//	                   that a server can tell any client why it refuses.
//
// The encoded Request is: argc u32, then argc strings; envc u32, then envc
// strings; then the working directory as one string; a string is its
// length u32 and its bytes, which contain no NUL. Nothing follows.

// Version is the wire protocol version this package speaks.
const Version = 1

const (
	// MaxFrame is the largest frame either side sends or accepts (the
	// socket's default send buffer takes ~200 KiB; 64 KiB leaves room).
	MaxFrame = 64 << 10
	// MaxChunk is the most standard input one stdin frame carries.
	MaxChunk = MaxFrame - 1
	// MaxRequest is the largest encoded Request (Linux's limit on a
	// command line plus environment is a quarter of the stack limit,
	// 2 MiB by default). A larger one is not forwarded.
	MaxRequest = 16 << 20
	// maxMessage bounds a refused frame's message.
	maxMessage = 1024
)

type frameType byte

const (
	frameRequest     frameType = 0x01
	frameRequestMore frameType = 0x02
	frameStdin       frameType = 0x03
	frameStdinEOF    frameType = 0x04
	frameSignal      frameType = 0x05
	frameStarted     frameType = 0x81
	frameWant        frameType = 0x82
	frameReply       frameType = 0x83
	frameRefused     frameType = 0x84
)

func (t frameType) String() string {
	switch t {
	case frameRequest:
		return "request"
	case frameRequestMore:
		return "request-more"
	case frameStdin:
		return "stdin"
	case frameStdinEOF:
		return "stdin-eof"
	case frameSignal:
		return "signal"
	case frameStarted:
		return "started"
	case frameWant:
		return "want"
	case frameReply:
		return "reply"
	case frameRefused:
		return "refused"
	}
	return "0x" + strconv.FormatUint(uint64(t), 16)
}

// fromClient says whether a client sends frames of this type.
func (t frameType) fromClient() bool { return t < 0x80 }

// frame is one decoded frame; which fields are set depends on Type.
type frame struct {
	Type     frameType
	Version  uint16         // request, refused
	Total    uint32         // request
	Data     []byte         // request, request-more, stdin (aliases the decoded buffer)
	Signal   syscall.Signal // signal
	Want     uint32         // want
	Code     int32          // reply
	HandOver bool           // reply
	Message  string         // refused
}

// FrameError is every error decodeFrame and decodeRequest return: what was
// wrong with which frame.
type FrameError struct {
	Type frameType // 0 when the frame was empty
	Msg  string
}

func (e *FrameError) Error() string {
	if e.Type == 0 {
		return "sandboxd: malformed frame: " + e.Msg
	}
	return "sandboxd: malformed " + e.Type.String() + " frame: " + e.Msg
}

// VersionError: a request of another protocol version (decodeFrame), or a
// server that refused ours (the client).
type VersionError struct {
	Got, Want uint16
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("sandboxd: protocol version %d, this side speaks %d", e.Got, e.Want)
}

func forwardedSignal(s syscall.Signal) bool {
	return s == syscall.SIGINT || s == syscall.SIGTERM || s == syscall.SIGHUP
}

// encodeFrame is the canonical encoding of f; decodeFrame(encodeFrame(f))
// gives f back for every f encodeFrame accepts.
func encodeFrame(f frame) ([]byte, error) {
	bad := func(msg string) ([]byte, error) { return nil, &FrameError{Type: f.Type, Msg: msg} }
	b := []byte{byte(f.Type)}
	switch f.Type {
	case frameRequest:
		if f.Total == 0 || f.Total > MaxRequest || len(f.Data) == 0 || len(f.Data) > int(f.Total) || 7+len(f.Data) > MaxFrame {
			return bad("chunk or total out of range")
		}
		b = binary.BigEndian.AppendUint16(b, f.Version)
		b = binary.BigEndian.AppendUint32(b, f.Total)
		b = append(b, f.Data...)
	case frameRequestMore, frameStdin:
		if len(f.Data) == 0 || 1+len(f.Data) > MaxFrame {
			return bad("chunk size out of range")
		}
		b = append(b, f.Data...)
	case frameStdinEOF, frameStarted:
	case frameSignal:
		if !forwardedSignal(f.Signal) {
			return bad("signal " + strconv.Itoa(int(f.Signal)) + " is not forwarded")
		}
		b = append(b, byte(f.Signal))
	case frameWant:
		if f.Want == 0 || f.Want > MaxChunk {
			return bad("size out of range")
		}
		b = binary.BigEndian.AppendUint32(b, f.Want)
	case frameReply:
		b = binary.BigEndian.AppendUint32(b, uint32(f.Code))
		var flags byte
		if f.HandOver {
			flags |= 1
		}
		b = append(b, flags)
	case frameRefused:
		if len(f.Message) > maxMessage || !utf8.ValidString(f.Message) {
			return bad("message too long or not UTF-8")
		}
		b = binary.BigEndian.AppendUint16(b, f.Version)
		b = append(b, f.Message...)
	default:
		return bad("unknown type")
	}
	return b, nil
}

// decodeFrame parses one frame received from the other side. It is
// strict: a frame is accepted only in its canonical encoding. A request
// frame of another version gives a *VersionError (with the frame's Type
// and Version set) before the rest is looked at.
func decodeFrame(b []byte) (frame, error) {
	if len(b) == 0 {
		return frame{}, &FrameError{Msg: "empty"}
	}
	if len(b) > MaxFrame {
		return frame{}, &FrameError{Msg: "longer than " + strconv.Itoa(MaxFrame) + " bytes"}
	}
	f := frame{Type: frameType(b[0])}
	p := b[1:]
	bad := func(msg string) (frame, error) { return frame{}, &FrameError{Type: f.Type, Msg: msg} }
	size := func(n int) bool { return len(p) == n }
	switch f.Type {
	case frameRequest:
		if len(p) < 2 {
			return bad("no version")
		}
		f.Version = binary.BigEndian.Uint16(p)
		if f.Version != Version {
			return frame{Type: f.Type, Version: f.Version}, &VersionError{Got: f.Version, Want: Version}
		}
		if len(p) < 6 {
			return bad("no length")
		}
		f.Total = binary.BigEndian.Uint32(p[2:])
		f.Data = p[6:]
		if f.Total == 0 || f.Total > MaxRequest {
			return bad("length " + strconv.FormatUint(uint64(f.Total), 10) + " out of range")
		}
		if len(f.Data) == 0 || len(f.Data) > int(f.Total) {
			return bad("chunk size out of range")
		}
	case frameRequestMore, frameStdin:
		if len(p) == 0 {
			return bad("empty chunk")
		}
		f.Data = p
	case frameStdinEOF, frameStarted:
		if !size(0) {
			return bad("trailing bytes")
		}
	case frameSignal:
		if !size(1) {
			return bad("wrong size")
		}
		f.Signal = syscall.Signal(p[0])
		if !forwardedSignal(f.Signal) {
			return bad("signal " + strconv.Itoa(int(p[0])) + " is not forwarded")
		}
	case frameWant:
		if !size(4) {
			return bad("wrong size")
		}
		f.Want = binary.BigEndian.Uint32(p)
		if f.Want == 0 || f.Want > MaxChunk {
			return bad("size out of range")
		}
	case frameReply:
		if !size(5) {
			return bad("wrong size")
		}
		f.Code = int32(binary.BigEndian.Uint32(p))
		if p[4]&^1 != 0 {
			return bad("unknown flags")
		}
		f.HandOver = p[4]&1 != 0
	case frameRefused:
		if len(p) < 2 {
			return bad("no version")
		}
		f.Version = binary.BigEndian.Uint16(p)
		msg := p[2:]
		if len(msg) > maxMessage || !utf8.Valid(msg) {
			return bad("message too long or not UTF-8")
		}
		f.Message = string(msg)
	default:
		return bad("unknown type")
	}
	return f, nil
}

// encodeRequest is the canonical encoding of r (see the format above).
func encodeRequest(r Request) ([]byte, error) {
	n := 12 + 4 + len(r.Cwd)
	for _, s := range r.Args {
		n += 4 + len(s)
	}
	for _, s := range r.Environ {
		n += 4 + len(s)
	}
	if n > MaxRequest {
		return nil, fmt.Errorf("sandboxd: request of %d bytes, more than %d", n, MaxRequest)
	}
	b := make([]byte, 0, n)
	str := func(what, s string) error {
		if strings.IndexByte(s, 0) >= 0 {
			return fmt.Errorf("sandboxd: %s contains a NUL byte", what)
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
		return nil
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Args)))
	for _, s := range r.Args {
		if err := str("an argument", s); err != nil {
			return nil, err
		}
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Environ)))
	for _, s := range r.Environ {
		if err := str("an environment variable", s); err != nil {
			return nil, err
		}
	}
	if err := str("the working directory", r.Cwd); err != nil {
		return nil, err
	}
	return b, nil
}

// decodeRequest parses an encoded Request (outside input: the server
// decodes what a client sent). Counts are checked against the bytes
// left before anything is allocated.
func decodeRequest(b []byte) (Request, error) {
	bad := func(msg string) (Request, error) { return Request{}, &FrameError{Type: frameRequest, Msg: msg} }
	if len(b) > MaxRequest {
		return bad("longer than " + strconv.Itoa(MaxRequest) + " bytes")
	}
	u32 := func() (int, error) {
		if len(b) < 4 {
			return 0, errors.New("missing")
		}
		v := binary.BigEndian.Uint32(b)
		b = b[4:]
		if uint64(v) > uint64(len(b)) {
			return 0, fmt.Errorf("%d exceeds the %d bytes left", v, len(b))
		}
		return int(v), nil
	}
	str := func() (string, error) {
		n, err := u32()
		if err != nil {
			return "", fmt.Errorf("length %w", err)
		}
		s := b[:n]
		b = b[n:]
		if i := strings.IndexByte(string(s), 0); i >= 0 {
			return "", errors.New("NUL byte in a string")
		}
		return string(s), nil
	}
	list := func(what string) ([]string, error) {
		n, err := u32()
		if err != nil {
			return nil, fmt.Errorf("%s count: %w", what, err)
		}
		if n > len(b)/4 { // every string takes at least its 4-byte length
			return nil, fmt.Errorf("%s count %d exceeds the bytes left", what, n)
		}
		var out []string
		if n > 0 {
			out = make([]string, 0, n)
		}
		for range n {
			s, err := str()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			out = append(out, s)
		}
		return out, nil
	}
	var r Request
	var err error
	if r.Args, err = list("arguments"); err != nil {
		return bad(err.Error())
	}
	if r.Environ, err = list("environment"); err != nil {
		return bad(err.Error())
	}
	if r.Cwd, err = str(); err != nil {
		return bad("working directory: " + err.Error())
	}
	if len(b) != 0 {
		return bad("trailing bytes")
	}
	return r, nil
}

// requestFrames splits an encoded Request into a request frame and as many
// request-more frames as it takes, none longer than max bytes (at most
// MaxFrame, at least 64).
func requestFrames(body []byte, max int) [][]byte {
	max = min(MaxFrame, max)
	first := min(len(body), max-7)
	f, _ := encodeFrame(frame{Type: frameRequest, Version: Version, Total: uint32(len(body)), Data: body[:first]})
	out := [][]byte{f}
	for rest := body[first:]; len(rest) > 0; {
		n := min(len(rest), max-1)
		f, _ := encodeFrame(frame{Type: frameRequestMore, Data: rest[:n]})
		out = append(out, f)
		rest = rest[n:]
	}
	return out
}
