package tool

import "github.com/fluffy-agent/fluffy/internal/sandbox"

// Confinement is a sandbox tool's command that states its whole
// sandbox (a skill's run): the router then gives it no workspace
// overlay, none of the session's declared uses of secrets and none of
// its network, only what is listed here; every gate before it is the
// same as for any call.
type Confinement struct {
	// Mounts are its bind mounts, read-only unless Writable. The masks of
	// fluffy's own files are added after them.
	Mounts []sandbox.Mount
	// Workspace gives it the session's workspace as the session's other
	// commands see it (the change set over the tree), at its own path,
	// read-only (sandbox.Spec.WorkspaceReadOnly): its lasting writes go
	// through Pending.
	Workspace bool
	// Hosts are the only destinations its egress proxy may let through,
	// each still decided by the session's policy; none: no network.
	Hosts []string
	// Credentials are the only secrets it gets, each decided and
	// recorded as a declared use is (docs/secrets.md); none: no secret.
	Credentials []Credential
	// Stdin is its standard input (nil: /dev/null).
	Stdin []byte
	// Memory (bytes) and Pids, when above zero, lower the router's
	// limits for the command.
	Memory int64
	Pids   int
	// Image, when set, is the container image it runs in
	// (sandbox.Spec.Image): a skill's own, built from its Dockerfile.
	Image string
	// Pending, when set, is a host folder the command may fill (through
	// a writable mount) with files it proposes to write into the
	// workspace, each at its path relative to the folder. Once the
	// command ends, the router takes every regular file there as an
	// fs.write call on the command's behalf, through all the gates, and
	// empties the folder (docs/skills.md#lasting-writes).
	Pending string
}

// Credential is a secret a confined command gets: a reference and how
// it enters (env, file or proxy, as internal/secret.Use states them).
type Credential struct {
	Ref  string
	As   string
	Name string
	// Bind are a proxy credential's hosts.
	Bind []string
}

// NormalizeError is a Normalize failure that says what to do instead: the
// router refuses the call with its Rule and Instead rather than the
// generic advice about paths.
type NormalizeError struct {
	Rule    string
	Instead string
	Err     error
}

func (e *NormalizeError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *NormalizeError) Unwrap() error { return e.Err }
