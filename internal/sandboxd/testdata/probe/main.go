// Command probe is the smallest client of a sandbox server, as the front
// build of cmd/fluffy is one: BenchmarkClientProcess measures its whole
// run (exec, Go runtime start, SocketPath, Call, exit) against a server.
// Usage: probe CORE SERVER-ARGV... -- ARGS...
// $PROBE_CATCH_AFTER sets ClientOptions.CatchSignalsAfter.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/fluffy-agent/fluffy/internal/sandboxd"
)

func main() {
	var server, args []string
	for i, a := range os.Args[1:] {
		if a == "--" {
			server, args = append([]string(nil), os.Args[1:1+i]...), os.Args[2+i:]
			break
		}
	}
	if len(server) == 0 {
		fmt.Fprintln(os.Stderr, "usage: probe CORE SERVER-ARGV... -- ARGS...")
		os.Exit(2)
	}
	sock, err := sandboxd.SocketPath(server[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	wd, _ := os.Getwd()
	after, _ := time.ParseDuration(os.Getenv("PROBE_CATCH_AFTER"))
	r, err := sandboxd.Call(context.Background(), sandboxd.ClientOptions{Socket: sock, Server: append(server, "--socket", sock), CatchSignalsAfter: after},
		sandboxd.Request{Args: args, Environ: os.Environ(), Cwd: wd})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(r.Code)
}
