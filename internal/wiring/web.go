package wiring

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fluffy-agent/fluffy/internal/agent"
	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/channel/cron"
	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/ipc"
	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
	"github.com/fluffy-agent/fluffy/internal/sched"
	"github.com/fluffy-agent/fluffy/internal/secret"
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
func startWeb(ctx context.Context, u *userenv.Env, k *Kernel, hub *web.Hub, mux *ipc.Mux, l *config.Loaded, ws string, log *slog.Logger) (_ *web.Server, _ func(), err error) {
	c, mode := l.Config.Serve.Web, l.Config.TDD.Mode
	db, keys, err := u.AuditPaths()
	if err != nil {
		return nil, nil, err
	}
	r, err := audit.OpenReader(ctx, db)
	if err != nil {
		return nil, nil, fmt.Errorf("serve.web: the audit log: %w", err)
	}
	closeReader := func() { _ = r.Close() }
	defer func() {
		if err != nil {
			closeReader()
		}
	}()
	key, err := audit.LoadKey(keys)
	if err != nil {
		return nil, nil, fmt.Errorf("serve.web: the audit log's key: %w", err)
	}
	tlsCfg, err := webTLS(c)
	if err != nil {
		return nil, nil, err
	}
	var hosts []string
	for _, h := range c.Hosts {
		hosts = append(hosts, strings.ToLower(h))
	}
	srv, err := web.New(web.Options{Sessions: webSessions{k.sessions}, Approvals: k.broker, Changes: webChanges{k.sessions.Changes()},
		Policy: webPolicy{live: k.live, ws: ws, mode: mode}, Secrets: webSecrets{u: u, l: l},
		Schedules: webSchedules{u: u, l: l, sched: k.sched}, Memory: webMemory{u: u, ws: ws, held: &k.mem},
		Transcript: webSessions{k.sessions}, Skills: webSkills{u: u, ws: ws}, Plugins: webPlugins{db: k.db.DB, audit: auditOnDemand{u: u, held: &k.held}},
		Log: web.ReaderLog{R: r, Verifier: key.Verifier}, Audit: auditOnDemand{u: u, held: &k.held}, Hub: hub, Hosts: hosts, TLS: tlsCfg != nil,
		Passkeys: webPasskeys{db: k.db.DB},
		Logger:   log.With("channel", web.Name)})
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
	return srv, closeReader, nil
}

// checkWebListen: the console listens on loopback unless serve.web.hosts
// names the reverse proxy in front of it.
func checkWebListen(c config.Web) error {
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("%q: want host:port: %w", c.Listen, err)
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("serve.web.tls_cert and serve.web.tls_key go together")
	}
	ip := net.ParseIP(host)
	if host == "" || ip != nil && ip.IsUnspecified() {
		// Every address of the machine: the Host check needs the names
		// the console is reached at.
		if len(c.Hosts) == 0 {
			return fmt.Errorf("%q listens on every address: name the host:port the console is reached at in serve.web.hosts", c.Listen)
		}
	}
	if host == "localhost" || ip != nil && ip.IsLoopback() || len(c.Hosts) > 0 || c.TLSCert != "" {
		return nil
	}
	return fmt.Errorf("%q: the console is served on loopback only, unless it has its own certificate (serve.web.tls_cert) or serve.web.hosts names the TLS reverse proxy in front of it", c.Listen)
}

// webTLS is the console's TLS configuration from serve.web.tls_cert and
// tls_key; nil when they are not set.
func webTLS(c config.Web) (*tls.Config, error) {
	if c.TLSCert == "" && c.TLSKey == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("serve.web.tls_cert, tls_key: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
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

// webPolicy is the live policy for the console's policy page; a
// workspace of "" is the assistant's (ws).
type webPolicy struct {
	live *livePolicy
	ws   string
	mode string // tdd.mode, the mode an explained operation is decided in
}

func (p webPolicy) workspace(ws string) string {
	if ws == "" {
		return p.ws
	}
	return ws
}

func (p webPolicy) Effective(ctx context.Context, ws string) (web.PolicyView, error) {
	ws = p.workspace(ws)
	e, err := p.live.engine(ctx, ws)
	if err != nil {
		return web.PolicyView{}, err
	}
	w, err := p.live.workspace(ws)
	if err != nil {
		return web.PolicyView{}, err
	}
	v := web.PolicyView{Workspace: ws, Default: e.Default().String()}
	for _, f := range []struct{ name, path string }{{"user policy", w.files.User}, {"project policy", w.files.Project}} {
		if f.path == "" {
			continue
		}
		_, serr := os.Stat(f.path)
		v.Files = append(v.Files, web.PolicyFile{Name: f.name, Path: f.path, Present: serr == nil})
	}
	for _, r := range e.Rules() {
		v.Rules = append(v.Rules, web.PolicyRule{ID: r.ID, Effect: r.Effect, Layer: string(r.Layer), Source: r.Source, Description: r.Description})
	}
	if rj := p.live.rejected(ws); rj != nil {
		v.Rejected = rj.err.Error()
	}
	return v, nil
}

// errPolicyQuery: the typed operation cannot be decided as given.
var errPolicyQuery = errors.New("web: policy query")

func (p webPolicy) Explain(ctx context.Context, ws string, q web.PolicyQuery) (web.PolicyDecision, error) {
	ws = p.workspace(ws)
	act := operation.Action(q.Action)
	if act == "" {
		act = operation.GuessAction(q.Tool)
	}
	if !act.Valid() {
		return web.PolicyDecision{}, fmt.Errorf("%w: cannot tell the action of tool %q; choose one", errPolicyQuery, q.Tool)
	}
	op := operation.Operation{Tool: q.Tool, Action: act, CommandLine: q.Shell,
		Session: operation.Session{ID: "web", Mode: p.mode, Workspace: ws}}
	for _, path := range q.Paths {
		op.Paths = append(op.Paths, operation.Path{Raw: path})
	}
	for _, h := range q.Hosts {
		name, port, hasPort := strings.Cut(h, ":")
		hp := operation.Host{Name: name}
		if hasPort {
			n, err := strconv.Atoi(port)
			if err != nil || n < 1 || n > 65535 {
				return web.PolicyDecision{}, fmt.Errorf("%w: host %q: the port must be 1-65535", errPolicyQuery, h)
			}
			hp.Port = n
		}
		if name == "" {
			return web.PolicyDecision{}, fmt.Errorf("%w: host %q has no name", errPolicyQuery, h)
		}
		op.Hosts = append(op.Hosts, hp)
	}
	if err := policy.Normalize(&op, ws); err != nil {
		return web.PolicyDecision{}, fmt.Errorf("%w: %v", errPolicyQuery, err)
	}
	d := p.live.Explain(ctx, op)
	out := web.PolicyDecision{Effect: d.Effect.String(), Rule: d.Rule, Layer: string(d.Layer), Source: d.Source, Reason: d.Reason, Subject: d.Subject}
	for _, m := range d.Matched {
		out.Matched = append(out.Matched, web.PolicyMatch{Rule: m.Rule, Effect: m.Effect.String(), Layer: string(m.Layer), Subject: m.Subject, Error: m.Error, Shadowed: m.Shadowed})
	}
	return out, nil
}

// webSecrets lists the backends and declared uses for the credentials
// page. It asks each backend for its state only (secret.Stater) and never
// resolves a reference: no value reaches the page.
type webSecrets struct {
	u *userenv.Env
	l *config.Loaded
}

// Backends asks each configured backend for its state.
func (s webSecrets) Backends(ctx context.Context) ([]web.SecretBackend, error) {
	bs, err := s.u.SecretBackends(nil)
	if err != nil {
		return nil, err
	}
	var out []web.SecretBackend
	for _, n := range slices.Sorted(maps.Keys(bs)) {
		st, detail := secret.Unlocked, ""
		if x, ok := bs[n].(secret.Stater); ok {
			st, detail = x.State(ctx)
		}
		out = append(out, web.SecretBackend{Name: n, State: string(st), Detail: detail})
	}
	return out, nil
}

// Secrets lists the declared uses and the webhooks' keys.
func (s webSecrets) Secrets(context.Context) (web.SecretsView, error) {
	var v web.SecretsView
	uses, err := s.u.SecretUses()
	if err != nil {
		v.Error = err.Error()
	}
	for _, u := range uses {
		v.Uses = append(v.Uses, web.SecretUse{Ref: u.Ref.String(), Backend: u.Ref.Backend, As: string(u.As), Name: u.Name,
			Bind: u.Bind, Commands: u.Commands, Templates: u.Templates})
	}
	for _, h := range s.l.Config.Serve.Webhooks {
		if r, err := secret.ParseRef(h.Secret); err == nil {
			v.Uses = append(v.Uses, web.SecretUse{Ref: r.String(), Backend: r.Backend, By: "serve.webhooks " + h.Name})
		}
	}
	return v, nil
}

// webRunsPerJob bounds the runs the schedules page shows of each job.
const webRunsPerJob = 5

// webSchedules are the jobs of serve.cron and the heartbeat, read from
// the schedule's state in the data directory as `fluffy cron ls` reads
// them, and the kernel's scheduler.
type webSchedules struct {
	u     *userenv.Env
	l     *config.Loaded
	sched *sched.Scheduler
}

func (s webSchedules) Schedules(ctx context.Context) (web.ScheduleView, error) {
	var v web.ScheduleView
	if s.sched != nil {
		st := s.sched.Status()
		v.Scheduler = &st
	}
	home, _ := s.u.Getenv("HOME")
	cc := cron.ConfigFrom(s.l, home)
	if !wantCron(cc) {
		return v, nil
	}
	d, err := s.u.DataDir()
	if err != nil {
		return v, err
	}
	dir := cron.StateDir(d)
	c, err := cron.New(cc, cron.Options{StateDir: dir})
	if err != nil {
		return v, err
	}
	jobs, err := c.Status(time.Now())
	if err != nil {
		return v, err
	}
	recs, err := cron.ReadHistory(dir)
	if err != nil {
		return v, err
	}
	for _, j := range jobs {
		wj := web.CronJob{Name: j.Name, Schedule: j.Schedule, TimeZone: j.TimeZone, Missed: j.Missed, Next: j.Next}
		runs := cron.Runs(recs, j.Name)
		for i := len(runs) - 1; i >= 0 && len(wj.Runs) < webRunsPerJob; i-- {
			r := runs[i]
			wj.Runs = append(wj.Runs, web.CronRun{ID: r.ID, ScheduledFor: r.ScheduledFor, Trigger: r.Trigger, Outcome: string(r.Outcome),
				Session: r.Session, Detail: r.Detail, Missed: r.Missed})
		}
		v.Jobs = append(v.Jobs, wj)
	}
	return v, nil
}
