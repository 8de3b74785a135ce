package tui

import (
	"fmt"
	"io"
	"sync"

	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

// Bar is a status line on the terminal's bottom row. While it is on, the
// rows above are a scrolling region (DECSTBM), so output scrolls without
// touching it and Set redraws it in place — the technique apt uses for its
// progress bar. Stop gives the row back. Bar is safe for concurrent use;
// writes of other output must not interleave with its own, so write the
// output through the Bar (it implements io.Writer) while it is on.
type Bar struct {
	w    io.Writer
	size func() (cols, rows int, err error)

	mu   sync.Mutex // guards the fields below
	on   bool
	cols int
	rows int
	text string
}

// NewBar returns a bar drawing on w; size reports the terminal's size.
func NewBar(w io.Writer, size func() (cols, rows int, err error)) *Bar {
	return &Bar{w: w, size: size}
}

// Start reserves the bottom row. It does nothing on a terminal too small
// to spare one (under 4 rows) or whose size is unknown.
func (b *Bar) Start() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.on {
		return
	}
	cols, rows, err := b.size()
	if err != nil || rows < 4 || cols < 10 {
		return
	}
	b.on, b.cols, b.rows = true, cols, rows
	// A new line first, so that shrinking the region by one row does not
	// hide the cursor's line; then the region, keeping the cursor inside.
	fmt.Fprintf(b.w, "\n\x1b7\x1b[1;%dr\x1b8\x1b[1A", rows-1)
	b.drawLocked()
}

// Set changes the text and redraws it.
func (b *Bar) Set(text string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.text = text
	if b.on {
		b.drawLocked()
	}
}

// Text returns the current text.
func (b *Bar) Text() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.text
}

// On reports whether the bar holds the bottom row.
func (b *Bar) On() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.on
}

// Resize follows a change of the terminal's size (SIGWINCH).
func (b *Bar) Resize() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.on {
		return
	}
	cols, rows, err := b.size()
	if err != nil || rows < 4 || cols < 10 {
		b.stopLocked()
		return
	}
	if rows != b.rows {
		// Clear the old bottom row, which may now be inside the region.
		fmt.Fprintf(b.w, "\x1b7\x1b[%d;1H\x1b[2K\x1b8", min(b.rows, rows))
	}
	b.cols, b.rows = cols, rows
	fmt.Fprintf(b.w, "\x1b7\x1b[1;%dr\x1b8", rows-1)
	b.drawLocked()
}

// Stop gives the bottom row back and clears it.
func (b *Bar) Stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopLocked()
}

func (b *Bar) stopLocked() {
	if !b.on {
		return
	}
	b.on = false
	fmt.Fprintf(b.w, "\x1b7\x1b[r\x1b[%d;1H\x1b[2K\x1b8", b.rows)
}

func (b *Bar) drawLocked() {
	// Save the cursor, go to the bottom row, draw in reverse video, clear
	// the rest, come back.
	// The text can hold names from outside (a model, a session's tests):
	// escaped, it cannot move the cursor out of the row.
	fmt.Fprintf(b.w, "\x1b7\x1b[%d;1H\x1b[2K\x1b[7m %s \x1b[0m\x1b8", b.rows, Clip(termsafe.Line(b.text), b.cols-3))
}

// Write writes p to the terminal under the bar's lock, so output and
// redraws do not interleave.
func (b *Bar) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Write(p)
}
