package native

import "syscall"

// startMode is how a run's sandbox was started. Each run takes exactly
// one, tried in this order (Runtime.run); fluffy sandbox run --trace
// prints it first, and docs/sandbox.md uses the same names.
type startMode int

const (
	// modeAhead: a direct start built before its request (PrepareNext)
	// on the same change set; the run connects its stdio and releases it.
	modeAhead startMode = iota + 1
	// modeDirect: PID 1 is cloned by vfork into its namespaces and runs
	// a program of raw system calls that builds the sandbox, then
	// executes the small reaper (direct_linux.go); no Go init.
	modeDirect
	// modeVfork: the Go init (package nsinit) is cloned by vfork into its
	// namespaces (vfork_linux.go), for what a direct start cannot do
	// (the egress proxy, a probe, a host without mount_setattr).
	modeVfork
	// modeStage1: the small init binary is started by os/exec without
	// namespaces and clones the namespaced Go init from its own small
	// address space (nsinit.Stage1Main; Runtime.useStage1 says when).
	modeStage1
	// modeExec: the Go init is cloned into its namespaces by os/exec
	// (where vfork is not possible), copying this process's page tables.
	modeExec
)

// String returns the mode's name as the trace and the docs use it.
func (m startMode) String() string {
	switch m {
	case modeAhead:
		return "ahead"
	case modeDirect:
		return "direct"
	case modeVfork:
		return "vfork"
	case modeStage1:
		return "stage-1"
	case modeExec:
		return "exec"
	}
	return "none"
}

// direct says whether the mode's PID 1 is a direct start's (its trace
// marks are PID 1's, not the Go init's).
func (m startMode) direct() bool { return m == modeAhead || m == modeDirect }

// sandboxNamespaces are the namespaces every sandbox is cloned into,
// whatever its start mode: user, mount, PID, network, IPC, UTS, cgroup.
const sandboxNamespaces = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET |
	syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWCGROUP
