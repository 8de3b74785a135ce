package web

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
)

// PluginInfo is one plugin as the plugins page shows it (`fluffy plugin
// ls` and `inspect`). Everything but the state comes from the plugin or
// its server: escaped wherever it is rendered.
type PluginInfo struct {
	Name, Version string
	// State is its lifecycle state; Reason why it is in it.
	State, Reason string
	// Digest is the identity approved; Now the folder's digest as it is,
	// "" when it matches (a changed folder is disabled until `fluffy
	// plugin enable` shows and approves the change); NowErr when the
	// folder cannot be read.
	Digest, Now, NowErr string
	Signer, Dir, Source string
	Image, Command      string
	Network             []string
	// Credentials are "REF as AS NAME": references, never values.
	Credentials  []string
	Capabilities []string
	// Tools are the pinned tools, Held the changed or new ones disabled
	// until `fluffy plugin approve-tools NAME`.
	Tools []PluginTool
	Held  []HeldTool
}

// PluginTool is a pinned tool: its name and description.
type PluginTool struct {
	Name, Description string
}

// HeldTool is a tool whose description as the server offers it differs
// from its pin: New for one never approved; Fields the parts that
// differ, as `fluffy plugin approve-tools` shows them.
type HeldTool struct {
	Name   string
	New    bool
	Fields []ToolField
	// SHA256 identifies the offered description (plugin.PinSHA256): the
	// approval form carries it, so only what the page showed is approved.
	SHA256 string
}

// ToolField is one part of a tool's description (description, schema,
// annotations): as pinned (Old, "" for a new tool) and as offered.
type ToolField struct {
	Field, Old, New string
}

// PluginsView is the plugins page. Done and Error are set by the page
// after an approval.
type PluginsView struct {
	Plugins []PluginInfo
	Done    string
	Error   string
}

// ErrToolsChanged: the tool changes a plugin holds are not the ones the
// page showed (its server offered others since).
var ErrToolsChanged = errors.New("web: the held tools changed since the page was shown")

// Plugins are the plugins in fluffy.db and their tools (docs/plugins.md).
// ApproveTools makes the held tool changes of plugin name its pins, as
// `fluffy plugin approve-tools` does, when they are exactly those seen
// (tool name → HeldTool.SHA256), and records it with actor; it returns
// how many it approved, ErrNotFound for an unknown plugin and
// ErrToolsChanged when others are held now (nothing is approved).
type Plugins interface {
	Plugins(ctx context.Context) (PluginsView, error)
	ApproveTools(ctx context.Context, name string, seen map[string]string, actor string) (int, error)
}

func (s *Server) pluginsPage(w http.ResponseWriter, r *http.Request) {
	if s.o.Plugins == nil {
		s.renderStatus(w, r, http.StatusOK, "Plugins", "the plugins are not available on this console")
		return
	}
	s.renderPlugins(w, r, http.StatusOK, s.auth.takeFlash(sessionOf(r).key), "")
}

func (s *Server) renderPlugins(w http.ResponseWriter, r *http.Request, status int, done, msg string) {
	v, err := s.o.Plugins.Plugins(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v.Done, v.Error = done, msg
	s.render(w, r, status, "plugins", "Plugins", v)
}

// approveTools approves the held tool changes of a plugin that the page
// showed (each form field "seen" is NAME:SHA256), as the logged-in
// principal on the console: actor PRINCIPAL@web.
func (s *Server) approveTools(w http.ResponseWriter, r *http.Request) {
	if s.o.Plugins == nil {
		s.renderStatus(w, r, http.StatusNotFound, "Plugins", "the plugins are not available on this console")
		return
	}
	name := r.PathValue("name")
	if err := r.ParseForm(); err != nil {
		s.renderPlugins(w, r, http.StatusBadRequest, "", "a malformed approval form")
		return
	}
	seen := map[string]string{}
	for _, v := range r.PostForm["seen"] {
		i := strings.LastIndexByte(v, ':')
		if i < 0 {
			s.renderPlugins(w, r, http.StatusBadRequest, "", "a malformed approval form")
			return
		}
		seen[v[:i]] = v[i+1:]
	}
	n, err := s.o.Plugins.ApproveTools(r.Context(), name, seen, sessionOf(r).principal+"@"+Name)
	switch {
	case errors.Is(err, ErrToolsChanged):
		s.renderPlugins(w, r, http.StatusConflict, "", "the held tools of "+name+" changed since the page was shown: nothing was approved; review them again")
	case err != nil:
		s.fail(w, r, err)
	default:
		s.auth.setFlash(sessionOf(r).key, "Approved "+strconv.Itoa(n)+" held tool description(s) of "+name+".")
		http.Redirect(w, r, "/plugins", http.StatusSeeOther)
	}
}
