package builtin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"regexp"
	"regexp/syntax"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/tool"
)

// GrepIn is search.grep's input.
type GrepIn struct {
	Pattern        string `json:"pattern" jsonschema:"a Go (RE2) regular expression"`
	Path           string `json:"path,omitempty" jsonschema:"directory or file to search; default the workspace root"`
	Glob           string `json:"glob,omitempty" jsonschema:"only files whose name matches this glob, e.g. *.go"`
	MaxMatches     int    `json:"max_matches,omitempty" jsonschema:"stop after this many matching lines"`
	IncludeIgnored bool   `json:"include_ignored,omitempty" jsonschema:"also search files .gitignore excludes (build output, dependencies)"`
}

// Limits of search.grep's work per file.
const (
	maxGrepFile = 64 << 20 // larger files are skipped
	maxLineShow = 500      // bytes of a matching line shown
)

func (b *builtins) grep() (*tool.Tool, error) {
	return tool.New(tool.Definition[GrepIn]{
		Name:        "search.grep",
		Description: "Search the workspace's files (with your pending edits) for a regular expression; prints path:line:text (a path with unusual characters or a ':' in double quotes, escaped, as fs.list shows it). Skips .git, binary files and what .gitignore excludes (include_ignored searches those too).",
		Action:      operation.Read,
		Tags:        []string{tool.TagReads},
		Execution:   tool.Execution{Class: tool.FastPath},
		Normalize: func(_ context.Context, _ *tool.Resolver, in *GrepIn, op *operation.Operation) error {
			return b.insidePath(in.Path, op)
		},
		Run: func(ctx context.Context, in *GrepIn) (tool.Result, error) {
			m, err := newLineMatcher(in.Pattern)
			if err != nil {
				return errResult(fmt.Errorf("bad pattern: %w", err)), nil
			}
			if in.Glob != "" {
				if _, err := path.Match(in.Glob, ""); err != nil {
					return errResult(fmt.Errorf("bad glob: %w", err)), nil
				}
			}
			rel, err := b.rel(orDot(in.Path))
			if err != nil {
				return errResult(err), nil
			}
			limit := in.MaxMatches
			if limit <= 0 || limit > b.o.MaxMatches {
				limit = b.o.MaxMatches
			}
			out, n, err := b.search(ctx, m, rel, in.Glob, limit, in.IncludeIgnored)
			if ctx.Err() != nil {
				return tool.Result{}, fmt.Errorf("search.grep: %w", ctx.Err())
			}
			if err != nil {
				return errResult(err), nil
			}
			if n == 0 {
				out = append(out, "no matches\n"...)
			} else if n >= limit {
				out = fmt.Appendf(out, "[search.grep: stopped after %d matches]\n", limit)
			}
			return tool.Result{Output: out}, nil
		},
	})
}

// lineMatcher finds the lines of a file that match a pattern, without
// running the regular expression on every line: a literal every match
// contains (found with bytes.Index) or a multi-line form of the pattern
// finds candidate lines, which the line pattern then confirms.
type lineMatcher struct {
	re    *regexp.Regexp // the pattern, run on one line
	multi *regexp.Regexp // (?m) form run on the whole file; nil when unsafe
	lit   []byte         // a literal every match contains; nil when none
	rare  byte           // lit's rarest byte (byteRank), searched first
	off   int            // its offset in lit
}

func newLineMatcher(pattern string) (*lineMatcher, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, err
	}
	m := &lineMatcher{re: re, multi: prefilter(pattern)}
	if l := requiredLiteral(pattern); len(l) >= 2 {
		m.lit = []byte(l)
		for i, c := range m.lit {
			if byteRank[c] < byteRank[m.rare] || i == 0 {
				m.rare, m.off = c, i
			}
		}
	}
	return m, nil
}

// index returns the first offset of m.lit in data, or -1: the rarest
// byte of the literal is found with bytes.IndexByte (SIMD), then the
// literal is compared there. Literals made only of common bytes use
// bytes.Index.
func (m *lineMatcher) index(data []byte) int {
	if byteRank[m.rare] > 240 {
		return bytes.Index(data, m.lit)
	}
	pos := 0
	for pos+m.off < len(data) {
		i := bytes.IndexByte(data[pos+m.off:], m.rare)
		if i < 0 {
			return -1
		}
		start := pos + i
		if start+len(m.lit) <= len(data) && bytes.Equal(data[start:start+len(m.lit)], m.lit) {
			return start
		}
		pos = start + 1
	}
	return -1
}

// byteRank orders bytes by how often they occur in source code (0 the
// rarest, 255 the most common), measured on the Go distribution's
// sources; search.grep looks for a literal's rarest byte first.
var byteRank = [256]uint8{
	0, 1, 2, 3, 4, 5, 6, 7, 8, 245, 244, 9, 10, 11, 12, 13,
	14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 151, 25, 26, 27, 28,
	255, 186, 223, 165, 162, 184, 175, 169, 225, 224, 201, 174, 231, 200, 242, 234,
	236, 239, 219, 221, 229, 220, 222, 215, 227, 218, 213, 180, 193, 217, 192, 164,
	154, 202, 176, 206, 194, 207, 199, 182, 173, 196, 168, 179, 204, 191, 197, 198,
	195, 163, 205, 214, 203, 185, 171, 177, 167, 172, 161, 190, 188, 189, 159, 235,
	178, 249, 230, 241, 237, 254, 253, 232, 228, 248, 183, 208, 243, 238, 251, 246,
	233, 181, 250, 247, 252, 240, 209, 212, 216, 226, 170, 211, 187, 210, 166, 29,
	158, 30, 133, 31, 32, 33, 156, 34, 35, 139, 36, 37, 38, 39, 40, 41,
	42, 43, 157, 144, 155, 44, 45, 148, 46, 47, 48, 49, 146, 50, 51, 52,
	53, 54, 55, 56, 134, 142, 150, 57, 58, 145, 59, 60, 140, 61, 62, 135,
	63, 64, 65, 66, 67, 149, 136, 147, 68, 69, 70, 71, 72, 137, 73, 138,
	74, 75, 153, 152, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87,
	88, 89, 90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100, 101, 102, 103,
	104, 105, 160, 106, 107, 108, 143, 109, 110, 111, 112, 113, 114, 115, 116, 141,
	117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127, 128, 129, 130, 131, 132,
}

// prefilter returns a multi-line form of the pattern that matches a whole
// file whenever the pattern matches one of its lines (so files without a
// match are skipped in one pass), or nil when the pattern uses \A or \z,
// whose meaning differs between a line and a file, or sets its own flags
// ((?-m) would undo the multi-line mode).
func prefilter(pattern string) *regexp.Regexp {
	if strings.Contains(pattern, `\A`) || strings.Contains(pattern, `\z`) || strings.Contains(pattern, "(?") {
		return nil
	}
	re, err := regexp.Compile("(?m:" + pattern + ")")
	if err != nil {
		return nil
	}
	return re
}

// requiredLiteral returns a case-sensitive literal that every match of
// pattern contains ("" when there is none): the longest one found in the
// top-level concatenation.
func requiredLiteral(pattern string) string {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return ""
	}
	return required(re.Simplify())
}

func required(re *syntax.Regexp) string {
	switch re.Op {
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 {
			return ""
		}
		return string(re.Rune)
	case syntax.OpCapture, syntax.OpPlus:
		return required(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min >= 1 {
			return required(re.Sub[0])
		}
	case syntax.OpConcat:
		best := ""
		for _, s := range re.Sub {
			if l := required(s); len(l) > len(best) {
				best = l
			}
		}
		return best
	}
	return ""
}

// scan appends "rel:line:text\n" for the matching lines of data to out,
// at most limit lines, and returns how many it appended.
func (m *lineMatcher) scan(rel string, data, out []byte, limit int) ([]byte, int) {
	// One field of the line whatever the name holds: a newline or a ':'
	// in it is quoted.
	if strings.ContainsRune(rel, ':') {
		rel = quoteName(rel)
	} else {
		rel = showName(rel)
	}
	n := 0
	line, counted := 1, 0 // line number of the byte at counted
	emit := func(ls, le int) {
		line += bytes.Count(data[counted:ls], nl)
		counted = ls
		out = append(out, rel...)
		out = append(out, ':')
		out = strconv.AppendInt(out, int64(line), 10)
		out = append(out, ':')
		out = appendLine(out, data[ls:le])
		out = append(out, '\n')
		n++
	}
	pos := 0
	for pos < len(data) && n < limit {
		var at int
		switch {
		case m.lit != nil:
			i := m.index(data[pos:])
			if i < 0 {
				return out, n
			}
			at = pos + i
		case m.multi != nil:
			loc := m.multi.FindIndex(data[pos:])
			if loc == nil {
				return out, n
			}
			at = pos + loc[0]
		default:
			at = pos
		}
		ls := bytes.LastIndexByte(data[:at], '\n') + 1
		le := bytes.IndexByte(data[at:], '\n')
		if le < 0 {
			le = len(data)
		} else {
			le += at
		}
		if ls < pos {
			// A multi-line match may start on a line already judged.
			ls = pos
		}
		if m.re.Match(data[ls:le]) {
			emit(ls, le)
		}
		pos = le + 1
	}
	return out, n
}

var nl = []byte{'\n'}

// appendLine appends a matching line, cut to maxLineShow bytes on a rune
// boundary.
func appendLine(out, l []byte) []byte {
	if len(l) <= maxLineShow {
		return append(out, l...)
	}
	cut := maxLineShow
	for cut > 0 && !utf8.RuneStart(l[cut]) {
		cut--
	}
	out = append(out, l[:cut]...)
	return fmt.Appendf(out, " [line cut: %d more bytes]", len(l)-cut)
}

// grepJob is one file to search, in walk order.
type grepJob struct {
	seq int
	f   fileRef
}

type grepResult struct {
	seq int
	out []byte
	n   int
}

// search walks rel and searches its files with one worker per CPU; the
// output is in walk (name) order and stops at limit matching lines.
func (b *builtins) search(ctx context.Context, m *lineMatcher, rel, glob string, limit int, noIgnore bool) ([]byte, int, error) {
	w, err := newViewWalker(b.o.ChangeSet, noIgnore)
	if err != nil {
		return nil, 0, err
	}
	defer w.Close()
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan grepJob, 256)
	results := make(chan grepResult, 256)
	var walkErr error
	go func() {
		defer close(jobs)
		seq := 0
		walkErr = w.walk(ctx, rel, func(f fileRef) error {
			if glob != "" {
				if ok, _ := path.Match(glob, path.Base(f.rel)); !ok {
					return nil
				}
			}
			select {
			case jobs <- grepJob{seq, f}:
				seq++
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	var wg sync.WaitGroup
	for range max(1, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for j := range jobs {
				r := grepResult{seq: j.seq}
				if ctx.Err() == nil {
					var data []byte
					data, buf = w.read(j.f, buf)
					if data != nil && !isBinary(data) {
						r.out, r.n = m.scan(j.f.rel, data, nil, limit)
					}
				}
				select {
				case results <- r:
				case <-ctx.Done():
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		close(results)
	}()
	// Emit in order: results arrive out of order from the workers.
	var out []byte
	total, next := 0, 0
	pending := map[int]grepResult{}
	for r := range results {
		if total >= limit {
			continue // draining
		}
		pending[r.seq] = r
		for {
			p, ok := pending[next]
			if !ok {
				break
			}
			delete(pending, next)
			next++
			if total+p.n > limit {
				p.out, p.n = firstLines(p.out, limit-total), limit-total
			}
			out = append(out, p.out...)
			total += p.n
			if total >= limit {
				cancel()
				break
			}
		}
	}
	if err := parent.Err(); err != nil {
		// Cancelled (the session, or the kernel stopping): what was
		// found so far is not the answer.
		return nil, 0, err
	}
	if total < limit && walkErr != nil && !errors.Is(walkErr, context.Canceled) {
		return nil, 0, walkErr
	}
	if err := context.Cause(ctx); total < limit && err != nil && !errors.Is(err, context.Canceled) {
		return nil, 0, err
	}
	return out, total, nil
}

// firstLines keeps the first n lines of out.
func firstLines(out []byte, n int) []byte {
	i := 0
	for range n {
		j := bytes.IndexByte(out[i:], '\n')
		if j < 0 {
			return out
		}
		i += j + 1
	}
	return out[:i]
}

// read reads a regular file of the view into buf (grown as needed) and
// returns its content; nil for what cannot be read, is not a regular
// file, or is larger than maxGrepFile.
func (w *viewWalker) read(f fileRef, buf []byte) ([]byte, []byte) {
	root := w.lower
	if f.upper {
		root = w.upper
	}
	fd, err := unix.Openat2(root, f.rel, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK, Resolve: beneath})
	if err != nil {
		return nil, buf
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size > maxGrepFile || st.Size == 0 {
		return nil, buf
	}
	size := int(st.Size)
	if cap(buf) < size+1 {
		buf = make([]byte, 0, size+4096)
	}
	buf = buf[:cap(buf)]
	n := 0
	for n < len(buf) {
		k, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || k == 0 {
			break
		}
		if n += k; n == size {
			break // the usual end; a file that grew is read on to EOF
		}
	}
	return buf[:n], buf
}
