package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/fluffy-agent/fluffy/internal/sandbox"
	"github.com/fluffy-agent/fluffy/internal/sandbox/native"
)

// newSandboxRuntime returns the backend named by runtime (sandbox.runtime
// or --runtime) and a function releasing it: the native backend (the
// sandbox server's shared one, when this command runs in the server and
// is not traced), or a container engine (otherSandboxRuntime).
func newSandboxRuntime(ctx context.Context, a *App, runtime, template, image string, allowDegraded bool, trace io.Writer) (sandbox.Runtime, func(), error) {
	switch runtime {
	case "", "native":
		if a.Host != nil && trace == nil {
			rt, err := a.Host.runtime(allowDegraded)
			if err != nil {
				return nil, nil, err
			}
			return rt, func() {}, nil
		}
		rt, err := native.New(native.Options{Self: a.Self, AllowDegraded: allowDegraded, Logger: a.Logger(), Trace: trace})
		if err != nil {
			return nil, nil, err
		}
		// Look at the host (namespaces, landlock, cgroups) while the
		// caller finishes its own set-up, not at the start of the run.
		go rt.Prepare()
		return rt, func() {}, nil
	case "auto", "docker", "podman":
		return otherSandboxRuntime(ctx, a, runtime, template, image, allowDegraded, trace)
	}
	return nil, nil, fmt.Errorf("%w: unknown sandbox runtime %q (have native, docker, podman)", errUsage, runtime)
}
