package doctor

import (
	"context"
	"slices"

	"github.com/fluffy-agent/fluffy/internal/secret"
)

// SecretChecks reports each configured secret backend's state as this
// process sees it (a daemon that holds an unlocked vault is another
// process): unlocked is OK; locked and unreachable warn, since fluffy
// works without secrets. Nothing a backend holds is shown.
func SecretChecks(ctx context.Context, backends map[string]secret.Backend) []Check {
	var names []string
	for n := range backends {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []Check
	for _, n := range names {
		c := Check{Name: "secrets: " + n, Status: OK, Detail: "ready", Doc: TroubleshootingDoc + "#a-secret-backend-is-locked-or-unreachable"}
		if s, ok := backends[n].(secret.Stater); ok {
			st, detail := s.State(ctx)
			c.Detail = string(st) + ": " + detail
			switch st {
			case secret.Locked:
				c.Status, c.Fix = Warn, "unlocked when a declared use first needs it; the daemon reads the configured password file (docs/secrets.md)"
			case secret.Unreachable:
				c.Status, c.Fix = Warn, "see docs/secrets.md for this backend's set-up"
			}
		}
		out = append(out, c)
	}
	return out
}
