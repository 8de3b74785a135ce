package native

import "io"

// pipedStdin is a spec's stdin as the start modes hand it to os/exec or
// the vfork start: never the reader itself, so the sandbox always gets a
// pipe and never the caller's terminal (TIOCSTI and friends). The copy
// into that pipe (io.Copy) goes through the reader's own WriteTo where it
// has one rather than a buffer of io.Copy's on the heap, which is freed
// but not zeroed: a bytes.Reader over a secret's value (a stdin use)
// writes straight from the value's memory.
type pipedStdin struct{ r io.Reader }

func (s pipedStdin) Read(p []byte) (int, error) { return s.r.Read(p) }

func (s pipedStdin) WriteTo(w io.Writer) (int64, error) {
	if wt, ok := s.r.(io.WriterTo); ok {
		return wt.WriteTo(w)
	}
	// Hidden from io.Copy, which would call WriteTo again.
	return io.Copy(w, struct{ io.Reader }{s.r})
}
