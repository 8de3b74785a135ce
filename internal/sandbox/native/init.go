package native

import "github.com/fluffy-agent/fluffy/internal/sandbox/native/nsinit"

// InitArg0 is argv[0] of the sandbox init; see nsinit.
const InitArg0 = nsinit.Arg0

// IsInit reports whether this process was started as the sandbox init.
func IsInit() bool { return nsinit.IsInit() }

// InitMain runs the sandbox init (nsinit.Main) and returns its exit status.
func InitMain() int { return nsinit.Main() }
