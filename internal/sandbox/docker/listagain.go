package docker

import (
	"context"
	"time"
)

// ListAttempts is how often ListAgain asks.
const ListAttempts = 4

// ListAgain runs list, an engine's image or container list, until it
// answers, at most ListAttempts times. Podman's lists fail as a whole
// ("reading image ...: image not known") when an object goes while they
// list, which another fluffy's GC or build on the same engine does at any
// time; asking again lists what is there then. The last error is
// returned when every attempt failed, ctx's when it ends first.
func ListAgain[T any](ctx context.Context, list func(context.Context) (T, error)) (T, error) {
	var (
		v   T
		err error
	)
	for i := range ListAttempts {
		if v, err = list(ctx); err == nil {
			return v, nil
		}
		if i == ListAttempts-1 {
			break
		}
		select {
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		case <-time.After(time.Duration(i+1) * 50 * time.Millisecond):
		}
	}
	return v, err
}
