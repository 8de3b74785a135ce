package skillimage

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"strings"
)

// BaseName is what a skill's Dockerfile writes after FROM for fluffy's
// base image ("FROM fluffy-base"; "fluffy-base:latest" is the same). The
// builder puts the base image's ID in its place, so the image is built
// from exactly the base the cache key was computed with, whatever tag
// sandbox.image gives the base.
const BaseName = "fluffy-base"

// DockerfileError is a problem of one line of a skill's Dockerfile: one
// the builder refuses before the build, or the step the engine failed
// at.
type DockerfileError struct {
	// Path is the Dockerfile (absolute).
	Path string
	// Line is the line its instruction starts at (1-based).
	Line int
	// Instruction is that instruction as written (continuations joined),
	// shortened.
	Instruction string
	Err         error
}

func (e *DockerfileError) Error() string {
	return fmt.Sprintf("%s:%d: %s: %v", e.Path, e.Line, e.Instruction, e.Err)
}

func (e *DockerfileError) Unwrap() error { return e.Err }

// instruction is one Dockerfile instruction: the classic builder's step
// number is its index + 1.
type instruction struct {
	line  int    // where it starts, 1-based
	first int    // index of its first physical line
	last  int    // index of its last physical line
	cmd   string // upper case
	args  string // continuations joined with a space
}

var escapeDirective = regexp.MustCompile(`(?i)^#\s*escape\s*=\s*(\S)\s*$`)

// parseDockerfile splits b into instructions as the classic builder
// does: parser directives at the top (escape), comments and blank lines
// skipped, lines ending in the escape character continued.
func parseDockerfile(b []byte) []instruction {
	lines := strings.Split(strings.ReplaceAll(string(b), "\r\n", "\n"), "\n")
	escape := `\`
	i := 0
	for ; i < len(lines); i++ {
		m := escapeDirective.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil {
			break
		}
		escape = m[1]
	}
	var out []instruction
	for ; i < len(lines); i++ {
		t := strings.TrimSpace(lines[i])
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		in := instruction{line: i + 1, first: i}
		var sb strings.Builder
		for {
			cont := strings.HasSuffix(t, escape)
			sb.WriteString(strings.TrimSuffix(t, escape))
			in.last = i
			if !cont {
				break
			}
			sb.WriteByte(' ')
			// Comments and blank lines inside a continuation are
			// dropped, as the builder does.
			for i+1 < len(lines) {
				n := strings.TrimSpace(lines[i+1])
				if n != "" && !strings.HasPrefix(n, "#") {
					break
				}
				i++
			}
			if i+1 >= len(lines) {
				break
			}
			i++
			t = strings.TrimSpace(lines[i])
		}
		cmd, args, _ := strings.Cut(strings.TrimSpace(sb.String()), " ")
		in.cmd, in.args = strings.ToUpper(cmd), strings.TrimSpace(args)
		out = append(out, in)
	}
	return out
}

func (in instruction) String() string {
	s := in.cmd + " " + in.args
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

// check refuses what would reach outside the build context without the
// network the build does not have, or with a network it must not get:
// FROM an image other than fluffy-base, scratch or an earlier stage (the
// engine would pull it from a registry), COPY --from an image, and ADD
// from a URL (the engine fetches those itself, outside the build's
// network namespace). It returns the FROM instructions that name the
// base image.
func check(path string, ins []instruction) (base []instruction, err error) {
	stages := map[string]bool{}
	nstage := 0
	for _, in := range ins {
		fail := func(format string, a ...any) error {
			return &DockerfileError{Path: path, Line: in.line, Instruction: in.String(), Err: fmt.Errorf(format, a...)}
		}
		words := strings.Fields(in.args)
		switch in.cmd {
		case "FROM":
			var rest []string
			for _, w := range words {
				if !strings.HasPrefix(w, "--") {
					rest = append(rest, w)
				}
			}
			if len(rest) == 0 {
				return nil, fail("FROM names no image")
			}
			img := rest[0]
			switch {
			case img == BaseName || img == BaseName+":latest":
				base = append(base, in)
			case strings.EqualFold(img, "scratch"), stages[strings.ToLower(img)]:
			default:
				return nil, fail("%w: FROM %s: a skill image starts FROM %s (fluffy's base image), scratch or an earlier stage; builds reach no registry", ErrRefused, img, BaseName)
			}
			if len(rest) == 3 && strings.EqualFold(rest[1], "AS") {
				stages[strings.ToLower(rest[2])] = true
			}
			nstage++
		case "COPY", "ADD":
			for _, w := range words {
				if !strings.HasPrefix(w, "--") {
					break
				}
				if from, ok := strings.CutPrefix(w, "--from="); ok && !stages[strings.ToLower(from)] && !isStageIndex(from, nstage) {
					return nil, fail("%w: --from=%s: only an earlier stage can be copied from; builds reach no registry", ErrRefused, from)
				}
			}
			if in.cmd == "ADD" {
				for _, w := range words {
					if strings.Contains(w, "://") || strings.HasPrefix(w, "git@") {
						return nil, fail("%w: ADD %s: the engine would fetch it outside the build's sandbox; vendor it in the skill's folder", ErrRefused, w)
					}
				}
			}
		}
	}
	if nstage == 0 {
		return nil, &DockerfileError{Path: path, Line: 1, Instruction: "(none)", Err: fmt.Errorf("%w: no FROM instruction", ErrRefused)}
	}
	return base, nil
}

func isStageIndex(s string, n int) bool {
	var i int
	_, err := fmt.Sscanf(s, "%d", &i)
	return err == nil && fmt.Sprint(i) == s && i >= 0 && i < n
}

// rewriteBase replaces the base image's name in each FROM instruction
// given with ref, leaving every line where it was (the engine's step
// numbers and the user's line numbers stay the same).
func rewriteBase(b []byte, from []instruction, ref string) []byte {
	if len(from) == 0 {
		return b
	}
	crlf := bytes.Contains(b, []byte("\r\n"))
	text := strings.ReplaceAll(string(b), "\r\n", "\n")
	phys := strings.Split(text, "\n")
	name := regexp.MustCompile(`(^|\s)` + regexp.QuoteMeta(BaseName) + `(:latest)?(\s|$)`)
	for _, in := range from {
		done := false
		for i := in.first; i <= in.last && !done; i++ {
			phys[i] = name.ReplaceAllStringFunc(phys[i], func(m string) string {
				if done {
					return m
				}
				done = true
				sub := name.FindStringSubmatch(m)
				return sub[1] + ref + sub[3]
			})
		}
	}
	out := strings.Join(phys, "\n")
	if crlf {
		out = strings.ReplaceAll(out, "\n", "\r\n")
	}
	return []byte(out)
}

// stepLine maps the engine's progress lines that start a step to the
// instruction being run: Docker's "Step N/M : ...", Podman's
// "STEP N/M: ...".
var stepLine = regexp.MustCompile(`^(?:Step|STEP) (\d+)/\d+ ?: `)

// stepOf returns the step number a progress line starts, or 0.
func stepOf(line string) int {
	m := stepLine.FindStringSubmatch(line)
	if m == nil {
		return 0
	}
	n := 0
	fmt.Sscanf(m[1], "%d", &n)
	return n
}

// lines splits s into its lines for stepOf.
func lines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}
