// Command hello is a Go program that does nothing: the floor of a Go
// client's run, for BenchmarkClientProcess.
package main

import "os"

func main() { os.Exit(0) }
