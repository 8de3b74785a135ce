package tui

import (
	"bytes"
	"io"
	"strings"
)

// Bracketed paste (xterm): a terminal in mode 2004 wraps pasted text in
// PasteStart and PasteEnd.
const (
	PasteOn    = "\x1b[?2004h" // ask the terminal to bracket pastes
	PasteOff   = "\x1b[?2004l"
	PasteStart = "\x1b[200~"
	PasteEnd   = "\x1b[201~"
)

// NewlineMark stands for a newline inside a pasted text while it is being
// edited on one line; Unmark turns it back.
const NewlineMark = '␤'

// Unmark turns NewlineMarks back into newlines.
func Unmark(s string) string { return strings.ReplaceAll(s, string(NewlineMark), "\n") }

// PasteFilter reads terminal input and rewrites bracketed pastes: the
// markers are dropped and each line break inside a paste (\r, \n or \r\n)
// becomes NewlineMark, so a pasted block stays one input line for a line
// editor that ends a line at Enter. Everything else passes unchanged.
type PasteFilter struct {
	r       io.Reader
	buf     []byte // input read but not yet examined
	out     []byte // output ready to return
	pasting bool
	lastCR  bool // the previous pasted byte was \r
}

// NewPasteFilter wraps r.
func NewPasteFilter(r io.Reader) *PasteFilter { return &PasteFilter{r: r} }

// Read implements io.Reader.
func (f *PasteFilter) Read(p []byte) (int, error) {
	for len(f.out) == 0 {
		var tmp [512]byte
		n, err := f.r.Read(tmp[:])
		f.buf = append(f.buf, tmp[:n]...)
		f.process(err != nil)
		if len(f.out) == 0 && err != nil {
			return 0, err
		}
	}
	n := copy(p, f.out)
	f.out = f.out[n:]
	return n, nil
}

// process moves what can be decided from buf to out; at EOF a partial
// marker is passed on as it is.
func (f *PasteFilter) process(eof bool) {
	for len(f.buf) > 0 {
		i := bytes.IndexByte(f.buf, 0x1b)
		if i < 0 {
			f.emit(f.buf)
			f.buf = f.buf[:0]
			return
		}
		f.emit(f.buf[:i])
		f.buf = f.buf[i:]
		marker := PasteStart
		if f.pasting {
			marker = PasteEnd
		}
		switch {
		case bytes.HasPrefix(f.buf, []byte(marker)):
			f.pasting, f.lastCR = !f.pasting, false
			f.buf = f.buf[len(marker):]
		case len(f.buf) < len(marker) && bytes.HasPrefix([]byte(marker), f.buf) && !eof:
			return // wait for the rest of a possible marker
		default:
			f.emit(f.buf[:1])
			f.buf = f.buf[1:]
		}
	}
}

func (f *PasteFilter) emit(b []byte) {
	if !f.pasting {
		f.out = append(f.out, b...)
		return
	}
	for _, c := range b {
		switch {
		case c == '\r':
			f.out = append(f.out, string(NewlineMark)...)
			f.lastCR = true
			continue
		case c == '\n' && f.lastCR:
			// \r\n is one line break
		case c == '\n':
			f.out = append(f.out, string(NewlineMark)...)
		default:
			f.out = append(f.out, c)
		}
		f.lastCR = false
	}
}
