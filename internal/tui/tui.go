// Package tui draws fluffy's terminal interface: colours (only on a
// terminal, never with NO_COLOR or TERM=dumb), a status line kept on the
// bottom row while the output scrolls above it, diff statistics and
// per-file diffs for review, and an input filter that keeps a bracketed
// paste on one editable line. It knows nothing of sessions: internal/cli
// feeds it text. The diffs, names and status text it draws pass through
// termsafe (internal/tui/termsafe), the escaper every untrusted text takes
// on its way to a terminal.
package tui

import (
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Caps is what the output terminal can do.
type Caps struct {
	// TTY: the output is a terminal (redraw in place, prompts with line
	// editing).
	TTY bool
	// Color: ANSI colours are wanted.
	Color bool
	// FD is the terminal's file descriptor (valid when TTY).
	FD int
}

// Detect looks at w and the environment: colour needs a terminal, no
// NO_COLOR (any value, https://no-color.org) and a TERM other than dumb.
func Detect(w io.Writer, getenv func(string) (string, bool)) Caps {
	f, ok := w.(*os.File)
	if !ok || !IsTerminal(int(f.Fd())) {
		return Caps{}
	}
	c := Caps{TTY: true, FD: int(f.Fd()), Color: true}
	if v, ok := getenv("NO_COLOR"); ok && v != "" {
		c.Color = false
	}
	if t, _ := getenv("TERM"); t == "dumb" {
		c.Color, c.TTY = false, false
	}
	return c
}

// IsTerminal reports whether fd is a terminal.
func IsTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}

// Size returns a terminal's columns and rows.
func Size(fd int) (cols, rows int, err error) {
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil {
		return 0, 0, err
	}
	return int(ws.Col), int(ws.Row), nil
}

// Colours and attributes (SGR parameters).
const (
	Bold   = "1"
	Dim    = "2"
	Red    = "31"
	Green  = "32"
	Yellow = "33"
	Blue   = "34"
	Cyan   = "36"
)

// Paint wraps s in the SGR attribute when colour is on.
func (c Caps) Paint(attr, s string) string {
	if !c.Color || s == "" {
		return s
	}
	return "\x1b[" + attr + "m" + s + "\x1b[0m"
}

// Clip shortens s to at most n runes, marking the cut with "…".
func Clip(s string, n int) string {
	if n <= 0 {
		return ""
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	if n == 1 {
		return "…"
	}
	return string(r[:n-1]) + "…"
}

// OneLine joins s's words with single spaces and clips it to n runes.
func OneLine(s string, n int) string {
	return Clip(strings.Join(strings.Fields(s), " "), n)
}
