package sandbox

import (
	"context"
	"errors"
)

// ErrImageDigest: the image a pinned reference (NAME@sha256:HEX) names
// is not, or is no longer, the one its digest pins.
var ErrImageDigest = errors.New("image does not match its pinned digest")

// ImageRuntime is a runtime that can start its sandboxes from a pinned
// image (the container runtimes): Pinned resolves ref, NAME@sha256:HEX,
// to a runtime whose sandboxes start from exactly that image, and the
// image's own command. An image that is not the pinned one is an error
// wrapping ErrImageDigest.
type ImageRuntime interface {
	Pinned(ctx context.Context, ref string) (Runtime, []string, error)
}
