package cli

import (
	"context"

	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/plugin"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandboxrun"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// Core is fluffy's daemon side as the CLI uses it. The entry point
// (cmd/fluffy) builds it (internal/wiring) and sets App.Core: the CLI
// itself links no sandbox backend, tool or egress proxy (internal/arch
// enforces it), so its commands stay flags, rendering and IPC calls.
type Core interface {
	// CheckRuntime returns nil when the sandbox runtime u's
	// configuration names is usable here, else a *bootstrap.StartError
	// naming each runtime's problem and its fix.
	CheckRuntime(ctx context.Context, u *userenv.Env) error
	// RunKernel serves the kernel daemon until ctx ends or it stops (ipc.ErrInUse, kernel.ErrAuditDamaged, kernel.ErrAuditUnavailable).
	RunKernel(ctx context.Context, u *userenv.Env, o kernel.DaemonOptions) error
	// CheckServe validates the configuration "fluffy serve" would run
	// and returns every problem found (none: it would start).
	CheckServe(u *userenv.Env) []error
	// AssistantWorkspace is the assistant's workspace directory
	// (serve.workspace, default ~/.fluffy/workspace).
	AssistantWorkspace(u *userenv.Env) (string, error)
	// RunSandbox runs one 'fluffy sandbox run' (internal/sandboxrun).
	RunSandbox(ctx context.Context, req sandboxrun.Request) (sandboxrun.Outcome, error)
	// NewSandboxHost returns the sandbox server's state shared by its runs.
	NewSandboxHost(u *userenv.Env) *sandboxrun.Host
	// SandboxFacilities probes what the native sandbox finds on this host (doctor).
	SandboxFacilities(ctx context.Context, u *userenv.Env) []sandbox.Facility
	// SandboxGC removes fluffy's orphaned containers (all: every one) on the engine of runtime (docker, podman).
	SandboxGC(ctx context.Context, u *userenv.Env, runtime string, all, dryRun bool) ([]sandboxrun.Container, error)
	// BuildImage builds the base image (Debian, or busybox with Minimal) or a Dockerfile's on the engine of runtime.
	BuildImage(ctx context.Context, u *userenv.Env, runtime string, b sandboxrun.ImageBuild) (sandboxrun.Image, error)
	// BuildSkillImages builds the images of u's skills that have a Dockerfile (or those b names) and with b.GC removes stale ones.
	BuildSkillImages(ctx context.Context, u *userenv.Env, b sandboxrun.SkillBuild) (sandboxrun.SkillBuildReport, error)
	// TestPlugin starts dir's plugin (installed or not) in its sandbox
	// with workspace, lists its tools and runs its tests/*.json cases
	// ('fluffy plugin test').
	TestPlugin(ctx context.Context, u *userenv.Env, dir, workspace string) (plugin.TestReport, error)
}
