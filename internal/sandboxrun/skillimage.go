package sandboxrun

import "io"

// What 'fluffy skill build' asks of and reports about skill images
// (internal/wiring builds them with internal/sandbox/docker/skillimage).

// SkillBuild is what 'fluffy skill build' asks for.
type SkillBuild struct {
	// Runtime is the engine: docker or podman.
	Runtime string
	// Names are the skills to build; empty means every skill with a
	// Dockerfile.
	Names []string
	// GC removes the images of skills that are gone and superseded
	// ones afterwards; with no Names it builds nothing.
	GC bool
	// Progress receives the engine's build output; nil discards it.
	Progress io.Writer
}

// SkillImage is one skill's image as 'fluffy skill build' left it.
type SkillImage struct {
	Skill string
	// Ref is the image the skill runs in (the base image's for a skill
	// without a Dockerfile).
	Ref string
	// Built: this call built it; else it was up to date (or is the base
	// image).
	Built bool
	// Base: the skill has no Dockerfile and runs in the base image.
	Base bool
	// Err is why it could not be built.
	Err error
}

// SkillImageGC is a stale skill image 'fluffy skill build --gc' found.
type SkillImageGC struct {
	Ref, Skill, Reason string
	// InUse: a container uses it, so it was kept.
	InUse bool
}

// SkillBuildReport is what 'fluffy skill build' did.
type SkillBuildReport struct {
	Images  []SkillImage
	Removed []SkillImageGC
}
