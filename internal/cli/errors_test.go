package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// panicWriter panics on the first write: a bug somewhere in a command.
type panicWriter struct{}

func (panicWriter) Write([]byte) (int, error) { panic("renderer exploded") }

func TestErrorPrinting(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		stdout  interface{ Write([]byte) (int, error) }
		code    int
		want    []string
		wantNot []string
	}{
		{"panic without --debug: one message, no stack", []string{"version"}, panicWriter{}, ExitInternal,
			[]string{"fluffy: internal error: renderer exploded\n", "fix: this is a bug in fluffy; run the command again with --debug"},
			[]string{"goroutine ", "errors.go:", "debug.Stack"}},
		{"panic with --debug: the stack", []string{"--debug", "version"}, panicWriter{}, ExitInternal,
			[]string{"fluffy: internal error: renderer exploded", "goroutine ", "fix: this is a bug in fluffy; please report it"}, nil},
		{"an error: what, why, fix; no internals", []string{"--set", "sandbox.runtime=bogus", "config", "show"}, &bytes.Buffer{}, ExitUsage,
			[]string{"fluffy: invalid configuration", "sandbox.runtime"}, []string{"goroutine ", "debug: error chain"}},
		{"an error with --debug: the chain of types", []string{"--debug", "--set", "sandbox.runtime=bogus", "config", "show"}, &bytes.Buffer{}, ExitUsage,
			[]string{"fluffy: invalid configuration", "debug: error chain: *fmt.wrapError"}, []string{"goroutine "}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stderr bytes.Buffer
			a := &App{Stdin: strings.NewReader(""), Stdout: c.stdout, Stderr: &stderr, Environ: []string{"HOME=" + t.TempDir()}, Cwd: t.TempDir(), Self: "/nonexistent"}
			code := Main(context.Background(), a, c.args)
			if code != c.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, c.code, stderr.String())
			}
			for _, w := range c.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
			for _, w := range c.wantNot {
				if strings.Contains(stderr.String(), w) {
					t.Errorf("stderr has %q:\n%s", w, stderr.String())
				}
			}
		})
	}
}
