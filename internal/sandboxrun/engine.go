package sandboxrun

// What 'fluffy sandbox gc' and 'fluffy image build' report of a
// container engine (internal/wiring talks to it).

// Container is a sandbox container fluffy labelled, as 'sandbox gc'
// found it.
type Container struct {
	ID, Session, Template, Owner string
}

// ImageBuild is what 'fluffy image build' asks for.
type ImageBuild struct {
	// Dir holds the Dockerfile of a skill image; empty means the base
	// image.
	Dir string
	// Tag defaults to the base image's for the base image.
	Tag string
	// Minimal builds the busybox base image instead of the Debian one.
	Minimal bool
}

// Image is an image 'fluffy image build' built, or found up to date.
type Image struct {
	Tag string
	// Content is the hash of what it was built from.
	Content string
	// Cached: an image with the same tag was built from the same
	// content; nothing was built.
	Cached bool
}

// EngineError is a container engine that could not be reached: no
// sandbox can be set up (the CLI exits ExitSetup).
type EngineError struct{ Err error }

func (e *EngineError) Error() string { return e.Err.Error() }
func (e *EngineError) Unwrap() error { return e.Err }
