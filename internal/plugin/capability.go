package plugin

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/fluffy-agent/fluffy/internal/operation"
	"github.com/fluffy-agent/fluffy/internal/policy"
)

// Decider is the policy as the capability pre-check asks it
// (*policy.Engine).
type Decider interface {
	Decide(ctx context.Context, op operation.Operation) policy.Decision
}

// Check is one capability as asked, the operation that stands for it and
// what the policy decides for that operation.
type Check struct {
	Capability Capability
	// What names the capability's object: the workspace, a host, a
	// secret reference.
	What     string
	Op       operation.Operation
	Decision policy.Decision
}

// ErrBlocked is matched by PreCheck's error when the policy blocks a
// capability a plugin asks for: such a plugin is not installed.
var ErrBlocked = errors.New("plugin: the policy blocks a capability it asks for")

// PreCheck maps every capability of m to operations, as the plugin's
// tools would make them, and decides each with the policy: reading or
// writing the workspace root, reaching each declared host, using each
// credential, sending a message. The tool of every operation is
// "mcp.NAME.*" (rules matching mcp.NAME.* or mcp.* apply), tagged
// "plugin". ws is the canonical workspace; mode the TDD mode. It returns
// every check, and an error wrapping ErrBlocked naming the blocked ones.
func PreCheck(ctx context.Context, d Decider, m Manifest, ws, mode string) ([]Check, error) {
	var checks []Check
	sess := operation.Session{ID: "plugin-install", Mode: mode, Workspace: ws}
	op := func(a operation.Action) operation.Operation {
		return operation.Operation{Tool: "mcp." + m.Name + ".*", Action: a, Session: sess, Tags: []string{"plugin"}}
	}
	for _, c := range m.Capabilities {
		switch c {
		case CapReadWorkspace, CapWriteChangeSet:
			o := op(operation.Read)
			if c == CapWriteChangeSet {
				o = op(operation.Write)
				o.Tags = append(o.Tags, "writes")
			}
			if ws != "" {
				o.Paths = []operation.Path{{Abs: ws, Raw: ws, InWorkspace: true}}
			}
			checks = append(checks, Check{Capability: c, What: "the workspace", Op: o})
		case CapNetwork:
			for _, h := range m.Network {
				o := op(operation.Net)
				o.Tags = append(o.Tags, "net")
				o.Hosts = []operation.Host{hostOf(h)}
				checks = append(checks, Check{Capability: c, What: h, Op: o})
			}
		case CapSecrets:
			for _, cr := range m.Credentials {
				o := op(operation.Secret)
				o.Tags = append(o.Tags, "secrets")
				checks = append(checks, Check{Capability: c, What: cr.Ref, Op: o})
			}
		case CapMessages:
			o := op(operation.Message)
			checks = append(checks, Check{Capability: c, What: "messages", Op: o})
		}
	}
	var blocked []string
	for i := range checks {
		checks[i].Decision = d.Decide(ctx, checks[i].Op)
		if checks[i].Decision.Effect == policy.Block {
			blocked = append(blocked, fmt.Sprintf("%s %s (%s)", checks[i].Capability, checks[i].What, checks[i].Decision.Rule))
		}
	}
	if len(blocked) > 0 {
		return checks, fmt.Errorf("%w: %s", ErrBlocked, strings.Join(blocked, "; "))
	}
	return checks, nil
}

// hostOf is a network entry as an operation's host: "*.example.org"
// stands for a name under example.org.
func hostOf(h string) operation.Host {
	name, port, _ := strings.Cut(h, ":")
	n, _ := strconv.Atoi(port)
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		name = "any." + rest
	}
	return operation.Host{Name: name, Port: n}
}
