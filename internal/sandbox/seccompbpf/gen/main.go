// Command gen writes internal/sandbox/seccomp_bpf.go, the seccomp profiles
// assembled to BPF (seccompbpf.Generate). Run it with go generate
// ./internal/sandbox.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/fluffy-agent/fluffy/internal/sandbox/seccompbpf"
)

func main() {
	out := flag.String("o", "seccomp_bpf.go", "output file")
	flag.Parse()
	src, err := seccompbpf.Generate()
	if err == nil {
		err = os.WriteFile(*out, src, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "seccompbpf/gen:", err)
		os.Exit(1)
	}
}
