package tdd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/tdd/coverage"
)

// TestSessions runs testdata/sessions/*.txt: one normative case per file,
// in a small notation, one event per line:
//
//	start MODE
//	write test|src|doc|inst PATH...
//	run pass | run none | run fail FILE | run build FILE
//	cover [base] FILE=COVERED/TOTAL...
//	instrument PATH
//	done [BUDGET%]
//	mode user|model|system MODE
//
// followed by "-> STATE" (accepted, lands in STATE), "! CODE" (refused
// with that reason code) or nothing (accepted). "#" starts a comment.
func TestSessions(t *testing.T) {
	files, err := filepath.Glob("testdata/sessions/*.txt")
	if err != nil || len(files) < 5 {
		t.Fatalf("session cases: %v %v", files, err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			s := Initial()
			for i, line := range strings.Split(string(data), "\n") {
				if j := strings.IndexByte(line, '#'); j >= 0 {
					line = line[:j]
				}
				line = strings.TrimSpace(line)
				if line == "" {
					continue
				}
				where := fmt.Sprintf("%s:%d", file, i+1)
				spec, expect, _ := strings.Cut(line, "->")
				spec, refuse, refused := strings.Cut(spec, "!")
				ev, err := parseEvent(strings.Fields(spec))
				if err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				tr, err := Step(s, ev)
				if refused {
					var te *Error
					if !errors.As(err, &te) || string(te.Code) != strings.TrimSpace(refuse) {
						t.Fatalf("%s: %q: got %v, want refusal %s", where, line, err, refuse)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %q refused: %v", where, line, err)
				}
				if want := strings.TrimSpace(expect); want != "" && string(tr.To) != want {
					t.Fatalf("%s: %q: landed in %s, want %s", where, line, tr.To, want)
				}
				s = tr.Status
			}
		})
	}
}

func parseEvent(f []string) (Event, error) {
	if len(f) == 0 {
		return Event{}, errors.New("empty event")
	}
	arg := func(i int) string {
		if i < len(f) {
			return f[i]
		}
		return ""
	}
	switch f[0] {
	case "start":
		return start(Mode(arg(1))), nil
	case "write":
		class := map[string]Class{"test": ClassTest, "src": ClassSource, "doc": ClassExempt, "inst": ClassInstrumentation, "out": ClassOutside}[arg(1)]
		if class == "" || len(f) < 3 {
			return Event{}, fmt.Errorf("write needs a class and paths: %v", f)
		}
		ev := Event{Kind: EventWrite}
		for _, p := range f[2:] {
			ev.Files = append(ev.Files, File{Path: p, Class: class})
		}
		return ev, nil
	case "run":
		switch arg(1) {
		case "pass":
			return pass(), nil
		case "none":
			return noTests(), nil
		case "fail":
			return failIn(arg(2)), nil
		case "build":
			return buildFailIn(arg(2)), nil
		}
	case "cover":
		ev := Event{Kind: EventCoverage, Coverage: &coverage.Report{Files: map[string]coverage.FileCoverage{}}}
		rest := f[1:]
		if arg(1) == "base" {
			ev.Baseline, rest = true, f[2:]
		}
		for _, x := range rest {
			name, frac, ok1 := strings.Cut(x, "=")
			c, tot, ok2 := strings.Cut(frac, "/")
			ci, err1 := strconv.ParseInt(c, 10, 64)
			ti, err2 := strconv.ParseInt(tot, 10, 64)
			if !ok1 || !ok2 || err1 != nil || err2 != nil {
				return Event{}, fmt.Errorf("bad coverage %q", x)
			}
			ev.Coverage.Files[name] = coverage.FileCoverage{Covered: ci, Total: ti}
		}
		return ev, nil
	case "instrument":
		return instrument(arg(1)), nil
	case "done":
		budget := int64(0)
		if b := strings.TrimSuffix(arg(1), "%"); b != "" {
			n, err := strconv.ParseInt(b, 10, 64)
			if err != nil {
				return Event{}, err
			}
			budget = n * 100
		}
		return done(budget), nil
	case "mode":
		return ModeEvent(Mode(arg(2)), Actor{Kind: ActorKind(arg(1))}, ""), nil
	}
	return Event{}, fmt.Errorf("unknown event %v", f)
}
