package wiring

import (
	"context"

	"github.com/fluffy-agent/fluffy/internal/kernel"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// Core is the daemon side handed to the CLI (cli.Core).
type Core struct{}

// New returns the daemon side of the real host.
func New() *Core { return &Core{} }

// CheckRuntime resolves sandbox.runtime as sessions will (detectRuntime)
// and returns why none is usable.
func (*Core) CheckRuntime(ctx context.Context, u *userenv.Env) error {
	l, err := u.Config()
	if err != nil {
		return err
	}
	sc := l.Config.Sandbox
	_, err = detectRuntime(ctx, sc.Runtime, hostProbes(u, sc.AllowDegraded))
	return err
}

// RunKernel is the kernel daemon ("fluffy kernel"): see runKernel.
func (*Core) RunKernel(ctx context.Context, u *userenv.Env, o kernel.DaemonOptions) error {
	return runKernel(ctx, u, o)
}

// CheckServe validates what "fluffy serve" would run: see CheckServe.
func (*Core) CheckServe(u *userenv.Env) []error { return CheckServe(u) }

// AssistantWorkspace is serve.workspace, expanded: see AssistantWorkspace.
func (*Core) AssistantWorkspace(u *userenv.Env) (string, error) { return AssistantWorkspace(u) }
