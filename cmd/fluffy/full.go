//go:build !fluffy_front

package main

import "github.com/fluffy-agent/fluffy/internal/netproxy"

// front says this is the full build (see the package comment).
const front = false

// handOver is never called in the full build.
func handOver() int { return 1 }

// forwarder runs the egress forwarder when fluffy-core re-executes itself
// as one (--net proxy, which only the full build runs).
func forwarder(args []string) (int, bool) {
	if len(args) > 1 && args[1] == netproxy.ForwardCommand {
		return netproxy.ForwardMain(args[2:]), true
	}
	return 0, false
}
