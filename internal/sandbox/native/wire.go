package native

// initConfig is what the parent sends the sandbox init on fd 3, as JSON.
// Host paths are already resolved (no symlinks) by the parent.
type initConfig struct {
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

	Mounts  []mountSpec `json:"mounts,omitempty"`
	TmpSize int64       `json:"tmp_size"`

	// Seccomp is the raw BPF program; empty means none (degraded).
	Seccomp []byte `json:"seccomp,omitempty"`
	// Landlock is the ABI to use; 0 means none (degraded).
	Landlock int `json:"landlock"`
	// LandlockNet restricts TCP bind/connect too (network none).
	LandlockNet bool `json:"landlock_net"`

	Rlimits []rlimit `json:"rlimits,omitempty"`

	// ProxySocket (the egress proxy's socket, inside) and ProxyListen
	// are set for network mode proxy: the init brings loopback up and
	// forwards ProxyListen to the socket while the command runs.
	ProxySocket string `json:"proxy_socket,omitempty"`
	ProxyListen string `json:"proxy_listen,omitempty"`
	// ProxyFD says the socket comes as a detached mount on proxyFD
	// (root callers) rather than as a bind of its host path.
	ProxyFD bool `json:"proxy_fd,omitempty"`

	// Probe makes the init report what it could set up and exit, without
	// running a command (facility detection).
	Probe bool `json:"probe,omitempty"`
}

type mountSpec struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	Writable bool   `json:"writable"`
}

type rlimit struct {
	Resource int    `json:"resource"`
	Value    uint64 `json:"value"`
}

// initStatus is what the init reports on fd 4 when it ends, as one JSON
// object. Stage names the step that failed when Error is set.
type initStatus struct {
	Stage    string `json:"stage,omitempty"`
	Error    string `json:"error,omitempty"`
	Started  bool   `json:"started"`
	ExitCode int    `json:"exit_code"`
	Signal   int    `json:"signal"`
	TmpFull  bool   `json:"tmp_full,omitempty"`
	// SetupNanos is the init's own setup time.
	SetupNanos int64 `json:"setup_ns"`
}
