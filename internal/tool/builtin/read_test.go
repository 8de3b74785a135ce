package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

func TestReadLines(t *testing.T) {
	long := strings.Repeat("x", 100)
	for _, c := range []struct {
		name             string
		data             string
		start, end, max  int
		want, notContain string
	}{
		{"all", "one\ntwo\nthree\n", 0, 0, 1000, "     1\tone\n     2\ttwo\n     3\tthree\n", ""},
		{"range", "one\ntwo\nthree\n", 2, 2, 1000, "     2\ttwo\n", ""},
		{"no final newline", "one\ntwo", 0, 0, 1000, "     1\tone\n     2\ttwo\n", ""},
		{"empty", "", 0, 0, 1000, "", ""},
		{"cap", "one\ntwo\nthree\n", 0, 0, 20, "stopped at line 2 of 3 (size cap 20 bytes); read on with start_line=2", "three"},
		{"cap with end", "one\ntwo\nthree\nfour\n", 1, 3, 20, "stopped at line 2 (size cap 20 bytes)", "of"},
		{"past the end", "one\ntwo\nthree\n", 9, 0, 1000, "[fs.read: the file has 3 lines]", ""},
		{"end past the end", "one\ntwo\n", 2, 9, 1000, "     2\ttwo\n", "has"},
		// A line longer than the cap is shown cut, never skipped: a
		// note pointing back at the same line would loop the model.
		{"one long line", long + "\nnext\n", 0, 0, 40, "     1\t" + long[:40] + " [line cut: 101 bytes]\n", ""},
		{"binary", "a\x00b", 0, 0, 1000, "a\x00b", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := readLines(t.Context(), strings.NewReader(c.data), c.start, c.end, c.max)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(got), c.want) || c.want == "" && len(got) != 0 {
				t.Errorf("= %q, want it to contain %q", got, c.want)
			}
			if c.notContain != "" && strings.Contains(string(got), c.notContain) {
				t.Errorf("= %q, want no %q", got, c.notContain)
			}
		})
	}
}

// endless is an infinite reader of one byte pattern.
type endless struct{ pat []byte }

func (e endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = e.pat[i%len(e.pat)]
	}
	return len(p), nil
}

// Whatever the file, fs.read reads a bounded amount of it: an endless
// text, an endless line, an endless run of NULs (a huge sparse file).
func TestReadLinesBoundedWork(t *testing.T) {
	const slack = 128 << 10 // the reader's buffer
	for _, c := range []struct {
		name       string
		pat        string
		start, max int
		bound      int64
		want       string
	}{
		{"lines past the scan limit", "text line\n", 1 << 30, 1000, maxReadScan + slack, "stopped after reading the first 64 MiB"},
		{"the cap, then counting", "text line\n", 0, 1000, maxReadScan + slack, "stopped at line 59 (size cap 1000 bytes)"},
		{"one endless line", "x", 0, 1000, maxReadScan + slack, "[line cut: more than 67"},
		{"zeros", "\x00", 0, 1000, maxBinaryShown + slack, "of more than 1 MiB: not shown and not hashed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cr := &ctxReader{ctx: t.Context(), r: endless{[]byte(c.pat)}}
			got, err := readLinesFrom(cr, c.start, 0, c.max)
			if err != nil {
				t.Fatal(err)
			}
			if cr.n > c.bound {
				t.Errorf("read %d bytes, want at most %d", cr.n, c.bound)
			}
			if !strings.Contains(string(got), c.want) {
				t.Errorf("= …%q, want %q", got[max(0, len(got)-300):], c.want)
			}
		})
	}
}

// A cancelled read ends at the next chunk, with the context's error.
func TestReadLinesCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := readLines(ctx, endless{[]byte("x\n")}, 1<<30, 0, 1000)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// toolEnv is a workspace with a real change set and every built-in tool.
type toolEnv struct {
	ws  string
	cs  *changeset.ChangeSet
	reg *tool.Registry
	res *tool.Resolver
}

func newToolEnv(t *testing.T, files map[string]string) *toolEnv {
	t.Helper()
	e := newEditEnv(t, files)
	reg := tool.NewRegistry()
	if err := Register(reg, Options{ChangeSet: e.cs, Resolver: e.res}); err != nil {
		t.Fatal(err)
	}
	return &toolEnv{ws: e.ws, cs: e.cs, reg: reg, res: e.res}
}

// run decodes, normalizes and runs a tool as the router would.
func (e *toolEnv) run(t *testing.T, ctx context.Context, name string, in map[string]any) (tool.Result, error) {
	t.Helper()
	tl, err := e.reg.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(in)
	args, err := tl.Decode(raw)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if _, err := tl.Normalize(ctx, e.res, args, operation.Session{ID: "s", Workspace: e.res.Workspace()}); err != nil {
		t.Fatalf("normalize: %v", err)
	}
	return tl.Run(ctx, args)
}

// mkSpecial makes a FIFO (with a writer holding it open, so a
// non-blocking open alone would not save a reader) or a listening unix
// socket at p.
func mkSpecial(t *testing.T, kind, p string) {
	t.Helper()
	switch kind {
	case "fifo":
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
		w, err := os.OpenFile(p, os.O_RDWR, 0) // O_RDWR: does not wait for a reader
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
	case "socket":
		l, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
	}
}

// A FIFO or a socket, in the workspace or in the change set's upper
// layer (made by a sandboxed command), never blocks a tool: fs.read and
// fs.edit refuse it naming what it is; search.grep passes over it.
func TestSpecialFiles(t *testing.T) {
	for _, kind := range []string{"fifo", "socket"} {
		for _, layer := range []string{"lower", "upper"} {
			t.Run(kind+"/"+layer, func(t *testing.T) {
				e := newToolEnv(t, map[string]string{"ok.txt": "NEEDLE here\n"})
				dir := e.ws
				if layer == "upper" {
					dir = e.cs.UpperDir()
				}
				mkSpecial(t, kind, filepath.Join(dir, "special"))
				if _, err := e.cs.Stat("special"); err != nil {
					t.Fatalf("the merged view does not show the %s: %v", kind, err)
				}
				what := map[string]string{"fifo": "a FIFO (named pipe)", "socket": "a socket"}[kind]
				for _, c := range []struct {
					tool string
					in   map[string]any
					want string
				}{
					{"fs.read", map[string]any{"path": "special"}, "fs.read: special is " + what + ", not a regular file; fluffy reads only regular files"},
					{"fs.edit", map[string]any{"path": "special", "old": "a", "new": "b"}, "fs.edit: special is " + what + ", not a regular file"},
					{"fs.edit", map[string]any{"diff": "--- a/special\n+++ b/special\n@@ -1 +1 @@\n-a\n+b\n"}, "special"},
				} {
					r, err := e.run(t, t.Context(), c.tool, c.in)
					if err != nil {
						t.Fatalf("%s: %v", c.tool, err)
					}
					if !r.IsError || !strings.Contains(string(r.Output), c.want) {
						t.Errorf("%s = %q (error %v), want an error containing %q", c.tool, r.Output, r.IsError, c.want)
					}
				}
				r, err := e.run(t, t.Context(), "fs.exists", map[string]any{"path": "special"})
				if err != nil || !strings.Contains(string(r.Output), "yes: special is a special file (a FIFO, socket or device)") {
					t.Errorf("fs.exists = %q, %v", r.Output, err)
				}
				r, err = e.run(t, t.Context(), "search.grep", map[string]any{"pattern": "NEEDLE"})
				if err != nil || r.IsError || !strings.Contains(string(r.Output), "ok.txt:1:NEEDLE here") {
					t.Errorf("search.grep = %q, %v", r.Output, err)
				}
				// The .gitignore the search tools read is a FIFO too.
				mkSpecial(t, kind, filepath.Join(dir, ".gitignore"))
				r, err = e.run(t, t.Context(), "search.glob", map[string]any{"pattern": "*.txt"})
				if err != nil || r.IsError || !strings.Contains(string(r.Output), "ok.txt") {
					t.Errorf("search.glob = %q, %v", r.Output, err)
				}
			})
		}
	}
}

// A 4 GiB sparse file is answered at once: summarised from its first
// bytes (not read, not hashed whole); one with text first is cut at the
// scan limit.
func TestReadHugeSparseFile(t *testing.T) {
	e := newToolEnv(t, nil)
	for _, c := range []struct {
		name, head, want string
	}{
		{"holes", "", "of more than 1 MiB: not shown and not hashed"},
		{"text, then holes", strings.Repeat("a line\n", 2000), "stopped at line 2001 (size cap 262144 bytes)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(e.ws, "sparse-"+strings.ReplaceAll(c.name, " ", ""))
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString(c.head)
			if err := f.Truncate(4 << 30); err != nil {
				t.Skip("no sparse files here:", err)
			}
			f.Close()
			r, err := e.run(t, t.Context(), "fs.read", map[string]any{"path": filepath.Base(p)})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Output) > 300<<10 || !bytes.Contains(r.Output, []byte(c.want)) {
				t.Errorf("fs.read = %d bytes …%q, want at most 300 KiB containing %q", len(r.Output), r.Output[max(0, len(r.Output)-300):], c.want)
			}
		})
	}
}

// fs.read honours its context between chunks.
func TestReadToolCancelled(t *testing.T) {
	e := newToolEnv(t, map[string]string{"a.txt": strings.Repeat("line\n", 100000)})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := e.run(t, ctx, "fs.read", map[string]any{"path": "a.txt"})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

var _ io.Reader = endless{}

// Every fast-path tool ends with its context's error when cancelled (the
// session cancelled, the kernel stopping), never with a partial answer
// passed off as whole. The list is the registry's, so a new fast-path
// tool is held to it too.
func TestFastPathToolsCancelled(t *testing.T) {
	e := newToolEnv(t, map[string]string{"a.txt": "NEEDLE\n", "d/b.txt": "x\n", ".git/HEAD": "ref: refs/heads/main\n"})
	args := map[string]map[string]any{
		"fs.read": {"path": "a.txt"}, "fs.list": {"path": "."}, "fs.exists": {"path": "a.txt"},
		"search.grep": {"pattern": "NEEDLE"}, "search.glob": {"pattern": "*.txt"},
		"git.status": {}, "git.diff": {}, "git.log": {},
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	n := 0
	for _, tl := range e.reg.List() {
		if tl.Execution().Class != tool.FastPath {
			continue
		}
		n++
		in, ok := args[tl.Name()]
		if !ok {
			t.Errorf("fast-path tool %s: add its arguments to this test", tl.Name())
			continue
		}
		r, err := e.run(t, ctx, tl.Name(), in)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s cancelled = %q, %v; want context.Canceled", tl.Name(), r.Output, err)
		}
	}
	if n < len(args) {
		t.Errorf("only %d fast-path tools registered, want %d", n, len(args))
	}
}

// FuzzReadLines: any file content and range gives, without panicking, at
// most about max bytes of numbered lines, in order, each the file's own
// line (cut at max), and a text file read whole with a large cap gives
// back every line.
func FuzzReadLines(f *testing.F) {
	f.Add("one\ntwo\nthree\n", 0, 0, 1000)
	f.Add("a\r\nb", 2, 2, 10)
	f.Add("x\x00y\n", 0, 0, 100)
	f.Add(strings.Repeat("long line ", 50)+"\nshort\n", 1, 0, 64)
	f.Add("\n\n\n", 3, 1, 5)
	f.Fuzz(func(t *testing.T, data string, start, end, capBytes int) {
		if capBytes <= 0 || capBytes > 1<<16 {
			return
		}
		out, err := readLines(t.Context(), strings.NewReader(data), start, end, capBytes)
		if err != nil {
			t.Fatal(err)
		}
		if strings.IndexByte(data[:min(len(data), sniffLen)], 0) >= 0 {
			if string(out) != data {
				t.Fatalf("binary content changed: %q", out)
			}
			return
		}
		lines := strings.SplitAfter(data, "\n")
		if lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		prev, shown := 0, 0
		for _, l := range strings.SplitAfter(string(out), "\n") {
			if l == "" || strings.HasPrefix(l, "[fs.read: ") {
				continue
			}
			num, text, ok := strings.Cut(l, "\t")
			var n int
			if _, err := fmt.Sscan(strings.TrimSpace(num), &n); !ok || err != nil {
				t.Fatalf("line %q has no number", l)
			}
			if n <= prev || n < max(start, 1) || end > 0 && n > end || n > len(lines) {
				t.Fatalf("line number %d after %d (start %d, end %d, %d lines)", n, prev, start, end, len(lines))
			}
			want := strings.TrimSuffix(lines[n-1], "\n")
			text = strings.TrimSuffix(text, "\n")
			if text != want && !(strings.Contains(text, " [line cut: ") && strings.HasPrefix(want, text[:strings.LastIndex(text, " [line cut: ")])) {
				t.Fatalf("line %d = %q, the file has %q", n, text, want)
			}
			prev = n
			shown += len(l)
		}
		if shown > capBytes+len(" [line cut: 1234567890 bytes]")+16 && prev > max(start, 1) {
			t.Fatalf("%d bytes of lines shown over a cap of %d", shown, capBytes)
		}
	})
}
