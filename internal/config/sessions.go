package config

// Sessions bounds the trees of sub-agents a session may spawn
// (sessions.spawn, docs/subagents.md). Both keys loosen what a model may
// set in motion, so a project file may not set them.
type Sessions struct {
	// MaxDepth is how deep a tree may grow below its top-level session:
	// 1 allows children only, 0 refuses every spawn.
	MaxDepth int `yaml:"max_depth" scope:"user"`
	// MaxChildren is the most sub-agents one session may spawn.
	MaxChildren int `yaml:"max_children" scope:"user"`
}
