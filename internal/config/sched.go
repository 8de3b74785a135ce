package config

import "github.com/fluffy-agent/fluffy/internal/units"

// Sched bounds what runs at once (internal/sched, docs/sched.md). Only
// the user sets it: a project must not be able to starve the person's
// other work.
type Sched struct {
	// Global bounds the daemon's turns running at once.
	Global int `yaml:"global" scope:"user"`
	// PerSession bounds one session's turns running at once.
	PerSession int `yaml:"per_session" scope:"user"`
	// ModelCalls bounds the model calls in flight to one provider.
	ModelCalls int `yaml:"model_calls" scope:"user"`
	// Sandboxes bounds the sandboxed commands running at once.
	Sandboxes int `yaml:"sandboxes" scope:"user"`
	// Containers bounds the containers (running or pre-warmed).
	Containers int `yaml:"containers" scope:"user"`
	// Memory bounds the sum of the memory limits of running commands
	// (0: not counted).
	Memory units.Size `yaml:"memory" scope:"user"`
	// Aging is each priority class's head start over the next.
	Aging units.Duration `yaml:"aging" scope:"user"`
}

// defaultSched suits a two-core machine: two commands at once, a few
// turns waiting on their models.
func defaultSched() Sched {
	return Sched{Global: 4, PerSession: 1, ModelCalls: 4, Sandboxes: 2, Containers: 2, Aging: units.Duration(30e9)}
}
