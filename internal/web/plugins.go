package web

import (
	"context"
	"net/http"
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
}

// ToolField is one part of a tool's description (description, schema,
// annotations): as pinned (Old, "" for a new tool) and as offered.
type ToolField struct {
	Field, Old, New string
}

// PluginsView is the plugins page.
type PluginsView struct {
	Plugins []PluginInfo
}

// Plugins are the plugins in fluffy.db and their tools (docs/plugins.md).
type Plugins interface {
	Plugins(ctx context.Context) (PluginsView, error)
}

func (s *Server) pluginsPage(w http.ResponseWriter, r *http.Request) {
	if s.o.Plugins == nil {
		s.renderStatus(w, r, http.StatusOK, "Plugins", "the plugins are not available on this console")
		return
	}
	v, err := s.o.Plugins.Plugins(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "plugins", "Plugins", v)
}
