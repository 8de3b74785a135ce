package nsinit

// Config is what the parent sends the sandbox init on fd 3, as one
// framed binary message (codec.go), followed by the byte Release once the init is in its
// cgroup (the init starts the command only after it). Host paths are
// already resolved (no symlinks) by the parent.
type Config struct {
	// Protocol is the parent's Protocol: an init built from other sources
	// refuses to run (a stale fluffy-sandbox-init beside a new fluffy).
	Protocol int `json:"protocol"`

	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`

	// Workspace overlay: lower (host path = inside path), upper, work.
	Workspace string `json:"workspace,omitempty"`
	Upper     string `json:"upper,omitempty"`
	Work      string `json:"work,omitempty"`
	// LowerFD says the parent sends an idmapped clone of the workspace
	// over the socket on fd 5 (root callers: host uid 0 files appear owned
	// by the sandbox's uid 0).
	LowerFD bool `json:"lower_fd,omitempty"`
	// WorkspaceRO mounts the workspace read-only without overlay
	// (degraded: overlay unavailable).
	WorkspaceRO bool `json:"workspace_ro,omitempty"`
	// OverlayRO makes the workspace's overlay read-only once mounted: the
	// command sees the change set over the workspace and writes neither
	// (EROFS; sandbox.Spec.WorkspaceReadOnly).
	OverlayRO bool `json:"overlay_ro,omitempty"`

	Mounts  []MountSpec `json:"mounts,omitempty"`
	TmpSize int64       `json:"tmp_size"`
	// UpperSize, when above zero, keeps the overlay's upper and work
	// directories in a tmpfs of that many bytes mounted over Upper's
	// parent inside the sandbox (a throw-away change set): what the
	// command writes to the workspace is bounded by it (ENOSPC beyond)
	// and gone with the sandbox; the host's directory stays empty.
	UpperSize int64 `json:"upper_size,omitempty"`
	// upperBase is the inodes in use in the UpperSize tmpfs once the
	// overlay is mounted (the init's own, not sent).
	upperBase int64

	// Seccomp is the raw BPF program; empty means none (degraded).
	Seccomp []byte `json:"seccomp,omitempty"`
	// Landlock is the ABI to use; 0 means none (degraded).
	Landlock int `json:"landlock"`
	// LandlockNet restricts TCP bind/connect too (network none).
	LandlockNet bool `json:"landlock_net"`

	Rlimits []Rlimit `json:"rlimits,omitempty"`

	// ProxySocket (the egress proxy's socket, inside) and ProxyListen
	// are set for network mode proxy: the init brings loopback up and
	// forwards ProxyListen to the socket while the command runs.
	ProxySocket string `json:"proxy_socket,omitempty"`
	ProxyListen string `json:"proxy_listen,omitempty"`
	// ProxyFD says the socket comes as a detached mount on ProxyFD
	// (root callers) rather than as a bind of its host path.
	ProxyFD bool `json:"proxy_fd,omitempty"`

	// Probe makes the init report what it could set up and exit, without
	// running a command (facility detection).
	Probe bool `json:"probe,omitempty"`
	// Trace makes the init report when each of its stages ended.
	Trace bool `json:"trace,omitempty"`
}

// Protocol is the version of Config and Status; it changes with them.
const Protocol = 7

// ProxyFD is the init's descriptor for the egress proxy's socket as a
// detached mount (network mode proxy, root callers; Config.ProxyFD).
const ProxyFD = 7

// Release follows the configuration on fd 3 when the parent has put
// the init into its cgroup: the init starts no command before reading it.
const Release = 'G'

type MountSpec struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	Writable bool   `json:"writable"`
}

type Rlimit struct {
	Resource int    `json:"resource"`
	Value    uint64 `json:"value"`
}

// Status is what the init reports on fd 4 when it ends, as one framed
// binary message (codec.go). Stage names the step that failed when Error is set.
type Status struct {
	Stage    string `json:"stage,omitempty"`
	Error    string `json:"error,omitempty"`
	Started  bool   `json:"started"`
	ExitCode int    `json:"exit_code"`
	Signal   int    `json:"signal"`
	TmpFull  bool   `json:"tmp_full,omitempty"`
	// NotFound says the command's program was not found on its PATH
	// (Stage "command").
	NotFound bool `json:"not_found,omitempty"`
	// UpperFull says the throw-away change set (Config.UpperSize) had
	// no block or inode left at the end; UpperWritten that its file
	// system held more inodes then than once the overlay was mounted
	// (the command created, changed or deleted something).
	UpperFull    bool `json:"upper_full,omitempty"`
	UpperWritten bool `json:"upper_written,omitempty"`
	// SetupNanos is the init's own setup time.
	SetupNanos int64 `json:"setup_ns"`
	// Marks is the init's trace (Config.Trace).
	Marks []Mark `json:"marks,omitempty"`
	// CommandCPU is the CPU time (user, system; ns) of everything the init
	// reaped: the command and its descendants (traced runs only).
	CommandCPU [2]int64 `json:"command_cpu,omitempty"`
}
