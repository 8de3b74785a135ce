package web

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fluffy-agent/fluffy/internal/approval"
	"github.com/fluffy-agent/fluffy/internal/channel"
)

//go:embed templates
var templateFiles embed.FS

var funcs = template.FuncMap{
	"time": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.Local().Format("2006-01-02 15:04:05")
	},
	"cost":  func(c float64) string { return fmt.Sprintf("$%.4f", c) },
	"short": func(s string) string { return truncate(firstLine(s), 120) },
	"add":   func(a, b int) int { return a + b },
	"list":  func(v ...string) []string { return v },
}

// pages are the parsed templates: the layout, the shared fragments and
// one file per page, each page parsed with the layout.
type pages map[string]*template.Template

func parsePages() (pages, error) {
	base, err := template.New("").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/parts.html")
	if err != nil {
		return nil, err
	}
	entries, err := templateFiles.ReadDir("templates")
	if err != nil {
		return nil, err
	}
	out := pages{}
	for _, e := range entries {
		n := e.Name()
		if n == "layout.html" || n == "parts.html" {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(templateFiles, "templates/"+n)
		if err != nil {
			return nil, err
		}
		out[strings.TrimSuffix(n, ".html")] = t
	}
	return out, nil
}

// page is what every page's template gets.
type page struct {
	Title     string
	Nav       string
	CSRF      string
	Principal string
	D         any
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name, title string, d any) {
	ws := sessionOf(r)
	var buf bytes.Buffer
	if err := s.pages[name].ExecuteTemplate(&buf, "layout", page{Title: title, Nav: name, CSRF: ws.csrf, Principal: ws.principal, D: d}); err != nil {
		s.log.Error("render", "page", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (s *Server) renderStatus(w http.ResponseWriter, r *http.Request, status int, title, msg string) {
	s.render(w, r, status, "message", title, msg)
}

// fail shows an error from a kernel interface: ErrNotFound as 404, the
// rest as 500 with the message (the person's own daemon: its errors are
// theirs to read; escaped like everything else).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, ErrNotFound) {
		s.renderStatus(w, r, http.StatusNotFound, "Not found", err.Error())
		return
	}
	s.log.Warn("page failed", "path", r.URL.Path, "err", err)
	s.renderStatus(w, r, http.StatusInternalServerError, "Something failed", err.Error())
}

// sessionsView is the sessions page.
type sessionsView struct {
	Sessions                []Session
	State, Kind, Repository string
	States, Kinds           []string
	CanStart                bool
}

func (s *Server) sessionsPage(w http.ResponseWriter, r *http.Request) {
	all, err := s.o.Sessions.List(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	v := sessionsView{State: q.Get("state"), Kind: q.Get("kind"), Repository: q.Get("repository"),
		States: []string{"running", "paused", "closed", "failed"}, Kinds: []string{"coding", "assistant"},
		CanStart: s.currentSink() != nil}
	for _, x := range all {
		if v.State != "" && x.Status != v.State || v.Kind != "" && x.Kind != v.Kind ||
			v.Repository != "" && !strings.Contains(x.Workspace, v.Repository) {
			continue
		}
		v.Sessions = append(v.Sessions, x)
	}
	s.render(w, r, http.StatusOK, "sessions", "Sessions", v)
}

// startSession hands a task to the daemon as a new conversation of the
// web channel: the daemon creates its session on the assistant
// workspace and runs it.
func (s *Server) startSession(w http.ResponseWriter, r *http.Request) {
	task := strings.TrimSpace(r.PostFormValue("task"))
	if task == "" {
		s.renderStatus(w, r, http.StatusBadRequest, "No task", "Say what the session should do.")
		return
	}
	sink := s.currentSink()
	if sink == nil {
		s.renderStatus(w, r, http.StatusServiceUnavailable, "Not serving", "The assistant daemon is not running its channels; start a session with 'fluffy serve'.")
		return
	}
	ws := sessionOf(r)
	id, err := sink.Deliver(r.Context(), channel.Inbound{
		Conversation: channel.Conversation{Channel: Name, Room: newToken()[:12], Principal: ws.principal},
		Text:         task, Received: s.o.Now()})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	http.Redirect(w, r, "/sessions/"+id, http.StatusSeeOther)
}

// sessionView is one session's live page: its stored history, then
// the hub's events.
type sessionView struct {
	Session   Session
	Stored    []Event
	Omitted   int
	StoredErr string
	Events    []Event
	Complete  bool
	Last      uint64
	Approvals []reqView
	Status    *Status
}

func (s *Server) sessionPage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	info, err := s.o.Sessions.Get(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	h := s.history(r, id)
	evs := h.Events
	v := sessionView{Session: info, Stored: h.Stored, Omitted: h.Omitted, StoredErr: h.Error, Events: evs, Complete: h.Complete,
		Approvals: withCSRF(s.o.Approvals.Pending(id), sessionOf(r).csrf)}
	if len(evs) > 0 {
		v.Last = evs[len(evs)-1].ID
	}
	for _, e := range evs {
		if e.Status != nil {
			v.Status = e.Status
		}
	}
	s.render(w, r, http.StatusOK, "session", "Session "+id, v)
}

// approvalsView lists open requests.
type approvalsView struct {
	Requests []reqView
	Error    string
	Done     string
}

func (s *Server) approvalsPage(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusOK, "approvals", "Approvals", approvalsView{Requests: withCSRF(s.o.Approvals.Pending(r.URL.Query().Get("session")), sessionOf(r).csrf), Done: s.auth.takeFlash(sessionOf(r).key)})
}

// reqView is a request with the page's CSRF token, for its form.
type reqView struct {
	approval.Request
	CSRF string
}

func withCSRF(reqs []approval.Request, csrf string) []reqView {
	out := make([]reqView, len(reqs))
	for i, r := range reqs {
		out[i] = reqView{Request: r, CSRF: csrf}
	}
	return out
}

// answer turns the approval form into the approval language and hands it
// to the broker as the logged-in principal on channel "web".
func (s *Server) answer(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req *approval.Request
	for _, x := range s.o.Approvals.Pending("") {
		if x.ID == id {
			req = &x
			break
		}
	}
	if req == nil {
		s.render(w, r, http.StatusConflict, "approvals", "Approvals", approvalsView{Requests: withCSRF(s.o.Approvals.Pending(""), sessionOf(r).csrf), Error: "request " + id + " is no longer open (answered elsewhere, or expired)"})
		return
	}
	text, err := answerText(r, len(req.Items))
	if err == nil {
		err = s.o.Approvals.Answer(r.Context(), id, text, approval.Who{Name: sessionOf(r).principal, Channel: Name})
	}
	if err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, approval.ErrUnknownRequest) {
			status = http.StatusConflict
		}
		s.render(w, r, status, "approvals", "Approvals", approvalsView{Requests: withCSRF(s.o.Approvals.Pending(""), sessionOf(r).csrf), Error: err.Error()})
		return
	}
	s.auth.setFlash(sessionOf(r).key, "Answered request "+id+".")
	http.Redirect(w, r, "/approvals", http.StatusSeeOther)
}

// controlChars are what a reason may not hold: a line break would start a
// second answer line.
var controlChars = regexp.MustCompile(`[\x00-\x1f\x7f\p{Zl}\p{Zp}]+`)

// answerText builds the answer from the form: action "approve" with the
// chosen steps (none: all), "session" for the session scope and "rest"
// to deny the steps not chosen; action "deny" with a reason. Step numbers
// are parsed here, never passed through as text.
func answerText(r *http.Request, n int) (string, error) {
	reason := strings.TrimSpace(controlChars.ReplaceAllString(r.PostFormValue("reason"), " "))
	switch r.PostFormValue("action") {
	case "deny":
		if reason == "" {
			return "/deny all", nil
		}
		return "/deny all " + reason, nil
	case "approve", "approve-all":
	default:
		return "", errors.New("choose approve or deny")
	}
	var steps []int
	if r.PostFormValue("action") == "approve" {
		for _, v := range r.PostForm["step"] {
			k, err := strconv.Atoi(v)
			if err != nil || k < 1 || k > n {
				return "", fmt.Errorf("no step %q in this request", v)
			}
			if !slices.Contains(steps, k) {
				steps = append(steps, k)
			}
		}
		if len(steps) == 0 {
			return "", errors.New("choose the steps to approve, or approve all")
		}
	}
	slices.Sort(steps)
	line := "/approve"
	if len(steps) > 0 {
		line += " " + joinInts(steps)
	} else {
		line += " all"
	}
	if r.PostFormValue("session") != "" {
		line += " for session"
	}
	if r.PostFormValue("rest") != "" && len(steps) > 0 && len(steps) < n {
		var rest []int
		for k := 1; k <= n; k++ {
			if !slices.Contains(steps, k) {
				rest = append(rest, k)
			}
		}
		line += "\n/deny " + joinInts(rest)
		if reason != "" {
			line += " " + reason
		}
	}
	return line, nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, k := range v {
		s[i] = strconv.Itoa(k)
	}
	return strings.Join(s, ",")
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}
