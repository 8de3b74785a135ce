//go:build fluffy_front

package cli

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/fluffy-agent/fluffy/internal/config"
	"github.com/fluffy-agent/fluffy/internal/sandbox"
)

// The front build is the small 'fluffy' binary: it starts in a fraction
// of the time the full build takes (no model SDKs, container client,
// policy engine or kernel to initialise), runs 'sandbox run' on the
// native runtime itself, and hands everything else over to fluffy-core.
// See docs/ARCHITECTURE.md.

// addCommands adds what the front build runs itself.
func addCommands(a *App, root *cobra.Command) {
	root.AddCommand(newVersionCmd(a), newSandboxCmd(a))
}

// otherSandboxRuntime: auto, docker and podman are fluffy-core's.
func otherSandboxRuntime(context.Context, *App, string, string, string, bool, io.Writer) (sandbox.Runtime, func(), error) {
	return nil, nil, ErrHandOver
}

// egress stands in for the egress proxy, which is fluffy-core's.
type egress struct {
	socket string
	env    []string
}

func (*egress) close() {}

// startEgress: --net proxy is fluffy-core's.
func startEgress(*App, *auditRecorder, config.Net, string, []string, string) (*egress, error) {
	return nil, ErrHandOver
}
