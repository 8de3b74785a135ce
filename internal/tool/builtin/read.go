package builtin

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/changeset"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// The work one fs.read may do, whatever the file. The cap on what it
// shows is Options.MaxReadBytes; these bound what it reads to find it.
const (
	// maxReadScan is the most fs.read reads of one file: lines after
	// it are out of its reach (a note says so and what to use instead).
	maxReadScan = 64 << 20
	// maxBinaryShown: a binary file up to this size goes to the result
	// sanitizer whole, which summarises it with its SHA-256; a larger one
	// is summarised here from its first bytes, without a hash.
	maxBinaryShown = 1 << 20
	// sniffLen: a NUL byte in the first sniffLen bytes makes a file
	// binary, as git decides.
	sniffLen = 8000
	// maxEditFile caps the files read whole: fs.edit's, and the
	// package.json test.run's runner detection reads.
	maxEditFile = 16 << 20
)

// ReadIn is fs.read's input.
type ReadIn struct {
	Path      string `json:"path" jsonschema:"the file to read, relative to the workspace root"`
	StartLine int    `json:"start_line,omitempty" jsonschema:"first line to show (1-based); default 1"`
	EndLine   int    `json:"end_line,omitempty" jsonschema:"last line to show (inclusive); default the end"`
}

func (b *builtins) read() (*tool.Tool, error) {
	return tool.New(tool.Definition[ReadIn]{
		Name:        "fs.read",
		Description: "Read a text file of the workspace (with your pending edits), optionally a line range. Lines are numbered. Large files are cut; binary files are summarised.",
		Action:      operation.Read,
		Tags:        []string{tool.TagReads},
		Execution:   tool.Execution{Class: tool.FastPath},
		Normalize: func(_ context.Context, _ *tool.Resolver, in *ReadIn, op *operation.Operation) error {
			return b.insidePath(in.Path, op)
		},
		Run: func(ctx context.Context, in *ReadIn) (tool.Result, error) {
			rel, err := b.rel(in.Path)
			if err != nil {
				return errResult(err), nil
			}
			f, err := b.o.ChangeSet.Open(rel)
			if err != nil {
				return errResult(readError("fs.read", err)), nil
			}
			defer f.Close()
			out, err := readLines(ctx, f, in.StartLine, in.EndLine, b.o.MaxReadBytes)
			if err != nil {
				return tool.Result{}, fmt.Errorf("fs.read %s: %w", rel, err)
			}
			return tool.Result{Output: out}, nil
		},
	})
}

// readError words an error of opening a file to read for the model: a
// FIFO, socket or device is named as such (the tools read regular files
// only, so such a file can never hang the session).
func readError(tool string, err error) error {
	var nr *changeset.NotRegularError
	if errors.As(err, &nr) {
		return fmt.Errorf("%s: %w", tool, nr)
	}
	return err
}

// readAll reads the regular file rel of the merged view, at most
// maxEditFile bytes: the tools that edit a file take it in whole.
func (b *builtins) readAll(tool, rel string) ([]byte, error) {
	f, err := b.o.ChangeSet.Open(rel)
	if err != nil {
		return nil, readError(tool, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxEditFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxEditFile {
		return nil, fmt.Errorf("%s: %s is larger than %d MiB; %s takes files up to that size (use shell.exec for larger ones)", tool, rel, maxEditFile>>20, tool)
	}
	return data, nil
}

// ctxReader ends reads once ctx is done, and counts what was read.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
	n   int64
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// readLines reads lines [start, end] of r, numbered, at most max bytes of
// them (then a note saying where to read on), reading at most
// maxReadScan bytes of r. Binary content (a NUL in the first sniffLen
// bytes) is returned as is when it is small, for the sanitizer to
// summarise, and summarised here otherwise. It fails only when ctx ends
// or r fails.
func readLines(ctx context.Context, r io.Reader, start, end, max int) ([]byte, error) {
	cr := &ctxReader{ctx: ctx, r: r}
	return readLinesFrom(cr, start, end, max)
}

func readLinesFrom(cr *ctxReader, start, end, max int) ([]byte, error) {
	br := bufio.NewReaderSize(cr, 64<<10)
	head, err := br.Peek(sniffLen)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return nil, err
	}
	if bytes.IndexByte(head, 0) >= 0 {
		data, err := io.ReadAll(io.LimitReader(br, maxBinaryShown+1))
		if err != nil {
			return nil, err
		}
		if len(data) <= maxBinaryShown {
			return data, nil
		}
		return fmt.Appendf(nil, "[fs.read: a binary file (%s, a NUL byte in its first %d bytes) of more than %d MiB: not shown and not hashed]\n",
			http.DetectContentType(head), sniffLen, maxBinaryShown>>20), nil
	}
	if start < 1 {
		start = 1
	}
	var sb strings.Builder
	line := 0      // lines seen
	stopped := 0   // the line the size cap stopped at (0: none)
	var cur []byte // the current line, at most max bytes of it
	var l []byte   // the current line as shown
	curLen := 0    // its whole length
	eof := false
	for !eof {
		frag, err := br.ReadSlice('\n')
		full := errors.Is(err, bufio.ErrBufferFull)
		eof = errors.Is(err, io.EOF)
		if err != nil && !full && !eof {
			return nil, err
		}
		want := line+1 >= start && (end <= 0 || line+1 <= end) && stopped == 0
		if want && len(cur) < max {
			cur = append(cur, frag[:min(len(frag), max-len(cur))]...)
		}
		curLen += len(frag)
		last := cr.n > maxReadScan
		if (!full || last) && curLen > 0 {
			// A line ends (with its newline, at the end of the file, or
			// where fs.read stops reading).
			line++
			if want {
				l = appendLineNo(l[:0], line)
				l = append(l, bytes.TrimSuffix(cur, []byte("\n"))...)
				switch {
				case full:
					l = fmt.Appendf(l, " [line cut: more than %d bytes]", curLen)
				case curLen > max:
					l = fmt.Appendf(l, " [line cut: %d bytes]", curLen)
				}
				if sb.Len() > 0 && sb.Len()+len(l) > max {
					stopped = line
				} else {
					sb.Write(l)
					sb.WriteByte('\n')
				}
			}
			cur, curLen = cur[:0], 0
		}
		if end > 0 && line >= end || last {
			break
		}
	}
	switch {
	case stopped > 0 && eof:
		fmt.Fprintf(&sb, "[fs.read: stopped at line %d of %d (size cap %d bytes); read on with start_line=%d]\n", stopped, line, max, stopped)
	case stopped > 0:
		fmt.Fprintf(&sb, "[fs.read: stopped at line %d (size cap %d bytes); read on with start_line=%d]\n", stopped, max, stopped)
	case !eof && (end <= 0 || line < end):
		fmt.Fprintf(&sb, "[fs.read: stopped after reading the first %d MiB of the file, at line %d: fs.read reads no further into a file; search.grep finds lines further on]\n", maxReadScan>>20, line)
	case start > line && line > 0:
		fmt.Fprintf(&sb, "[fs.read: the file has %d lines]\n", line)
	}
	return []byte(sb.String()), nil
}

// appendLineNo appends n right-aligned in six columns and a tab, as
// fmt's "%6d\t" does.
func appendLineNo(b []byte, n int) []byte {
	var d [20]byte
	num := strconv.AppendInt(d[:0], int64(n), 10)
	for range 6 - len(num) {
		b = append(b, ' ')
	}
	return append(append(b, num...), '\t')
}

// isBinary: a NUL in the first sniffLen bytes.
func isBinary(b []byte) bool {
	return bytes.IndexByte(b[:min(len(b), sniffLen)], 0) >= 0
}
