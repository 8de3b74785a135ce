package ipc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frame limits.
const (
	// HeaderSize is the size of a frame's length prefix.
	HeaderSize = 4
	// DefaultMaxFrame is the largest payload a peer accepts unless told
	// otherwise: 1 MiB.
	DefaultMaxFrame = 1 << 20
	// HardMaxFrame is the largest MaxFrame either side may configure:
	// 64 MiB.
	HardMaxFrame = 64 << 20
)

// Frame errors. A connection that hits one of them is out of sync (or was
// never speaking the protocol) and must be closed.
var (
	// ErrFrameTooLarge: the length prefix exceeds the maximum frame size.
	ErrFrameTooLarge = errors.New("ipc: frame too large")
	// ErrEmptyFrame: a frame with a zero length prefix (no JSON value).
	ErrEmptyFrame = errors.New("ipc: empty frame")
	// ErrTruncated: the stream ended inside a frame.
	ErrTruncated = errors.New("ipc: truncated frame")
)

// FrameSizeError reports a length prefix over the limit.
type FrameSizeError struct {
	Size, Max uint32
}

func (e *FrameSizeError) Error() string {
	return fmt.Sprintf("ipc: frame of %d bytes exceeds the maximum of %d", e.Size, e.Max)
}

// Unwrap makes errors.Is(err, ErrFrameTooLarge) hold.
func (e *FrameSizeError) Unwrap() error { return ErrFrameTooLarge }

// ReadFrame reads one frame from r and returns its payload. max is the
// largest payload accepted (DefaultMaxFrame when <= 0). It returns io.EOF
// only when r ends cleanly between frames; a stream ending inside a frame
// gives ErrTruncated. The payload of an oversized frame is not read.
func ReadFrame(r io.Reader, max int) ([]byte, error) {
	max = clampMax(max)
	var hdr [HeaderSize]byte
	if k, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: %d of %d header bytes", ErrTruncated, k, HeaderSize)
		}
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 {
		return nil, ErrEmptyFrame
	}
	if n > uint32(max) {
		return nil, &FrameSizeError{Size: n, Max: uint32(max)}
	}
	buf := make([]byte, n)
	if k, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: %d of %d payload bytes", ErrTruncated, k, n)
		}
		return nil, err
	}
	return buf, nil
}

// AppendFrame appends payload, framed, to dst.
func AppendFrame(dst, payload []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	return append(dst, payload...)
}

// WriteFrame writes payload as one frame with a single Write call. It
// refuses payloads larger than max (DefaultMaxFrame when <= 0) or empty.
func WriteFrame(w io.Writer, payload []byte, max int) error {
	max = clampMax(max)
	if len(payload) == 0 {
		return ErrEmptyFrame
	}
	if len(payload) > max {
		return &FrameSizeError{Size: uint32(min(len(payload), 1<<32-1)), Max: uint32(max)}
	}
	_, err := w.Write(AppendFrame(make([]byte, 0, HeaderSize+len(payload)), payload))
	return err
}

func clampMax(max int) int {
	if max <= 0 {
		return DefaultMaxFrame
	}
	return min(max, HardMaxFrame)
}
