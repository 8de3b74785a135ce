// Package nsinit is the native sandbox's init: the program that runs as
// PID 1 of the sandbox's fresh user, mount, PID, network, IPC, UTS and
// cgroup namespaces, builds the minimal root, drops every privilege,
// applies landlock, seccomp and rlimits, runs the command and reaps
// everything (see Main). Stage1Main is the small binary's other role: started
// without namespaces by a parent with a big heap, it clones the init. The parent side lives in package native, which
// sends a Config and reads a Status.
//
// It is kept apart, and its imports few (the standard library and
// golang.org/x/sys/unix, plus internal/netproxy/forward for network mode
// proxy, which uses only net and x/sys), because it starts at every sandboxed command:
// cmd/fluffy-sandbox-init is a small binary of its own, built and
// installed beside fluffy, and the fluffy binary still dispatches to Main
// when it is re-executed under the name Arg0 (the fallback when the small
// binary is absent, and what test binaries use).
package nsinit

// OOMScoreAdj is the oom_score_adj every sandbox gives itself (the
// direct start's first steps, Main's first line): the most Linux allows,
// so that under memory pressure the OOM killer picks a sandboxed command
// before fluffy's own processes, whose score the kernel daemon lowers
// (kernel.oom_protect).
const OOMScoreAdj = "1000"
