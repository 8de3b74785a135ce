package wiring

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/userenv"
	"github.com/fluffy-agent/fluffy/internal/web"
)

// webSessions are the kernel's sessions as the console lists them.
type webSessions struct{ k *kernel.Kernel }

func webSession(i kernel.Info) web.Session {
	return web.Session{ID: i.ID, Kind: i.Kind, Status: string(i.Status), Task: i.Task, Model: i.Model, Workspace: i.Workspace,
		Created: i.CreatedAt, Updated: i.UpdatedAt, Turns: i.Turns, Cost: i.Cost, Reason: i.StopReason, Error: i.Error, Untrusted: i.Untrusted}
}

func (s webSessions) List(ctx context.Context) ([]web.Session, error) {
	infos, err := s.k.List(ctx, true)
	if err != nil {
		return nil, err
	}
	out := make([]web.Session, len(infos))
	for i, info := range infos {
		out[i] = webSession(info)
	}
	return out, nil
}

func (s webSessions) Get(ctx context.Context, id string) (web.Session, error) {
	info, err := s.k.Get(ctx, id)
	if errors.Is(err, kernel.ErrNotFound) {
		return web.Session{}, fmt.Errorf("%w: session %s", web.ErrNotFound, id)
	}
	if err != nil {
		return web.Session{}, err
	}
	return webSession(info), nil
}

// webChanges are the kernel's change sets, for the console.
type webChanges struct{ c kernel.SessionChanges }

func webChangeSet(r kernel.ChangesResult) web.ChangeSet {
	cs := web.ChangeSet{Changes: r.Changes, Diff: r.Diff}
	for _, c := range r.Conflicts {
		cs.Conflicts = append(cs.Conflicts, web.Conflict{Path: c.Path, Explain: c.Explain})
	}
	return cs
}

func changesErr(err error, session string) error {
	if errors.Is(err, kernel.ErrNotFound) {
		return fmt.Errorf("%w: session %s", web.ErrNotFound, session)
	}
	return err
}

func (w webChanges) Diff(ctx context.Context, session string, paths []string) (web.ChangeSet, error) {
	r, err := w.c.Diff(ctx, kernel.ChangesParams{Session: session, Paths: paths})
	return webChangeSet(r), changesErr(err, session)
}

func (w webChanges) Apply(ctx context.Context, session string, paths []string, actor string) (web.ChangeSet, error) {
	r, err := w.c.Apply(ctx, kernel.ChangesParams{Session: session, Paths: paths, Actor: actor})
	return webChangeSet(r), changesErr(err, session)
}

func (w webChanges) Discard(ctx context.Context, session string, paths []string, actor string) (web.ChangeSet, error) {
	r, err := w.c.Discard(ctx, kernel.ChangesParams{Session: session, Paths: paths, Actor: actor})
	return webChangeSet(r), changesErr(err, session)
}

// webEvent is a kernel event as the console shows it; ok is false for
// data that is not a session event.
func webEvent(data any) (web.Event, bool) {
	ev, ok := data.(kernel.Event)
	if !ok {
		return web.Event{}, false
	}
	out := web.Event{Session: ev.Session, Type: string(ev.Type), Text: ev.Text}
	if a := ev.Agent; a != nil {
		out.Turn, out.Reason = a.Turn, string(a.Reason)
		if a.Type == agent.EventText || a.Type == agent.EventContext {
			out.Text = a.Text
		}
		if a.Call != nil {
			out.Tool, out.Args = a.Call.Name, compactJSON(a.Call.Args)
		}
		if a.Result != nil {
			out.Result, out.IsError, out.Decision = a.Result.Content, a.Result.IsError, a.Result.Decision
		}
	}
	if ev.Approval != nil {
		out.Approval = ev.Approval.ID
	}
	if ev.Fault != nil {
		out.Fault = string(ev.Fault.Class) + ": " + ev.Fault.Message
	}
	if ev.Result != nil {
		out.Reason, out.Text = ev.Result.Reason, ev.Result.Text
	}
	if st := ev.Stats; st != nil {
		out.Status = &web.Status{Model: st.Model, Turns: st.Turns, Cost: st.Cost, TDD: st.TDD, Mode: st.Mode}
	}
	return out, true
}

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// webPrincipal is who a login link minted on the kernel socket is for:
// the socket admits only the daemon's own user.
func webPrincipal(u *userenv.Env) string {
	if n, ok := u.Getenv("USER"); ok && n != "" {
		return "user:" + n
	}
	return "user"
}

// startWeb builds the web console on k (its sessions, approval broker,
// change sets and audit log) and registers web.login on mux. The caller
// serves it on serve.web.listen and runs it as the "web" channel. close
// releases its audit reader.
func startWeb(ctx context.Context, u *userenv.Env, k *Kernel, hub *web.Hub, mux *ipc.Mux, c config.Web, log *slog.Logger) (_ *web.Server, closeFn func(), err error) {
	db, keys, err := u.AuditPaths()
	if err != nil {
		return nil, nil, err
	}
	r, err := audit.OpenReader(ctx, db)
	if err != nil {
		return nil, nil, fmt.Errorf("serve.web: the audit log: %w", err)
	}
	closeFn = func() { _ = r.Close() }
	defer func() {
		if err != nil {
			closeFn()
		}
	}()
	key, err := audit.LoadKey(keys)
	if err != nil {
		return nil, nil, fmt.Errorf("serve.web: the audit log's key: %w", err)
	}
	var hosts []string
	for _, h := range c.Hosts {
		hosts = append(hosts, strings.ToLower(h))
	}
	srv, err := web.New(web.Options{Sessions: webSessions{k.sessions}, Approvals: k.broker, Changes: webChanges{k.sessions.Changes()},
		Log: web.ReaderLog{R: r, Verifier: key.Verifier}, Audit: auditOnDemand{u: u, held: &k.held}, Hub: hub, Hosts: hosts,
		Logger: log.With("channel", web.Name)})
	if err != nil {
		return nil, nil, err
	}
	principal := webPrincipal(u)
	if err := mux.Handle(web.MethodLogin, func(context.Context, *ipc.Request) (any, error) {
		link, err := srv.LoginURL(principal)
		if err != nil {
			return nil, err
		}
		return web.LoginResult{URL: link}, nil
	}); err != nil {
		return nil, nil, err
	}
	return srv, closeFn, nil
}

// checkWebListen: the console listens on loopback unless serve.web.hosts
// names the reverse proxy in front of it.
func checkWebListen(c config.Web) error {
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("%q: want host:port: %w", c.Listen, err)
	}
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() || len(c.Hosts) > 0 {
		return nil
	}
	return fmt.Errorf("%q: the console is served on loopback only, unless serve.web.hosts names the TLS reverse proxy in front of it", c.Listen)
}

// closer is a channel with what to release when the daemon closes its
// channels (closeChannels).
type closer struct {
	*web.Server
	close func()
}

func (c closer) Close() error {
	c.close()
	return nil
}
