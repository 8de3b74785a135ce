// Command fluffy is the fluffy binary: the CLI, the supervisor, the
// sandbox server and, through hidden re-executions of itself, the sandbox
// init and the egress forwarder. It hands over to internal/cli at once.
//
// It is built twice (see the Makefile). The full build, installed as
// fluffy-core, has every command. The front build (-tags fluffy_front),
// installed as fluffy, is a small client that starts in about the time of
// a Go hello-world: it forwards 'fluffy sandbox run' to the per-user
// sandbox server (fluffy-core sandbox serve, which it starts when none
// answers; internal/sandboxd), prints 'fluffy version' itself, and
// replaces itself with fluffy-core (exec: same process, same arguments)
// for everything else, or when the server cannot be used.
package main
