package cli

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/fluffy-agent/fluffy/internal/tui/termsafe"
)

// ExitInternal is the exit status of a panic: a bug in fluffy.
const ExitInternal = 70

// recoverPanic turns a panic in a command into one message and
// ExitInternal; the stack is printed only with --debug.
func (a *App) recoverPanic(code *int) {
	p := recover()
	if p == nil {
		return
	}
	*code = ExitInternal
	fmt.Fprintf(a.Stderr, "fluffy: internal error: %s\n", termsafe.String(fmt.Sprint(p)))
	if a.debug {
		fmt.Fprintf(a.Stderr, "%s", debug.Stack())
		fmt.Fprintln(a.Stderr, "fix: this is a bug in fluffy; please report it with the trace above")
		return
	}
	fmt.Fprintln(a.Stderr, "fix: this is a bug in fluffy; run the command again with --debug to see where it happened, and report it")
}

// printErrorChain prints the types of the wrapped errors (--debug).
func printErrorChain(w io.Writer, err error) {
	fmt.Fprint(w, "debug: error chain:")
	for depth := 0; err != nil && depth < 16; depth++ {
		fmt.Fprintf(w, " %T", err)
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			fmt.Fprintf(w, " (joins %d)", len(j.Unwrap()))
			break
		}
		err = errors.Unwrap(err)
		if err != nil {
			fmt.Fprint(w, " →")
		}
	}
	fmt.Fprintln(w)
}
