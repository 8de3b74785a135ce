package web

import (
	"net/http"
	"strconv"
	"strings"
)

// diffPageLines is how many diff lines one page of a change set shows: a
// 5,000-line diff is five pages, not one page the browser must lay out
// at once.
const diffPageLines = 1000

// changesView is a change set page.
type changesView struct {
	Session   Session
	Set       ChangeSet
	Lines     []diffLine
	Rows      []splitRow
	Split     bool
	Page      int
	Pages     int
	Error     string
	Done      string
	Conflicts []Conflict
}

// diffLine is one line of a unified diff with its class: "add", "del",
// "hunk", "file" or "ctx"; Toks, when set, are its content (the text
// after the +, - or space) highlighted.
type diffLine struct {
	Class string
	Text  string
	Toks  []tok
}

// Mark is a content line's first character (+, - or space).
func (l diffLine) Mark() string { return l.Text[:min(1, len(l.Text))] }

// splitRow is a line of the side-by-side view: the old side and the new.
type splitRow struct {
	Class      string // "hunk", "file" or "" for a content row
	Text       string // a hunk or file header's text
	Left       string
	LeftClass  string
	LeftToks   []tok
	Right      string
	RightClass string
	RightToks  []tok
}

func classify(line string) string {
	switch {
	case strings.HasPrefix(line, "+++ "), strings.HasPrefix(line, "--- "), strings.HasPrefix(line, "diff "),
		strings.HasPrefix(line, "new file mode"), strings.HasPrefix(line, "deleted file mode"), strings.HasPrefix(line, "old mode"),
		strings.HasPrefix(line, "new mode"), strings.HasPrefix(line, "index "), strings.HasPrefix(line, "similarity index"),
		strings.HasPrefix(line, "rename "), strings.HasPrefix(line, "Binary files"):
		return "file"
	case strings.HasPrefix(line, "@@"):
		return "hunk"
	case strings.HasPrefix(line, "+"):
		return "add"
	case strings.HasPrefix(line, "-"):
		return "del"
	}
	return "ctx"
}

// splitRows pairs a unified diff's deletions with the additions that
// follow them, for the side-by-side view.
func splitRows(lines []diffLine) []splitRow {
	var rows []splitRow
	var dels, adds []diffLine
	flush := func() {
		for i := 0; i < max(len(dels), len(adds)); i++ {
			r := splitRow{}
			if i < len(dels) {
				r.Left, r.LeftClass, r.LeftToks = dels[i].Text[1:], "del", dels[i].Toks
			}
			if i < len(adds) {
				r.Right, r.RightClass, r.RightToks = adds[i].Text[1:], "add", adds[i].Toks
			}
			rows = append(rows, r)
		}
		dels, adds = nil, nil
	}
	for _, l := range lines {
		switch l.Class {
		case "del":
			if len(adds) > 0 {
				flush()
			}
			dels = append(dels, l)
		case "add":
			adds = append(adds, l)
		case "ctx":
			flush()
			t := strings.TrimPrefix(l.Text, " ")
			rows = append(rows, splitRow{Left: t, Right: t, LeftToks: l.Toks, RightToks: l.Toks})
		default:
			flush()
			rows = append(rows, splitRow{Class: l.Class, Text: l.Text})
		}
	}
	flush()
	return rows
}

func (s *Server) changesPage(w http.ResponseWriter, r *http.Request) {
	s.showChanges(w, r, http.StatusOK, "", s.auth.takeFlash(sessionOf(r).key), nil)
}

func (s *Server) showChanges(w http.ResponseWriter, r *http.Request, status int, errMsg, done string, conflicts []Conflict) {
	id := r.PathValue("id")
	info, err := s.o.Sessions.Get(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := changesView{Session: info, Error: errMsg, Done: done, Conflicts: conflicts, Split: r.URL.Query().Get("view") == "split"}
	if s.o.Changes == nil {
		v.Error = "change sets are not available on this console"
		s.render(w, r, status, "changes", "Changes of "+id, v)
		return
	}
	set, err := s.o.Changes.Diff(r.Context(), id, nil)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v.Set = set
	all := strings.Split(strings.TrimRight(set.Diff, "\n"), "\n")
	if set.Diff == "" {
		all = nil
	}
	v.Pages = max(1, (len(all)+diffPageLines-1)/diffPageLines)
	v.Page, _ = strconv.Atoi(r.URL.Query().Get("page"))
	v.Page = min(max(v.Page, 1), v.Pages)
	lo := (v.Page - 1) * diffPageLines
	for _, l := range all[lo:min(lo+diffPageLines, len(all))] {
		v.Lines = append(v.Lines, diffLine{Class: classify(l), Text: l})
	}
	s.lexers.highlight(v.Lines, pathBefore(all, lo))
	if v.Split {
		v.Rows = splitRows(v.Lines)
		v.Lines = nil
	}
	s.render(w, r, status, "changes", "Changes of "+id, v)
}

// applyChanges applies the chosen files (path fields; "all" for every
// one) as the logged-in principal on the web. A conflict applies nothing
// and shows its three versions.
func (s *Server) applyChanges(w http.ResponseWriter, r *http.Request) {
	s.changeOp(w, r, "apply")
}

func (s *Server) discardChanges(w http.ResponseWriter, r *http.Request) {
	s.changeOp(w, r, "discard")
}

func (s *Server) changeOp(w http.ResponseWriter, r *http.Request, op string) {
	if s.o.Changes == nil {
		s.showChanges(w, r, http.StatusServiceUnavailable, "change sets are not available on this console", "", nil)
		return
	}
	id := r.PathValue("id")
	paths := r.PostForm["path"]
	if r.PostFormValue("all") == "" && len(paths) == 0 {
		s.showChanges(w, r, http.StatusBadRequest, "choose files, or all", "", nil)
		return
	}
	if r.PostFormValue("all") != "" {
		paths = nil
	}
	actor := sessionOf(r).principal + "@" + Name
	var set ChangeSet
	var err error
	if op == "apply" {
		set, err = s.o.Changes.Apply(r.Context(), id, paths, actor)
	} else {
		set, err = s.o.Changes.Discard(r.Context(), id, paths, actor)
	}
	switch {
	case err != nil:
		s.showChanges(w, r, http.StatusConflict, op+": "+err.Error(), "", nil)
	case len(set.Conflicts) > 0:
		s.showChanges(w, r, http.StatusConflict, "nothing was applied: files changed since the session began", "", set.Conflicts)
	default:
		verb := "applied"
		if op == "discard" {
			verb = "discarded"
		}
		s.auth.setFlash(sessionOf(r).key, "Files "+verb+".")
		http.Redirect(w, r, "/sessions/"+id+"/changes", http.StatusSeeOther)
	}
}
