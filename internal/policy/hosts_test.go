package policy

import (
	"strings"
	"testing"
)

// TestHostPatterns: only a rule with a host matcher that allows or asks
// makes a destination reachable; the default rules and block rules do not.
func TestHostPatterns(t *testing.T) {
	for _, tc := range []struct {
		name, user string
		want       string
	}{
		{"defaults only", "", ""},
		{"allow with host", "rules:\n  - id: local\n    effect: allow\n    match: {action: net, host: [\"127.0.0.1:8080\", \"x.test\"]}\n", "127.0.0.1:8080 x.test"},
		{"approve with host", "rules:\n  - id: ask\n    effect: approve\n    match: {action: net, host: \"*.example.com\"}\n", "*.example.com"},
		{"block with host", "rules:\n  - id: no\n    effect: block\n    match: {action: net, host: \"evil.test\"}\n", ""},
		{"allow net without host", "rules:\n  - id: any\n    effect: allow\n    match: {action: net}\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(mustCompile(t, Options{}, tc.user).HostPatterns(), " "); got != tc.want {
				t.Fatalf("HostPatterns = %q, want %q", got, tc.want)
			}
		})
	}
}
