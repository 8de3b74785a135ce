//go:build !fluffy_front

package main

// front says this is the full build (see the package comment).
const front = false

// handOver is never called in the full build.
func handOver() int { return 1 }
