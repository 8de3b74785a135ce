package policy

import "testing"

// TestAllowsHosts: only a rule with a host matcher that allows or asks
// makes a destination reachable; the default rules and block rules do not.
func TestAllowsHosts(t *testing.T) {
	for _, tc := range []struct {
		name, user string
		want       bool
	}{
		{"defaults only", "", false},
		{"allow with host", "rules:\n  - id: local\n    effect: allow\n    match: {action: net, host: \"127.0.0.1:8080\"}\n", true},
		{"approve with host", "rules:\n  - id: ask\n    effect: approve\n    match: {action: net, host: \"*.example.com\"}\n", true},
		{"block with host", "rules:\n  - id: no\n    effect: block\n    match: {action: net, host: \"evil.test\"}\n", false},
		{"allow net without host", "rules:\n  - id: any\n    effect: allow\n    match: {action: net}\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustCompile(t, Options{}, tc.user).AllowsHosts(); got != tc.want {
				t.Fatalf("AllowsHosts = %v, want %v", got, tc.want)
			}
		})
	}
}
