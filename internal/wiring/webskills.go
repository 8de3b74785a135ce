package wiring

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/plugin"
	"github.com/fluffy-agent/fluffy/internal/skill"
	"github.com/fluffy-agent/fluffy/internal/userenv"
	"github.com/fluffy-agent/fluffy/internal/web"
)

// webSkills are the skills the assistant's sessions see, for the
// console's skills page: discovered as for a session over ws
// (SkillRoots), an installed one checked against its pin and shown with
// what the person granted it, as grantedSkills gives it to a session.
type webSkills struct {
	u  *userenv.Env
	ws string
}

func (s webSkills) Skills(context.Context) (web.SkillsView, error) {
	set := skill.Discover(SkillRoots(s.u, s.ws))
	var v web.SkillsView
	inst, instErr := s.u.InstalledSkills()
	for _, sk := range set.Skills {
		info := webSkill(sk)
		if sk.Scope == skill.ScopeUser {
			if instErr != nil {
				// As grantedSkills: the person's scope is left out whole.
				info.State, info.Reason = web.SkillRefused, "the record of installed skills cannot be read: "+instErr.Error()
				info.Network, info.Credentials = nil, nil
			} else {
				installedSkill(inst, sk, &info)
			}
		}
		v.Skills = append(v.Skills, info)
	}
	for _, p := range set.Problems {
		v.Problems = append(v.Problems, p.String())
	}
	return v, nil
}

// webSkill is a skill as its manifest stands.
func webSkill(s skill.Skill) web.SkillInfo {
	m := s.Manifest
	info := web.SkillInfo{Name: s.Name, Description: s.Description, Scope: string(s.Scope), Dir: s.Dir, State: web.SkillInForce,
		Runtime: m.Sandbox.Runtime, Image: m.Image.Dockerfile, Network: m.Network, Classification: m.Classification,
		Credentials: credentialNames(m.Credentials)}
	for _, e := range m.Entrypoints {
		info.Entrypoints = append(info.Entrypoints, e.Name)
	}
	return info
}

func credentialNames(cs []skill.Credential) []string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s as %s %s", c.Ref, c.As, c.Name))
	}
	return out
}

// installedSkill fills in an installed skill's pin and grant, or why it
// is refused (a folder that no longer matches its pin). A skill of the
// person's own (no record, or not in its install folder) stays as it is.
func installedSkill(inst *skill.Installed, s skill.Skill, info *web.SkillInfo) {
	want, err1 := filepath.EvalSymlinks(inst.Dir(s.Name))
	got, err2 := filepath.EvalSymlinks(s.Dir)
	if err1 != nil || err2 != nil || want != got {
		return
	}
	r, err := inst.Record(s.Name)
	if errors.Is(err, skill.ErrNotInstalled) {
		return
	}
	info.Digest, info.Source, info.Signer = r.Digest, r.Source, r.Signer
	if r.Commit != "" {
		info.Source += " @ " + r.Commit
	}
	if err != nil {
		info.State, info.Reason, info.Network, info.Credentials = web.SkillRefused, err.Error(), nil, nil
		return
	}
	hosts, creds, err := inst.Granted(s.Name)
	if err != nil {
		info.State, info.Reason, info.Network, info.Credentials = web.SkillRefused, err.Error(), nil, nil
		return
	}
	info.State, info.Network, info.Credentials = web.SkillInstalled, hosts, credentialNames(creds)
	if r.Grant == nil {
		info.Reason = "nothing granted yet (fluffy skill grant " + s.Name + ")"
	}
}

// webPlugins are the plugins in fluffy.db, for the console's plugins
// page: their records, pinned tools and held tool changes, as `fluffy
// plugin inspect` reads them; an approval of held tools is recorded
// through audit.
type webPlugins struct {
	db    *sql.DB
	audit web.Recorder
}

// ApproveTools approves the held tool changes the page showed, as
// `fluffy plugin approve-tools` does, and records plugin.approve with
// actor.
func (p webPlugins) ApproveTools(ctx context.Context, name string, seen map[string]string, actor string) (int, error) {
	done, err := (&plugin.DB{SQL: p.db}).ApproveSeen(ctx, name, seen)
	switch {
	case errors.Is(err, plugin.ErrNotFound):
		return 0, fmt.Errorf("%w: plugin %s", web.ErrNotFound, name)
	case errors.Is(err, plugin.ErrOfferChanged):
		return 0, fmt.Errorf("%w: %s", web.ErrToolsChanged, name)
	case err != nil:
		return 0, err
	}
	ev := audit.PluginApprove{Plugin: name}
	for _, c := range done {
		ev.Tools = append(ev.Tools, c.Name)
		ev.SHA256 = append(ev.SHA256, plugin.PinSHA256(*c.Offered))
	}
	if _, err := p.audit.Append(ctx, audit.Entry{Kind: ev.Kind(), Actor: actor, Payload: ev}); err != nil {
		return len(done), fmt.Errorf("the tools of %s are approved, but the audit entry failed: %w", name, err)
	}
	return len(done), nil
}

func (p webPlugins) Plugins(ctx context.Context) (web.PluginsView, error) {
	pdb := &plugin.DB{SQL: p.db}
	rs, err := pdb.List(ctx)
	if err != nil {
		return web.PluginsView{}, err
	}
	var v web.PluginsView
	for _, r := range rs {
		info, err := webPlugin(ctx, pdb, r)
		if err != nil {
			return web.PluginsView{}, err
		}
		v.Plugins = append(v.Plugins, info)
	}
	return v, nil
}

func webPlugin(ctx context.Context, pdb *plugin.DB, r plugin.Record) (web.PluginInfo, error) {
	m := r.Manifest
	info := web.PluginInfo{Name: m.Name, Version: m.Version, State: string(r.State), Reason: r.Reason, Digest: r.Digest,
		Signer: r.Signer, Dir: r.Dir, Source: r.Source, Image: m.Run.Image, Command: strings.Join(m.Run.Command, " "), Network: m.Network}
	if m.Run.Image == "" {
		// A folder's digest can be checked again; an image's is the
		// engine's to say.
		if now, err := plugin.Digest(r.Dir); err != nil {
			info.NowErr = err.Error()
		} else if now != r.Digest {
			info.Now = now
		}
	}
	for _, c := range m.Credentials {
		info.Credentials = append(info.Credentials, fmt.Sprintf("%s as %s %s", c.Ref, c.As, c.Name))
	}
	for _, c := range m.Capabilities {
		info.Capabilities = append(info.Capabilities, string(c))
	}
	pins, err := pdb.Pins(ctx, m.Name)
	if err != nil {
		return info, err
	}
	for _, t := range pins {
		info.Tools = append(info.Tools, web.PluginTool{Name: t.Name, Description: t.Description})
	}
	held, err := pdb.Offered(ctx, m.Name)
	if err != nil {
		return info, err
	}
	for _, c := range held {
		info.Held = append(info.Held, heldTool(c))
	}
	return info, nil
}

// heldTool is a tool change field by field, as `fluffy plugin
// approve-tools` shows it.
func heldTool(c plugin.ToolChange) web.HeldTool {
	h := web.HeldTool{Name: c.Name, New: c.Pinned == nil}
	if c.Offered == nil {
		return h
	}
	h.SHA256 = plugin.PinSHA256(*c.Offered)
	if h.New {
		h.Fields = []web.ToolField{{Field: "description", New: c.Offered.Description}, {Field: "schema", New: c.Offered.Schema}}
		if len(c.Offered.Annotations) > 0 {
			h.Fields = append(h.Fields, web.ToolField{Field: "annotations", New: toolAnnotations(c.Offered.Annotations)})
		}
		return h
	}
	for _, f := range []web.ToolField{{Field: "description", Old: c.Pinned.Description, New: c.Offered.Description},
		{Field: "schema", Old: c.Pinned.Schema, New: c.Offered.Schema},
		{Field: "annotations", Old: toolAnnotations(c.Pinned.Annotations), New: toolAnnotations(c.Offered.Annotations)}} {
		if f.Old != f.New {
			h.Fields = append(h.Fields, f)
		}
	}
	return h
}

func toolAnnotations(m map[string]bool) string {
	var s []string
	for k, v := range m {
		s = append(s, fmt.Sprintf("%s=%v", k, v))
	}
	slices.Sort(s)
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " ")
}
