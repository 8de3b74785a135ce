package wiring

import (
	"context"
	"os"
	"path/filepath"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/plugin"
	"github.com/fluffy-agent/fluffy/internal/plugin/host"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandboxrun"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// TestPlugin runs `fluffy plugin test`: dir's plugin, not necessarily
// installed, started in the sandbox runtime its manifest (or the
// configuration) names, as a session would run it, with workspace as its
// workspace (read-only, or an overlay over a change set thrown away
// afterwards with write-changeset) and its declared hosts through an
// egress proxy; then its tests/*.json cases (host.Trial).
func (*Core) TestPlugin(ctx context.Context, u *userenv.Env, dir, workspace string) (plugin.TestReport, error) {
	m, err := plugin.ReadManifest(dir)
	if err != nil {
		return plugin.TestReport{}, err
	}
	cases, err := plugin.ReadTests(dir)
	if err != nil {
		return plugin.TestReport{Manifest: m}, err
	}
	l, err := u.Config()
	if err != nil {
		return plugin.TestReport{Manifest: m}, err
	}
	sc := l.Config.Sandbox
	want := m.Sandbox.Runtime
	if want == "" {
		want = sc.Runtime
	}
	name, err := detectRuntime(ctx, want, hostProbes(u, sc.AllowDegraded))
	if err != nil {
		return plugin.TestReport{Manifest: m}, err
	}
	rt, release, err := sandboxRuntime(ctx, sandboxrun.RuntimeRequest{User: u, Name: name, Image: sc.Image, Template: sc.Template, AllowDegraded: sc.AllowDegraded})
	if err != nil {
		return plugin.TestReport{Manifest: m}, err
	}
	defer release()
	// The change set of a trial is thrown away: nothing a plugin on
	// trial writes reaches the workspace.
	scratch, err := os.MkdirTemp("", "fluffy-plugin-test-")
	if err != nil {
		return plugin.TestReport{Manifest: m}, err
	}
	defer os.RemoveAll(scratch)
	// As root the sandbox runs as another user, who must reach it.
	if err := os.Chmod(scratch, 0o755); err != nil {
		return plugin.TestReport{Manifest: m}, err
	}
	log := u.Logger().With("component", "plugin-test")
	rts := map[string]sandbox.Runtime{name: rt}
	if m.Sandbox.Runtime != "" {
		rts[m.Sandbox.Runtime] = rt // auto, as it resolved
	}
	images := newPluginImages(u, name, "plugin-test")
	defer images.Close()
	o := host.Options{
		Runtimes: rts, DefaultRuntime: name, Images: images,
		Session: "plugin-test", Workspace: workspace, ChangeSet: filepath.Join(scratch, "upper"),
		Env: u.SandboxEnv(), Egress: pluginEgress(u, "plugin-test", discardLog{}, log, nil), Logger: log, SocketRoot: secretsTmpfs(),
	}
	return host.Trial(ctx, o, m, dir, cases)
}

// discardLog is the audit log of a trial: none, a trial is no session.
type discardLog struct{}

func (discardLog) Append(context.Context, audit.Entry) (uint64, error) { return 0, nil }
func (discardLog) Flush(context.Context) error                         { return nil }
func (discardLog) VerifyAtStart(context.Context) (audit.Report, error) {
	return audit.Report{}, nil
}
