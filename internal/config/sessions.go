package config

import "github.com/fluffy-agent/fluffy/internal/units"

// Sessions bounds the trees of sub-agents a session may spawn
// (sessions.spawn, docs/subagents.md), and how long sessions are kept.
// Each key loosens what a model may set in motion or removes the
// person's data, so a project file may not set them.
type Sessions struct {
	// MaxDepth is how deep a tree may grow below its top-level session:
	// 1 allows children only, 0 refuses every spawn.
	MaxDepth int `yaml:"max_depth" scope:"user"`
	// MaxChildren is the most sub-agents one session may spawn.
	MaxChildren int `yaml:"max_children" scope:"user"`
	// Retention removes sessions not updated for this long (their change
	// sets and transcripts; their audit entries stay), docs/sched.md. 0:
	// never.
	Retention units.Duration `yaml:"retention" scope:"user"`
}
